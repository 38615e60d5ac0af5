"""An MCP request over the body limit tells the client how large it was and what the limit is.

The SDK's own answer to an oversized body is a plain-text 413, which its client can only report
as "Server returned an error response" (when it can read the answer at all: the server closed
the connection while the client was still sending). toolgate reads the rest of the body, then
answers a JSON-RPC error whose message the official client hands to its caller. Driven with the
official ``mcp`` client against a real uvicorn (streamable HTTP), and against the real ``toolgate
mcp`` (stdio, whose limit is a line of 16 MiB: a 5 MB argument passes).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from test_mcp_server_helpers import bearer, configured_server, text_of
from test_mcp_server_stdio import Setup, setup  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

#: A newcomer's "5 MB argument".
FIVE_MB = "x" * 5_000_000
#: The limit of ``serve.max_body_bytes`` by default.
LIMIT = "this server's limit of 1,048,576 bytes (set by serve.max_body_bytes in toolgate.yaml)"


def _client(url: str, mode: str) -> Client:
    return Client(streamable_http_client(url, http_client=bearer("alice-key")), mode=mode)


def _size(message: str) -> int:
    """The body size a message gives (``5,000,123 bytes, over``)."""
    found = re.search(r"([\d,]+) bytes, over", message)
    assert found, message
    return int(found.group(1).replace(",", ""))


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with configured_server(tmp_path, monkeypatch) as running:
        yield running


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_a_five_megabyte_argument_names_its_size_and_the_limit(
    server: Any, mode: str
) -> None:
    async with _client(server.url, mode) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.call_tool("t__words", {"text": FIVE_MB})
        message = refused.value.message
        assert "Server returned an error response" not in message
        assert message.startswith("Request body too large: ")
        assert 5_000_000 < _size(message) < 5_001_000  # the argument and its envelope
        assert LIMIT in message
        # The session goes on.
        assert text_of(await mcp.call_tool("t__words", {"text": "two words"})) == '{"words": 2}'


async def test_a_body_sent_without_its_length_is_measured_too(server: Any) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(50):
            yield b"x" * 100_000

    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with bearer("alice-key") as http:
        answer = await http.post(server.url, headers=headers, content=chunks())
    assert answer.status_code == 413
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["code"] == -32600
    assert error["message"] == f"Request body too large: 5,000,000 bytes, over {LIMIT}"


def test_a_client_waiting_for_100_continue_is_answered_at_once(server: Any) -> None:
    # It sends no body until told to; the answer must not wait for one (nor invite it).
    host, port = server.url.removeprefix("http://").split("/")[0].split(":")
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice-key\r\n"
        b"Content-Type: application/json\r\nContent-Length: 5000000\r\n"
        b"Expect: 100-continue\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"connection: close" in head.lower()
    message = json.loads(body)["error"]["message"]
    assert message == f"Request body too large: 5,000,000 bytes, over {LIMIT}"


async def test_over_stdio_a_five_megabyte_argument_is_served(setup: Setup) -> None:  # noqa: F811
    # stdio has no body limit, only one on a line (16 MiB): the argument reaches the tool.
    with setup.client() as client:
        async with client as mcp:
            result = await mcp.call_tool("t__words", {"text": "word " * 1_000_000})
    assert not result.is_error
    assert json.loads(text_of(result)) == {"words": 1_000_000}
