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

SCRIPT = """#!/usr/bin/env bash
cat >/dev/null
echo $$ > {work}/script.pid
sleep 60 &
echo $! > {work}/sleep.pid
wait
touch {work}/marker
echo '{{"done": true}}'
"""

TOOL_MD = """---
name: slow
script: slow.sh
runtime: bash
timeout: 90000
inputSchema:
  type: object
  properties: {}
outputSchema:
  type: object
  properties:
    done: {type: boolean}
---

Sleep for 60 s, then leave a marker.
"""

TOOLS_PY = """
import asyncio
import pathlib

from toolgate import tool


@tool(namespace="py", idempotency_key="{{ args.key }}", timeout=30)
async def slow_once(key: str, work: str) -> str:
    \"\"\"Note the start, sleep 2 s, then leave a marker.\"\"\"
    pathlib.Path(work, "started").write_text(key)
    await asyncio.sleep(2)
    pathlib.Path(work, "marker").write_text(key)
    return "done " + key
"""


@dataclass
class Served:
    url: str
    work: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp_path = tmp_path_factory.mktemp("caller-gone")
    work = tmp_path / "work"
    work.mkdir()
    folder = tmp_path / "home" / "tools" / "slow"
    folder.mkdir(parents=True)
    (folder / "tool.md").write_text(TOOL_MD, encoding="utf-8")
    (folder / "slow.sh").write_text(SCRIPT.format(work=work), encoding="utf-8")
    (folder / "slow.sh").chmod(0o755)
    (tmp_path / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (tmp_path / "toolgate.yaml").write_text(yaml.safe_dump({"python": ["tools.py"]}))
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}
    with serving(tmp_path, env) as (url, _):
        yield Served(url, work)


def _wait_for(check: Callable[[], Any], what: str, seconds: float = 30) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _call_then_leave(url: str, tool_id: str, arguments: dict[str, Any], started: Path) -> None:
    """POST a call on a raw connection, wait until the tool has started, then close it."""
    parts = urlsplit(url)
    body = json.dumps({"arguments": arguments}).encode()
    with socket.create_connection((parts.hostname, parts.port)) as sock:
        head = (
            f"POST /v1/tools/{tool_id}/call HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        _wait_for(started.exists, f"{tool_id} to start")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone in all but name.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"


def _audit(url: str, tool_id: str) -> list[dict[str, Any]]:
    answer = httpx2.get(url + "/v1/audit", params={"tool": tool_id}, timeout=30)
    assert answer.status_code == 200, answer.text
    records: list[dict[str, Any]] = answer.json()["records"]
    return records


def test_a_caller_that_goes_away_cancels_its_call_and_the_script_dies(served: Served) -> None:
    pid_file = served.work / "sleep.pid"
    _call_then_leave(served.url, "local:slow", {}, pid_file)
    script = int(_wait_for(lambda: (served.work / "script.pid").read_text().strip(), "the pid"))
    sleeper = int(_wait_for(lambda: pid_file.read_text().strip(), "the sleep's pid"))
    _wait_for(lambda: not _alive(script) and not _alive(sleeper), "the processes to die")
    records = _wait_for(lambda: _audit(served.url, "local:slow"), "the audit record")
    assert len(records) == 1
    record = records[0]
    assert record["status"] == "error" and record["code"] == "cancelled", record
    assert "its caller went away" in record["message"]
    assert not (served.work / "marker").exists()


def test_a_call_with_an_idempotency_key_runs_to_its_end_and_the_retry_gets_it(
    served: Served,
) -> None:
    work = served.work / "py"
    work.mkdir()
    arguments = {"key": "k-1", "work": str(work)}
    _call_then_leave(served.url, "py:slow_once", arguments, work / "started")
    _wait_for((work / "marker").exists, "the call to finish")
    retry = httpx2.post(
        served.url + "/v1/tools/py:slow_once/call", json={"arguments": arguments}, timeout=60
    )
    body = retry.json()
    assert body["status"] == "ok" and body["content"] == "done k-1", body
    assert body["metadata"]["idempotency"]["replayed"] is True, body
    records = _wait_for(
        lambda: [r for r in _audit(served.url, "py:slow_once") if r["status"] == "ok"],
        "the first call's record",
    )
    assert records
