"""Kept upstream connections (issue 26) after their review: an answer with more bytes than it
declared never reaches the next caller; clients of closed event loops are freed; idle
connections are closed after their expiry; ``gateway.close()`` closes the kept sockets.

A real upstream process (``fixtures/upstream/misframing_server.py``, whose Content-Length counts
characters) and a real gateway built from a ``toolgate.yaml``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolgate import Gateway
from toolgate.config.build import load_gateway
from toolgate.model import CallStatus

SERVER = Path(__file__).parent / "fixtures" / "upstream" / "misframing_server.py"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def upstream() -> Iterator[int]:
    port = _free_port()
    process = subprocess.Popen([sys.executable, str(SERVER), str(port)])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the upstream did not start") from None
                time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait()


def _tool(name: str, url: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: joch.dev/v1alpha1
        kind: Tool
        metadata:
          name: {name}
          namespace: rest
        spec:
          type: rest
          description: test tool
          endpoint:
            method: POST
            url: {url}
          inputSchema:
            type: object
            properties: {{"text": {{"type": "string"}}}}
          sideEffects:
            level: read_only
        """)


@pytest.fixture
def make_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[list[Gateway], object]]:
    made: list[Gateway] = []

    def make(port: int) -> Gateway:
        docs = [
            _tool("render", f"http://127.0.0.1:{port}/render"),
            _tool("ok", f"http://127.0.0.1:{port}/ok"),
            _tool("late", f"http://127.0.0.1:{port}/late"),
        ]
        (tmp_path / "up.yaml").write_text("---\n".join(docs))
        (tmp_path / "toolgate.yaml").write_text(
            "sources:\n  - path: ./up.yaml\nsandbox:\n  network_grants:\n"
            "    rest:render: [127.0.0.1/32]\n    rest:ok: [127.0.0.1/32]\n"
            "    rest:late: [127.0.0.1/32]\n"
            "audit:\n  enabled: false\n"
        )
        monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "home"))
        gateway = load_gateway(tmp_path / "toolgate.yaml", approver=None, audit="off")
        made.append(gateway)
        return gateway

    yield made, make
    for gateway in made:
        gateway.close()


def _sockets_to(port: int, state: str | None = "01") -> int:
    """This process's TCP sockets whose peer is 127.0.0.1:port (``state``: /proc's hex code,
    01 = established; ``None``: any state)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    count = 0
    with open("/proc/net/tcp") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            remote, st, inode = fields[2], fields[3], fields[9]
            ours = inode in inodes and int(remote.split(":")[1], 16) == port
            if ours and (state is None or st == state):
                count += 1
    return count


pytestmark = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="counts sockets through /proc"
)


def test_bytes_past_a_declared_length_never_become_another_callers_answer(
    upstream: int, make_gateway: tuple[list[Gateway], object]
) -> None:
    _made, make = make_gateway
    gateway = make(upstream)  # type: ignore[operator]
    forged = '{"balance": 0, "note": "sent by agent A"}'
    payload = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(forged)}\r\n\r\n" + forged
    )
    text = "\u00e9" * len(payload) + payload  # the characters' count leaves `payload` unread
    a = gateway.call_sync("rest:render", {"text": text}, agent="agent-a")
    b = gateway.call_sync("rest:render", {"text": "hello from B"}, agent="agent-b")
    c = gateway.call_sync("rest:render", {"text": "hello from C"}, agent="agent-c")
    assert a.status is CallStatus.OK
    assert "sent by agent A" not in str(a.content) or str(a.content).startswith("\u00e9")
    assert b.status is CallStatus.OK and b.content == "hello from B", (b.content, b.message)
    assert c.status is CallStatus.OK and c.content == "hello from C", (c.content, c.message)


def test_bytes_an_upstream_sends_late_never_become_another_callers_answer(
    upstream: int, make_gateway: tuple[list[Gateway], object]
) -> None:
    # The tail arrives 50 ms after a well-framed answer: no check at hand-out can see it, so a
    # connection is never used for a second call (a second attack on kept connections).
    _made, make = make_gateway
    gateway = make(upstream)  # type: ignore[operator]
    forged = '{"balance": 0, "note": "sent by agent A"}'
    payload = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(forged)}\r\n\r\n" + forged
    )
    a = gateway.call_sync("rest:late", {"text": payload}, agent="agent-a")
    assert a.status is CallStatus.OK and a.content == {"who": payload}, (a.content, a.message)
    for agent in ("agent-b", "agent-c"):  # at once: the tail arrives while B waits
        text = f"hello from {agent}"
        outcome = gateway.call_sync("rest:late", {"text": text}, agent=agent)
        assert outcome.status is CallStatus.OK, outcome.message
        assert outcome.content == {"who": text}, outcome.content


def test_calls_each_on_its_own_asyncio_run_leave_a_bounded_number_of_sockets(
    upstream: int, make_gateway: tuple[list[Gateway], object]
) -> None:
    _made, make = make_gateway
    gateway = make(upstream)  # type: ignore[operator]
    for i in range(60):
        out = asyncio.run(gateway.call("rest:ok", {"text": str(i)}))
        assert out.status is CallStatus.OK, out.message
        assert out.content == {"who": str(i)}
    gc.collect()
    # The last loop's client (its loop closed since) until the next call; nothing before it.
    assert _sockets_to(upstream) <= 1
    assert _sockets_to(upstream, None) <= 1


def test_no_socket_outlives_its_call_or_the_gateway(
    upstream: int, make_gateway: tuple[list[Gateway], object]
) -> None:
    made, make = make_gateway
    gateway = make(upstream)  # type: ignore[operator]
    for name in ("ok", "render"):
        assert gateway.call_sync(f"rest:{name}", {"text": "x"}).status is CallStatus.OK
    assert _sockets_to(upstream) == 0  # a REST connection serves one call
    gateway.close()
    made.remove(gateway)
    assert _sockets_to(upstream) == 0


def test_a_loop_closed_after_a_call_leaves_no_pending_task(
    upstream: int, make_gateway: tuple[list[Gateway], object], caplog: pytest.LogCaptureFixture
) -> None:
    # Scripts drive a call with run_until_complete and close the loop without cancelling its
    # tasks: nothing of toolgate's may be left pending there ("Task was destroyed but it is
    # pending!" on the asyncio logger).
    _made, make = make_gateway
    gateway = make(upstream)  # type: ignore[operator]
    for i in range(3):
        loop = asyncio.new_event_loop()
        try:
            out = loop.run_until_complete(gateway.call("rest:ok", {"text": str(i)}))
            assert out.status is CallStatus.OK, out.message
        finally:
            loop.close()
        del loop
        gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
