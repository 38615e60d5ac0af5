"""One message from an upstream MCP server is read no further than its limit (issue 24).

A server that answers with a line far larger than the limit — or one that never ends — fails
that call quickly with ``tool_error`` naming the server, the limit and the setting to raise; the
gateway stops reading (the endless answer proves it: a gateway that buffered lines whole would
never return) and the next call of the same server works. Streamable HTTP servers are held to
the same limit for a JSON body and for an SSE event. The server is
``tests/fixtures/mcp/large_answer_server.py`` (the official SDK), started by the gateway from a
``kind: MCPServer`` resource named in ``toolgate.yaml``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgate import Gateway
from toolgate.config import build_gateway, load_config
from toolgate.errors import ErrorCode
from toolgate.formats.mcp_server.source import parse_mcp_server
from toolgate.model import CallStatus

pytestmark = pytest.mark.slow

SERVER = Path(__file__).parent / "fixtures" / "mcp" / "large_answer_server.py"
MIB = 1024 * 1024


def _write_config(
    project: Path, spec_lines: str, *, global_cap: int | None = None, grant: bool = False
) -> None:
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        "  name: large\n"
        "spec:\n"
        "  sideEffects: {level: read_only}\n"
        "  reconnect: {initialDelaySeconds: 0.1, maxDelaySeconds: 0.5}\n" + spec_lines
    )
    config: dict[str, object] = {"sources": [{"path": "upstream.yaml", "format": "resource"}]}
    if global_cap is not None:
        config["mcp"] = {"max_message_bytes": global_cap}
    if grant:
        config["sandbox"] = {"network_grants": {"MCPServer:large": ["127.0.0.1/32"]}}
    (project / "toolgate.yaml").write_text(json.dumps(config))


def _stdio(project: Path, *, cap_line: str = "", global_cap: int | None = None) -> None:
    _write_config(
        project,
        f"  command: {json.dumps(sys.executable)}\n"
        f"  args: [{json.dumps(str(SERVER))}, stdio]\n" + cap_line,
        global_cap=global_cap,
    )


def _gateway(project: Path, home: Path) -> Gateway:
    return build_gateway(load_config(project / "toolgate.yaml"), home=home, audit="off")


async def _call_until_connected(gateway: Gateway, text: str) -> None:
    """``echo`` works (after a reset the server is reconnecting: wait for it, bounded)."""
    deadline = time.monotonic() + 60
    while True:
        result = await gateway.call("large:echo", {"text": text})
        if result.status is CallStatus.OK:
            # The structured result (the upstream's text block is kept beside it).
            assert result.to_dict()["content"] == {"result": text}
            return
        assert result.code is ErrorCode.UNAVAILABLE, result.message
        assert time.monotonic() < deadline, f"the server did not come back: {result.message}"
        await asyncio.sleep(0.1)


def _assert_cap_message(message: str, cap: str, *, reset: bool) -> None:
    assert "The MCP server large sent a message larger than" in message, message
    assert cap in message, message
    assert "spec.maxMessageBytes of the MCPServer large" in message, message
    assert "mcp.max_message_bytes" in message, message
    assert ("reset the connection" in message) is reset, message


async def test_a_stdio_line_past_the_servers_limit_fails_that_call_and_the_next_works(
    project: Path, toolgate_home: Path
) -> None:
    _stdio(project, cap_line="  maxMessageBytes: 1048576\n")
    gateway = _gateway(project, toolgate_home)
    await gateway.start()
    try:
        await _call_until_connected(gateway, "before")
        result = await gateway.call("large:big", {"size": 5_000_000})
        assert result.code is ErrorCode.TOOL_ERROR, result.message
        _assert_cap_message(result.message or "", "1 MiB (1048576 bytes)", reset=True)
        # The stream was out of step: the connection is rebuilt, and the next call works.
        await _call_until_connected(gateway, "after")
        # Under the limit the same tool answers whole.
        small = await gateway.call("large:big", {"size": 500_000})
        assert small.status is CallStatus.OK, small.message
    finally:
        await gateway.aclose()


async def test_an_endless_stdio_answer_ends_at_the_limit_of_toolgate_yaml(
    project: Path, toolgate_home: Path
) -> None:
    # No spec.maxMessageBytes: the global mcp.max_message_bytes applies. The server writes
    # forever; only a reader that stops at the limit lets this call end before its timeout.
    _stdio(project, global_cap=2 * MIB)
    gateway = _gateway(project, toolgate_home)
    await gateway.start()
    try:
        await _call_until_connected(gateway, "before")
        result = await gateway.call("large:endless", {})
        assert result.code is ErrorCode.TOOL_ERROR, result.message
        _assert_cap_message(result.message or "", "2 MiB (2097152 bytes)", reset=True)
        await _call_until_connected(gateway, "after")
    finally:
        await gateway.aclose()


def test_the_limit_is_checked_when_the_configuration_is_read() -> None:
    def spec(value: object) -> list[str]:
        document = {
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "MCPServer",
            "metadata": {"name": "large"},
            "spec": {"command": "server", "maxMessageBytes": value},
        }
        parsed, problems = parse_mcp_server(document, path="upstream.yaml", pointer="")
        if parsed is not None:
            assert parsed.max_message_bytes == value
        return [f"{p.field}: {p.message}" for p in problems]

    assert spec(4 * MIB) == []
    for bad in (0, 10, "16MB", 2.5, True, 1 << 31):
        problems = spec(bad)
        assert len(problems) == 1, problems
        assert problems[0].startswith("/spec/maxMessageBytes: expected a whole number of bytes")


# -- streamable HTTP ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_listening(process: subprocess.Popen[bytes], port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "the HTTP server exited before listening"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            assert time.monotonic() < deadline, "the HTTP server does not listen"
            time.sleep(0.05)


def _serving(script: Path, *args: str) -> Iterator[str]:
    """Run an HTTP MCP server script on a free port (``{port}`` in ``args``); its URL."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), *(a.format(port=port) for a in args)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_listening(process, port)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture(params=["json", "sse"])
