"""A person's decision reaches a running ``toolgate serve`` (issue 23).

A real ``toolgate serve`` subprocess and the real CLI, run as its own processes against the same
``$TOOLGATE_HOME``, on the embedded SQLite state (and on PostgreSQL below): the CLI only records
the decision, the agent's retry on the server runs the approved call exactly once — in the
server's process — whatever the person looked at first (``approvals list`` used to make the server
read a stale copy of the database for good).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from postgres_support import scratch_database
from serve_support import TOOLGATE, serving

pytestmark = pytest.mark.slow

# Each run of the tool appends "<pid> <text>" to ran.log: how often it ran, and in which process.
TOOLS = '''
import os
from toolgate import tool

@tool(effect="external_write")
def send(text: str) -> str:
    """Send a message."""
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(f"{os.getpid()} {text}\\n")
    return f"sent {text}"
'''


@dataclass
class Served:
    """A running ``toolgate serve`` and what the CLI needs to act on the same state."""

    url: str
    pid: int
    folder: Path
    env: dict[str, str]
    ran_log: Path

    def call(self, text: str) -> dict[str, Any]:
        """The agent's call of ``tools:send`` over the HTTP API."""
        answer = httpx.post(
            f"{self.url}/v1/tools/tools:send/call",
            json={"arguments": {"text": text}},
            timeout=30,
        )
        body: dict[str, Any] = answer.json()
        return body

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real CLI, as a person runs it in the same folder."""
        return subprocess.run(
            [TOOLGATE, *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def runs(self, text: str) -> list[int]:
        """The pids of the processes that ran the tool with ``text``."""
        if not self.ran_log.exists():
            return []
        lines = self.ran_log.read_text().splitlines()
        return [int(line.split()[0]) for line in lines if line.split(maxsplit=1)[1] == text]


@contextmanager
def _serve(folder: Path, config: str | None) -> Iterator[Served]:
    folder.mkdir(parents=True, exist_ok=True)
    ran_log = folder / "ran.log"
    env = {**os.environ, "TOOLGATE_HOME": str(folder / "home"), "RAN_LOG": str(ran_log)}
    if config is not None:
        (folder / "tools.py").write_text(TOOLS)
        (folder / "toolgate.yaml").write_text(config)
        if "state:" in config:  # a new shared database gets its tables first, as the guide says
            upgrade = subprocess.run(
                [TOOLGATE, "db", "upgrade"], cwd=folder, env=env, capture_output=True, text=True
            )
            assert upgrade.returncode == 0, upgrade.stderr
    with serving(folder, env) as (url, pid):
        yield Served(url, pid, folder, env, ran_log)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with _serve(tmp_path_factory.mktemp("round-trip"), "python:\n  - ./tools.py\n") as running:
        yield running


def _pending_id(answer: dict[str, Any]) -> str:
    assert answer["status"] == "pending_approval", answer
    request_id: str = answer["approval"]["id"]
    return request_id


def test_an_approval_from_the_cli_reaches_the_server_and_the_retry_runs_it_once(
    served: Served,
) -> None:
    request_id = _pending_id(served.call("list first"))
    # What a person does first: look at the queue (read-only, twice), then approve.
    for _ in range(2):
        listed = served.cli("approvals", "list")
        assert listed.returncode == 0 and request_id in listed.stdout, listed.stderr
    approved = served.cli("approvals", "approve", request_id)
    assert approved.returncode == 0, approved.stderr
    assert "Nothing ran here" in approved.stderr and "runs it, once" in approved.stderr
    assert served.runs("list first") == []  # the decision ran nothing, anywhere

    retried = served.call("list first")
    assert retried["status"] == "ok" and retried["text"] == "sent list first", retried
    assert served.runs("list first") == [served.pid]  # once, in the server, for the agent
    shown = httpx.get(f"{served.url}/v1/approvals/{request_id}", timeout=10).json()
    assert shown["approval"]["status"] == "delivered"
    assert shown["outcome"]["text"] == "sent list first"

    # The approval was single-use: the same call again asks anew and runs nothing.
    again = _pending_id(served.call("list first"))
    assert again != request_id and served.runs("list first") == [served.pid]


def test_a_denial_from_the_cli_reaches_the_server(served: Served) -> None:
    request_id = _pending_id(served.call("deny me"))
    denied = served.cli("approvals", "deny", request_id, "-m", "not today")
    assert denied.returncode == 0, denied.stderr
    retried = served.call("deny me")
    assert retried["status"] == "error" and retried["code"] == "user_rejection", retried
    assert "not today" in retried["message"]
    assert served.runs("deny me") == []


def test_always_allow_from_the_cli_stops_the_server_asking_until_revoked(served: Served) -> None:
    request_id = _pending_id(served.call("always one"))
    allowed = served.cli("approvals", "approve", request_id, "--always")
    assert allowed.returncode == 0, allowed.stderr
    grant_id = re.search(r"Grant (grt_[0-9a-f]+)", allowed.stderr)
    assert grant_id, allowed.stderr
    assert served.call("always one")["status"] == "ok"  # the approved call itself
    assert served.call("always two")["status"] == "ok"  # other arguments: the grant covers them
    assert served.runs("always one") == [served.pid] and served.runs("always two") == [served.pid]

    revoked = served.cli("grants", "revoke", grant_id.group(1))
    assert revoked.returncode == 0, revoked.stderr
    _pending_id(served.call("always three"))
    assert served.runs("always three") == []


def test_approve_with_run_runs_it_in_the_cli_and_the_retry_only_collects(served: Served) -> None:
    request_id = _pending_id(served.call("run here"))
    approved = served.cli("approvals", "approve", request_id, "--run")
    assert approved.returncode == 0, approved.stderr
    assert "sent run here" in approved.stdout and "it ran now" in approved.stderr
    (ran_in,) = served.runs("run here")
    assert ran_in != served.pid  # the person asked for it: it ran in the CLI's own process
    retried = served.call("run here")
    assert retried["status"] == "ok" and retried["text"] == "sent run here", retried
    assert served.runs("run here") == [ran_in]  # collected, not run again


def test_an_expired_request_cannot_be_approved_from_the_cli(tmp_path: Path) -> None:
    config = "python:\n  - ./tools.py\napproval:\n  expires_after: 1\n"
    with _serve(tmp_path, config) as served:
        request_id = _pending_id(served.call("too late"))
        time.sleep(1.2)
        refused = served.cli("approvals", "approve", request_id)
        assert refused.returncode == 1 and "expired" in refused.stderr, refused.stderr
        assert _pending_id(served.call("too late")) != request_id  # a new request
        assert served.runs("too late") == []


def test_the_demo_servers_pending_call_is_approved_with_the_command_it_names(
    tmp_path: Path,
) -> None:
    """No toolgate.yaml: the server serves the demo tools, and the command its answer names
    works from the same folder."""
    with _serve(tmp_path, None) as served:
        arguments = {"to": "Ada", "text": "hello"}
        answer = httpx.post(
            f"{served.url}/v1/tools/demo:send_message/call",
            json={"arguments": arguments},
            timeout=30,
        ).json()
        request_id = _pending_id(answer)
        command = answer["approval"]["cli"]
        assert command == f"toolgate approvals approve {request_id}"
        approved = served.cli(*command.split()[1:])
        assert approved.returncode == 0, approved.stderr
        retried = httpx.post(
            f"{served.url}/v1/tools/demo:send_message/call",
            json={"arguments": arguments},
            timeout=30,
        ).json()
        assert retried["status"] == "ok", retried
        # The CLI knows the demo tools too, so a person may also run one here explicitly.
        other = httpx.post(
            f"{served.url}/v1/tools/demo:send_message/call",
            json={"arguments": {"to": "Bob", "text": "hi"}},
            timeout=30,
        ).json()
        ran = served.cli("approvals", "approve", _pending_id(other), "--run")
        assert ran.returncode == 0 and "it ran now" in ran.stderr, ran.stderr


def test_an_approval_from_the_cli_reaches_a_server_on_postgresql(tmp_path: Path) -> None:
    with scratch_database() as url:
        config = f"python:\n  - ./tools.py\nstate: {json.dumps(url)}\n"
        with _serve(tmp_path, config) as served:
            request_id = _pending_id(served.call("on postgres"))
            assert served.cli("approvals", "list").returncode == 0
            approved = served.cli("approvals", "approve", request_id)
            assert approved.returncode == 0, approved.stderr
            assert served.runs("on postgres") == []
            assert served.call("on postgres")["status"] == "ok"
            assert served.runs("on postgres") == [served.pid]


def test_a_second_store_on_the_same_file_keeps_the_first_ones_view_fresh(tmp_path: Path) -> None:
    """The server opens several stores on one file; another process closing the database must
    still see them and leave the WAL alone (opening the file outside SQLite dropped the first
    connection's locks, and that process deleted the WAL under the server)."""
    from toolgate.stores.sqlite_approvals import SQLiteApprovalStore
    from toolgate.stores.sqlite_db import SQLiteDatabase

    path = tmp_path / "toolgate.db"
    with SQLiteApprovalStore(path) as server_view:
        second = SQLiteDatabase(path, component="extra")  # as the idempotency store does
        try:
            writer = (
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                "c.execute('CREATE TABLE seen (x)'); c.commit(); c.close()"
            )
            subprocess.run([sys.executable, "-c", writer, str(path)], check=True)
            assert Path(f"{path}-wal").exists()  # not checkpointed away by the other process
            with server_view._db.read() as conn:  # the first connection sees the new table
                found = conn.execute("SELECT name FROM sqlite_master WHERE name = 'seen'")
                assert found.fetchone() is not None
        finally:
            second.close()
