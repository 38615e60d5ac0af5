"""Connections to upstreams stay open between calls (issue 26), and a kept connection the
upstream closed is replaced without failing the call.

A real upstream (``fixtures/upstream/kept_server.py``: uvicorn, REST routes and the official SDK's
MCP server) counts the TCP connections and MCP sessions it saw; a real gateway built from a
``toolgate.yaml`` calls it through ``gateway.call``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolgate import Gateway
from toolgate.config.build import load_gateway
from toolgate.model import CallStatus

SERVER = Path(__file__).parent / "fixtures" / "upstream" / "kept_server.py"
CALLS = 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Upstream:
    """The fixture server in a subprocess, restartable on the same port."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), str(self.port), self.mode],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                self.stats()
                return
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError("the upstream did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def stats(self) -> dict[str, int]:
        url = f"http://127.0.0.1:{self.port}/stats"
        with urllib.request.urlopen(url, timeout=5) as response:
            reply: dict[str, int] = json.loads(response.read())
        return reply


@pytest.fixture(params=["stateless", "session"])
def upstream(request: pytest.FixtureRequest) -> Iterator[Upstream]:
    server = Upstream(request.param)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stateless() -> Iterator[Upstream]:
    server = Upstream("stateless")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, port: int) -> Gateway:
    (tmp_path / "upstreams.yaml").write_text(
        textwrap.dedent(
            f"""\
            apiVersion: joch.dev/v1alpha1
            kind: MCPServer
            metadata:
              name: up
            spec:
              url: http://127.0.0.1:{port}/mcp
              sideEffects:
                level: read_only
            ---
            apiVersion: joch.dev/v1alpha1
            kind: Tool
            metadata:
              name: add
              namespace: rest
            spec:
              type: rest
              description: Add two integers.
              endpoint:
                method: POST
                url: http://127.0.0.1:{port}/rest/add
              inputSchema:
                type: object
                properties:
                  a: {{type: integer}}
                  b: {{type: integer}}
              sideEffects:
                level: read_only
            ---
            apiVersion: joch.dev/v1alpha1
            kind: Tool
            metadata:
              name: size
              namespace: rest
            spec:
              type: rest
              description: The size of the body the upstream received.
              endpoint:
                method: POST
                url: http://127.0.0.1:{port}/rest/size
              inputSchema:
                type: object
                properties:
                  text: {{type: string}}
              sideEffects:
                level: read_only
            """
        )
    )
    config = tmp_path / "toolgate.yaml"
    config.write_text(
        textwrap.dedent(
            """\
            sources:
              - path: ./upstreams.yaml
            sandbox:
              network_grants:
                MCPServer:up: [127.0.0.1/32]
                rest:add: [127.0.0.1/32]
                rest:size: [127.0.0.1/32]
            audit:
              enabled: false
            """
        )
    )
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "home"))
    return load_gateway(config, approver=None, audit="off")


def _call(gateway: Gateway, tool: str, arguments: dict[str, Any]) -> Any:
    """One call; an MCP server still connecting is waited for (at most 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        outcome = gateway.call_sync(tool, arguments)
        if outcome.status is CallStatus.OK:
            # The JSON result (an upstream's structuredContent; its text block is kept beside).
            return outcome.to_dict()["content"]
        if time.monotonic() > deadline or "not connected" not in (outcome.message or ""):
            raise AssertionError(f"{tool}: {outcome.status} {outcome.message}")
        time.sleep(0.1)


def test_rest_calls_never_share_a_connection(
    stateless: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = _gateway(tmp_path, monkeypatch, stateless.port)
    try:
        for i in range(CALLS):
            assert _call(gateway, "rest:add", {"a": i, "b": 1})["sum"] == i + 1
        # One each: an upstream's stray bytes after an answer never reach another call.
        assert stateless.stats()["rest_connections"] == CALLS
    finally:
        gateway.close()


def test_rest_calls_keep_no_cookie(
    stateless: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = _gateway(tmp_path, monkeypatch, stateless.port)
    try:
        # The upstream sets a cookie on every answer: no later call may carry it.
        answers = [_call(gateway, "rest:add", {"a": 1, "b": 2}) for _ in range(3)]
        assert [answer["cookie"] for answer in answers] == ["", "", ""]
    finally:
        gateway.close()


@pytest.mark.parametrize("size", [10, 60_000, 300_000])
def test_rest_bodies_arrive_whole_small_and_large(
    stateless: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    gateway = _gateway(tmp_path, monkeypatch, stateless.port)
    try:
        text = "x" * size
        sent = len(json.dumps({"text": text}, ensure_ascii=False).encode())
        for _ in range(2):
            assert _call(gateway, "rest:size", {"text": text}) == {"bytes": sent}
    finally:
        gateway.close()


def test_a_rest_upstream_that_restarted_is_reached_again(
    stateless: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = _gateway(tmp_path, monkeypatch, stateless.port)
    try:
        assert _call(gateway, "rest:add", {"a": 1, "b": 1})["sum"] == 2
        stateless.stop()  # closes the kept connection from the upstream's side
        outcome = gateway.call_sync("rest:add", {"a": 1, "b": 1})
        assert outcome.status is CallStatus.ERROR
        assert outcome.code == "unavailable"  # nobody listens: a connect error
        stateless.start()
        assert _call(gateway, "rest:add", {"a": 2, "b": 2})["sum"] == 4
        assert _call(gateway, "rest:add", {"a": 3, "b": 3})["sum"] == 6
        assert stateless.stats()["rest_connections"] == 2  # the new process: one per call
    finally:
        gateway.close()


def test_mcp_calls_share_one_connection_and_session(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = _gateway(tmp_path, monkeypatch, upstream.port)
    try:
        for i in range(CALLS):
            assert _call(gateway, "up:add", {"a": i, "b": 2}) == {"result": i + 2}
        after = upstream.stats()
        assert after["call_connections"] == 1
        assert after["sessions"] == (upstream.mode == "session")
    finally:
        gateway.close()


def test_a_kept_mcp_connection_the_upstream_closed_is_replaced(
    stateless: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway = _gateway(tmp_path, monkeypatch, stateless.port)
    try:
        assert _call(gateway, "up:add", {"a": 1, "b": 1}) == {"result": 2}
        stateless.stop()
        stateless.start()
        # The stateless server kept nothing: the next call reaches it on a new connection.
        assert _call(gateway, "up:add", {"a": 2, "b": 2}) == {"result": 4}
    finally:
        gateway.close()