def http_server(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serving(SERVER, "http", "{port}", request.param)


async def test_an_http_answer_past_the_limit_fails_that_call_only(
    project: Path, toolgate_home: Path, http_server: str
) -> None:
    _write_config(
        project,
        f"  url: {http_server}\n  maxMessageBytes: 2097152\n",
        grant=True,
    )
    gateway = _gateway(project, toolgate_home)
    await gateway.start()
    try:
        await _call_until_connected(gateway, "before")
        result = await gateway.call("large:big", {"size": 5_000_000})
        assert result.code is ErrorCode.TOOL_ERROR, result.message
        # Each answer is its own response: the connection stays in step and is kept.
        _assert_cap_message(result.message or "", "2 MiB (2097152 bytes)", reset=False)
        after = await gateway.call("large:echo", {"text": "after"})
        assert after.status is CallStatus.OK, after.message
        # The answer carries the text twice (content and structuredContent): about 1.6 MB,
        # past the SDK's own 1 MiB event limit, under ours: read whole.
        ours = await gateway.call("large:big", {"size": 800_000})
        assert ours.status is CallStatus.OK, ours.message
    finally:
        await gateway.aclose()


async def test_a_tool_listing_past_the_limit_ends_the_connect_at_once_and_says_why(
    project: Path, toolgate_home: Path
) -> None:
    """Found by the review: a ``tools/list`` answer over the limit left the connect waiting for
    its 30 s timeout, which was then given as the reason. It ends at once, naming the limit."""
    _stdio(
        project,
        cap_line="  maxMessageBytes: 1048576\n  env: {LARGE_LISTING: '3000000'}\n",
    )
    gateway = _gateway(project, toolgate_home)
    started = time.monotonic()
    await gateway.start()
    try:
        while True:
            problems = [d.message for d in gateway.diagnostics() if "large" in d.message]
            if any("larger than" in message for message in problems):
                break
            # The bound only catches the old 30 s wait for an answer that never comes.
            assert time.monotonic() - started < 25, problems
            await asyncio.sleep(0.1)
        (message,) = [m for m in problems if "larger than" in m]
        assert "1 MiB (1048576 bytes)" in message and "spec.maxMessageBytes" in message
        assert "no answer within" not in message
    finally:
        await gateway.aclose()


@pytest.fixture
def deaf_server() -> Iterator[str]:
    """``deaf_http_server.py``: answers a call it was told to cancel anyway."""
    yield from _serving(SERVER.with_name("deaf_http_server.py"), "{port}")


async def test_an_oversized_answer_to_a_call_that_already_ended_blames_no_later_call(
    project: Path, toolgate_home: Path, deaf_server: str
) -> None:
    """Found by the review: the answer of a call that had timed out came later, over the
    limit, and its "too large" was given as the reason of the next call that failed."""
    _write_config(
        project,
        f"  url: {deaf_server}\n  maxMessageBytes: 1048576\n  timeoutSeconds: 1\n",
        grant=True,
    )
    gateway = _gateway(project, toolgate_home)
    await gateway.start()
    try:
        assert (await gateway.call("large:echo", {"text": "x"})).status is CallStatus.OK
        late = await gateway.call("large:slow_big", {"size": 3_000_000, "seconds": 1.5})
        assert late.code is ErrorCode.TIMEOUT, late.message
        await asyncio.sleep(1.5)  # its answer arrives now, for nobody, and is cut at the limit
        assert (await gateway.call("large:echo", {"text": "fine"})).status is CallStatus.OK
        failed = await gateway.call("large:fail", {})
        assert failed.code is ErrorCode.TOOL_ERROR, failed.message
        assert "upstream says no" in (failed.message or ""), failed.message
        assert "larger than" not in (failed.message or "")
    finally:
        await gateway.aclose()
