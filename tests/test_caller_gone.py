"""A caller that goes away: ``toolgate serve`` cancels its call — the script's processes die, the
audit log records the call ``cancelled`` — unless the tool has an idempotency key: then the call
runs to its end and the caller's retry with the same key receives the outcome, replayed."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
import yaml

from serve_support import serving

pytestmark = pytest.mark.slow

SCRIPT = """#!/usr/bin/env bash
# The arguments arrive as one JSON line on stdin: {{"work": "<folder>", ...}}
work=$(sed -n 's/.*"work": *"\\([^"]*\\)".*/\\1/p')
work=${{work:-{default}}}
echo $$ > "$work/script.pid"
sleep 60 &
echo $! > "$work/sleep.pid"
wait
touch "$work/marker"
echo '{{"done": true}}'
"""

TOOL_MD = """---
name: slow
script: slow.sh
runtime: bash
timeout: 90000
inputSchema:
  type: object
  properties:
    work: {type: string}
outputSchema:
  type: object
  properties:
    done: {type: boolean}
---

Sleep for 60 s, then leave a marker in `work` (by default, the project's `work` folder).
"""

TOOLS_PY = """
import asyncio
import pathlib

from toolgate import tool


@tool(namespace="py", idempotency_key="{{ args.key }}", timeout=30)
async def slow_once(key: str, work: str) -> str:
    \"\"\"Note the start (a line in ``runs``), sleep 2 s, then leave a marker.\"\"\"
    with pathlib.Path(work, "runs").open("a") as runs:
        runs.write(key + "\\n")
    pathlib.Path(work, "started").write_text(key)
    await asyncio.sleep(2)
    pathlib.Path(work, "marker").write_text(key)
    return "done " + key
"""


def tool_home(tmp_path: Path) -> dict[str, str]:
    """A project in ``tmp_path`` serving ``local:slow`` (the script; its work folder, unless
    given, is ``tmp_path / "work"``) and ``py:slow_once`` (an idempotency-keyed Python tool): the
    environment to run ``toolgate`` in it with."""
    folder = tmp_path / "home" / "tools" / "slow"
    folder.mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (folder / "tool.md").write_text(TOOL_MD, encoding="utf-8")
    script = SCRIPT.format(default=tmp_path / "work")
    (folder / "slow.sh").write_text(script, encoding="utf-8")
    (folder / "slow.sh").chmod(0o755)
    (tmp_path / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (tmp_path / "toolgate.yaml").write_text(yaml.safe_dump({"python": ["tools.py"]}))
    return {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}


@dataclass
class Served:
    url: str
    project: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp_path = tmp_path_factory.mktemp("caller-gone")
    with serving(tmp_path, tool_home(tmp_path)) as (url, _):
        yield Served(url, tmp_path)


def wait_for(check: Callable[[], Any], what: str, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _call_then_leave(url: str, tool_id: str, body: Any, started: Path) -> None:
    """POST a call (``body`` as JSON) on a raw connection, wait until the tool has started, then
    close it."""
    parts = urlsplit(url)
    sent = json.dumps(body).encode()
    with socket.create_connection((parts.hostname, parts.port)) as sock:
        head = (
            f"POST /v1/tools/{tool_id}/call HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(sent)}\r\n\r\n"
        )
        sock.sendall(head.encode() + sent)
        wait_for(started.exists, f"{tool_id} to start")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone in all but name.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


def script_pids(work: Path) -> tuple[int, int]:
    """The pids of ``local:slow``'s script and of its ``sleep``, once both are written."""
    return (
        int(wait_for(lambda: (work / "script.pid").read_text().strip(), "the script's pid")),
        int(wait_for(lambda: (work / "sleep.pid").read_text().strip(), "the sleep's pid")),
    )


def assert_cut_off(
    work: Path,
    pids: tuple[int, int],
    records: Callable[[], list[dict[str, Any]]],
    args: dict[str, Any] | None = None,
) -> None:
    """The call of ``local:slow`` in ``work`` was cut off: its processes die, its marker is never
    written, and ``records()`` (the audit's records of the tool) comes to hold it (by its
    ``args``, default ``{"work": work}``), ``cancelled`` as cut off by its caller."""
    args = {"work": str(work)} if args is None else args
    wait_for(lambda: not any(alive(pid) for pid in pids), "the processes to die")
    found = wait_for(
        lambda: [r for r in records() if r.get("args") == args],
        "the audit record",
    )
    assert len(found) == 1, found
    record = found[0]
    assert record["status"] == "error" and record["code"] == "cancelled", record
    assert "local:slow was cancelled after" in record["message"], record
    assert "its caller went away" in record["message"], record
    assert not (work / "marker").exists()


def audit_records(url: str, tool_id: str) -> list[dict[str, Any]]:
    """The audit's records of ``tool_id``, from ``GET /v1/audit``."""
    answer = httpx2.get(url + "/v1/audit", params={"tool": tool_id, "limit": 500}, timeout=30)
    assert answer.status_code == 200, answer.text
    records: list[dict[str, Any]] = answer.json()["records"]
    return records


def test_a_caller_that_goes_away_cancels_its_call_and_the_script_dies(
    served: Served, tmp_path: Path
) -> None:
    url = served.url
    _call_then_leave(
        url, "local:slow", {"arguments": {"work": str(tmp_path)}}, tmp_path / "sleep.pid"
    )
    assert_cut_off(tmp_path, script_pids(tmp_path), lambda: audit_records(url, "local:slow"))
    # The operator finds such calls by their code.
    answer = httpx2.get(url + "/v1/audit", params={"code": "cancelled"}, timeout=30)
    assert answer.status_code == 200, answer.text
    found = answer.json()["records"]
    assert any(r["args"] == {"work": str(tmp_path)} for r in found), found
    assert {r["code"] for r in found} == {"cancelled"}, found


def test_a_call_answered_by_the_fastapi_route_is_cut_off_alike(served: Served) -> None:
    """A body of ``null`` is no call body to the fast path, which hands the request to the
    FastAPI route; there it is a call without arguments (``local:slow`` then works in the
    project's ``work`` folder)."""
    work = served.project / "work"
    _call_then_leave(served.url, "local:slow", None, work / "sleep.pid")
    records = lambda: audit_records(served.url, "local:slow")  # noqa: E731
    assert_cut_off(work, script_pids(work), records, args={})


def test_a_call_with_an_idempotency_key_runs_to_its_end_and_the_retry_gets_it(
    served: Served, tmp_path: Path
) -> None:
    url = served.url
    arguments = {"key": "k-1", "work": str(tmp_path)}
    _call_then_leave(url, "py:slow_once", {"arguments": arguments}, tmp_path / "started")
    wait_for((tmp_path / "marker").exists, "the call to finish")
    retry = httpx2.post(
        url + "/v1/tools/py:slow_once/call", json={"arguments": arguments}, timeout=60
    )
    body = retry.json()
    assert body["status"] == "ok" and body["content"] == "done k-1", body
    assert body["metadata"]["idempotency"]["replayed"] is True, body
    assert (tmp_path / "runs").read_text() == "k-1\n"
    records = wait_for(
        lambda: [r for r in audit_records(url, "py:slow_once") if r["status"] == "ok"],
        "the first call's record",
    )
    assert records
