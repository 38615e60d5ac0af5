"""A caller that goes away, over MCP: a client that cancels its ``tools/call`` (the SDK sends
``notifications/cancelled``, or at 2026-07-28 over HTTP closes the call's POST), drops its
connection, or closes ``toolgate mcp``'s stdin cuts the call off — the script's processes die,
its marker is never written, the audit log records the call ``cancelled`` — unless the tool has
an idempotency key: then the call runs to its end and the retry is answered from its record.

Driven by the official ``mcp`` client against ``toolgate serve`` and ``toolgate mcp``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from serve_support import TOOLGATE, serving
from test_caller_gone import alive, assert_cut_off, audit_records, script_pids, tool_home, wait_for
from test_mcp_server_helpers import text_of

pytestmark = pytest.mark.slow


@dataclass
class Served:
    url: str
    project: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    project = tmp_path_factory.mktemp("caller-gone-mcp")
    env = tool_home(project)
    with serving(project, env) as (url, _):
        yield Served(url, project, env)


@pytest.fixture
def project(tmp_path: Path) -> Served:
    """A project of its own for ``toolgate mcp`` (no server: the URL is empty)."""
    return Served("", tmp_path, tool_home(tmp_path))


async def _until(check: Callable[[], Any], what: str, seconds: float = 30) -> None:
    """Wait (without blocking the client's event loop) until ``check()`` holds."""
    deadline = anyio.current_time() + seconds
    while not check():
        assert anyio.current_time() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.05)


async def _call_then_cancel(call: Callable[[], Awaitable[Any]], started: Path) -> None:
    """Start ``call``, wait until the tool has started (``started`` exists), then cancel the
    task that awaits it: what an agent does when its user stops it."""
    async with anyio.create_task_group() as group:
        group.start_soon(call)
        await _until(started.exists, "the tool to start")
        group.cancel_scope.cancel()


def _audit_cli(project: Served, *args: str) -> list[dict[str, Any]]:
    """``toolgate audit list … --json`` in the project."""
    done = subprocess.run(
        [TOOLGATE, "audit", "list", *args, "--json"],
        cwd=project.project,
        env=project.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    records: list[dict[str, Any]] = json.loads(done.stdout)
    return records


# -- streamable HTTP --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "progress"),
    [
        # 2026-07-28: the client cancels by closing the call's POST; the fast path answers it.
        pytest.param("auto", False, id="2026 fast path"),
        # A progress token sends the call through the SDK's own 2026-07-28 handler.
        pytest.param("auto", True, id="2026 SDK path"),
        # A handshake-era session: the client sends notifications/cancelled.
        pytest.param("legacy", False, id="handshake era"),
    ],
)
async def test_a_client_that_cancels_its_call_over_http_cuts_it_off(
    served: Served, tmp_path: Path, mode: str, progress: bool
) -> None:
    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        pass

    async with Client(streamable_http_client(served.url + "/mcp"), mode=mode) as client:
        await _call_then_cancel(
            lambda: client.call_tool(
                "local__slow",
                {"work": str(tmp_path)},
                progress_callback=progressed if progress else None,
            ),
            tmp_path / "sleep.pid",
        )
        # The session stays open: the cancellation alone cuts the call off.
        pids = script_pids(tmp_path)
        await anyio.to_thread.run_sync(
            lambda: assert_cut_off(tmp_path, pids, lambda: audit_records(served.url, "local:slow"))
        )


CLIENT = """
import sys

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    async with Client(streamable_http_client(sys.argv[1])) as client:
        await client.call_tool("local__slow", {"work": sys.argv[2]})


anyio.run(main)
"""


def test_a_client_whose_connection_drops_mid_call_cuts_it_off(
    served: Served, tmp_path: Path
) -> None:
    """A client process killed while its call runs: its connection drops, nothing is sent."""
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(CLIENT), encoding="utf-8")
    client = subprocess.Popen(
        [sys.executable, str(script), served.url + "/mcp", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (tmp_path / "sleep.pid").exists() or client.poll() is not None, "start")
        assert client.poll() is None, client.stderr.read() if client.stderr else ""
        client.send_signal(signal.SIGKILL)
        client.wait(30)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(30)
    pids = script_pids(tmp_path)
    assert_cut_off(tmp_path, pids, lambda: audit_records(served.url, "local:slow"))


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_idempotent_call_runs_to_its_end_and_its_retry_is_replayed(
    served: Served, tmp_path: Path, mode: str
) -> None:
    arguments = {"key": f"mcp-{mode}", "work": str(tmp_path)}
    async with Client(streamable_http_client(served.url + "/mcp"), mode=mode) as client:
        await _call_then_cancel(
            lambda: client.call_tool("py__slow_once", arguments), tmp_path / "started"
        )
        await _until((tmp_path / "marker").exists, "the call to finish")
        retry = await client.call_tool("py__slow_once", arguments)
    assert not retry.is_error and text_of(retry) == f"done mcp-{mode}"
    # The tool ran once: the retry was answered from the first call's record.
    assert (tmp_path / "runs").read_text() == f"mcp-{mode}\n"
    # The first call's record says it ended ok (the audit log is written in the background).
    mine = wait_for(
        lambda: [r for r in audit_records(served.url, "py:slow_once") if r["args"] == arguments],
        "the call's audit record",
    )
    assert all(r["status"] == "ok" for r in mine), mine


# -- stdio ------------------------------------------------------------------------------------


def _stdio(project: Served) -> StdioServerParameters:
    return StdioServerParameters(
        command=TOOLGATE, args=["mcp"], env=project.env, cwd=str(project.project)
    )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_client_that_cancels_its_call_over_stdio_cuts_it_off(
    project: Served, mode: str
) -> None:
    work = project.project / "work"
    with (project.project / "stderr.txt").open("w") as errlog:
        async with Client(stdio_client(_stdio(project), errlog=errlog), mode=mode) as client:
            await _call_then_cancel(
                lambda: client.call_tool("local__slow", {"work": str(work)}), work / "sleep.pid"
            )
            pids = script_pids(work)
            await anyio.to_thread.run_sync(
                lambda: assert_cut_off(
                    work, pids, lambda: _audit_cli(project, "--tool", "local:slow")
                )
            )
    # The operator finds it with the CLI, by its code.
    found = _audit_cli(project, "--status", "cancelled")
    assert [r["tool_id"] for r in found] == ["local:slow"], found


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


def test_a_client_that_closes_stdin_mid_call_cuts_it_off(project: Served) -> None:
    """The client closes ``toolgate mcp``'s stdin while a call runs and waits for it to exit
    (no signal: the SDK's client would kill the whole process tree after 2 s)."""
    work = project.project / "work"
    server = subprocess.Popen(
        [TOOLGATE, "mcp"],
        cwd=project.project,
        env=project.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(
            _line(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "leaver", "version": "1"},
                    },
                }
            )
        )
        server.stdin.flush()
        assert json.loads(server.stdout.readline())["id"] == 1
        server.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        server.stdin.write(
            _line(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "local__slow", "arguments": {"work": str(work)}},
                }
            )
        )
        server.stdin.flush()
        wait_for((work / "sleep.pid").exists, "the tool to start")
        pids = script_pids(work)
        server.stdin.close()
        # Well before the 60 s sleep would end.
        assert server.wait(40) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(30)
    assert not any(alive(pid) for pid in pids)
    assert_cut_off(work, pids, lambda: _audit_cli(project, "--tool", "local:slow"))
