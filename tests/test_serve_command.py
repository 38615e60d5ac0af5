"""``toolgate serve`` as a real process: it starts, serves the demo tools on a fresh machine,
refuses unsafe addresses, requires keys once they exist, and stops cleanly on SIGTERM / SIGINT
with the audit log flushed."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx
import pytest

from conftest import TOOLGATE, RunCli

pytestmark = pytest.mark.slow

_URL = re.compile(r"toolgate is serving (\d+) tools from (.+) on (http://\S+)")


@dataclass
class Served:
    """A running ``toolgate serve`` process and what it printed."""

    process: subprocess.Popen[str]
    url: str
    banner: list[str]
    stderr_lines: list[str] = field(default_factory=list)

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> tuple[int, str]:
        """Send ``sig`` and wait for the exit; returns the exit code and stderr."""
        self.process.send_signal(sig)
        _, stderr = self.process.communicate(timeout=60)
        return self.process.returncode, stderr


@pytest.fixture
def serve_env(toolgate_home: Path) -> dict[str, str]:
    env = {**os.environ, "TOOLGATE_HOME": str(toolgate_home), "PYTHONIOENCODING": "utf-8"}
    env.pop("COLUMNS", None)
    return env


@contextmanager
def serving(*args: str, cwd: Path, env: dict[str, str]) -> Iterator[Served]:
    """Start ``toolgate serve ARGS`` and wait for its banner; it is always stopped after."""
    process = subprocess.Popen(
        [str(TOOLGATE), "serve", "--port", "0", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    banner: list[str] = []
    try:
        url = None
        deadline = time.monotonic() + 60  # a hang guard, not a performance bound
        while url is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                raise AssertionError(f"toolgate serve exited: {process.communicate()[1]}")
            banner.append(line)
            match = _URL.search(line)
            if match:
                url = match.group(3)
        while not banner[-1].startswith("Press Ctrl+C"):
            line = lines.get(timeout=60)
            assert line is not None
            banner.append(line)
        yield Served(process, url, banner)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=60)
        reader.join(timeout=10)


def test_serve_on_a_fresh_machine_serves_the_demo_tools_and_stops_on_sigterm(
    project: Path, serve_env: dict[str, str], run_cli: RunCli
) -> None:
    with serving(cwd=project, env=serve_env) as served:
        assert "the demo tools (no toolgate.yaml found)" in served.banner[0]
        assert served.url.startswith("http://127.0.0.1:")
        text = "".join(served.banner)
        assert f"{served.url}/v1" in text and f"{served.url}/openapi.json" in text
        assert "'default' agent" in text
        with httpx.Client(base_url=served.url, timeout=30) as client:
            assert client.get("/healthz").json()["status"] == "ok"
            tools = {row["id"] for row in client.get("/v1/tools").json()["tools"]}
            assert {"demo:add", "demo:diff_text", "demo:word_count"} <= tools
            outcome = client.post(
                "/v1/tools/demo:add/call", json={"arguments": {"a": 2, "b": 40}}
            ).json()
            assert outcome["content"] == 42
        code, stderr = served.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert "toolgate stopped." in stderr
    # The audit log was flushed on the way out.
    records = json.loads(run_cli("audit", "list", "--json").stdout)
    assert [(r["tool_id"], r["agent"], r["status"]) for r in records] == [
        ("demo:add", "default", "ok")
    ]


def test_serve_refuses_a_non_loopback_address_without_keys(
    project: Path, serve_env: dict[str, str]
) -> None:
    result = subprocess.run(
        [str(TOOLGATE), "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=project,
        env=serve_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3
    assert "refusing to listen on 0.0.0.0" in result.stderr
    assert "toolgate agents add" in result.stderr
    assert "serving" not in result.stdout


@pytest.mark.parametrize("what", ["approval", "idempotency"])
def test_serve_refuses_a_state_file_a_newer_toolgate_wrote(
    project: Path, serve_env: dict[str, str], run_cli: RunCli, what: str
) -> None:
    assert run_cli("db", "upgrade").returncode == 0
    state = Path(serve_env["TOOLGATE_HOME"]) / "toolgate.db"
    with sqlite3.connect(state) as conn:
        if what == "approval":
            conn.execute("PRAGMA user_version = 99")
        else:
            conn.execute("UPDATE toolgate_components SET version = 99 WHERE name = ?", (what,))
    result = subprocess.run(
        [str(TOOLGATE), "serve", "--port", "0"],
        cwd=project,
        env=serve_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3, result.stderr
    assert f"{state}: the {what} tables have schema version 99" in result.stderr
    assert "upgrade toolgate" in result.stderr and "Traceback" not in result.stderr


def test_once_a_key_exists_every_request_needs_one(
    project: Path, serve_env: dict[str, str], run_cli: RunCli
) -> None:
    (project / "toolgate.yaml").write_text(
        "demo: true\nagents:\n  ops:\n    labels: {role: operator}\n"
    )
    ops = run_cli("agents", "add", "ops").stdout.strip()
    bot = run_cli("agents", "add", "bot").stdout.strip()
    with serving(cwd=project, env=serve_env) as served:
        assert "toolgate.yaml" in served.banner[0]
        assert "every request needs 'Authorization: Bearer KEY'" in "".join(served.banner)
        with httpx.Client(base_url=served.url, timeout=30) as client:
            refused = client.get("/v1/tools")
            assert refused.status_code == 401
            assert refused.headers["content-type"] == "application/problem+json"
            bearer = {"Authorization": f"Bearer {bot}"}
            assert client.get("/v1/me", headers=bearer).json()["agent"] == "bot"
            assert client.get("/v1/approvals", headers=bearer).status_code == 403
            operator = {"Authorization": f"Bearer {ops}"}
            assert client.get("/v1/approvals", headers=operator).json() == {"approvals": []}
            # Revoked by another process while the server runs: refused within the key store's
            # re-read interval (half a second).
            assert run_cli("agents", "revoke", "bot").returncode == 0
            deadline = time.monotonic() + 10
            while client.get("/v1/me", headers=bearer).status_code != 401:
                assert time.monotonic() < deadline, "the revoked key still works"
                time.sleep(0.1)
            assert client.get("/v1/me", headers=operator).status_code == 200
        code, stderr = served.stop(signal.SIGINT)
    assert code == 0, stderr


def test_serve_reads_its_settings_from_the_serve_section(
    project: Path, serve_env: dict[str, str]
) -> None:
    other = project / "other.yaml"
    other.write_text("demo: true\nserve:\n  max_body_bytes: 2048\n")
    with serving("--config", str(other), cwd=project, env=serve_env) as served:
        assert "other.yaml" in served.banner[0]
        with httpx.Client(base_url=served.url, timeout=30) as client:
            big = {"arguments": {"a": 1, "b": 2, "pad": "x" * 4096}}
            response = client.post("/v1/tools/demo:add/call", json=big)
            assert response.status_code == 413
            assert response.json()["code"] == "payload_too_large"
        assert served.stop()[0] == 0


def test_a_busy_port_is_a_clear_error(project: Path, serve_env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(TOOLGATE), "serve", "--port", str(port)],
            cwd=project,
            env=serve_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "--port" in result.stderr
