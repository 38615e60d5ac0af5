"""The HTTP fast path for 2026-07-28 ``tools/call`` answers exactly as the SDK path does.

Two servers serve the same configuration, one with the fast path and one without; every request
below goes to both and the answers must be equal (approval ids, ports and sealed states aside).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from test_mcp_server_helpers import bearer, configured_server
from toolgate.serve.mcp.fast import FastToolCalls

pytestmark = pytest.mark.slow

VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
    "Mcp-Method": "tools/call",
}


class Spy:
    """Wraps the fast path and records whether it answered or handed each request on."""

    def __init__(self, fast: FastToolCalls) -> None:
        self.fast = fast
        self.answered = 0
        self.handed_on = 0

    async def __call__(
        self, scope: Any, receive: Any, send: Any, agent: str | None, **options: Any
    ) -> Any:
        result = await self.fast(scope, receive, send, agent, **options)
        if result is None:
            self.answered += 1
        else:
            self.handed_on += 1
        return result


@pytest.fixture
def servers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any, Spy]]:
    with (
        configured_server(tmp_path / "fast", monkeypatch, demo=True) as fast,
        configured_server(tmp_path / "sdk", monkeypatch, demo=True, fast_path=False) as sdk,
    ):
        assert fast.mcp._fast is not None and sdk.mcp._fast is None
        spy = Spy(fast.mcp._fast)
        fast.mcp._fast = spy  # type: ignore[assignment]
        yield fast, sdk, spy


def call(name: str, arguments: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "_meta": dict(ENVELOPE)}
    if arguments is not None:
        params["arguments"] = arguments
    params.update(extra)
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


def normalized(text: str, port: int) -> Any:
    text = re.sub(r"apr_[0-9a-f]{32}", "apr_ID", text).replace(str(port), "PORT")
    try:
        data = json.loads(text)
    except ValueError:
        return text
    result = data.get("result") if isinstance(data, dict) else None
    if isinstance(result, dict) and "requestState" in result:
        result["requestState"] = "SEALED"
    return data


async def both(
    servers: tuple[Any, Any, Spy], body: Any, headers: dict[str, str], key: str = "alice-key"
) -> tuple[tuple[int, Any], tuple[int, Any]]:
    answers = []
    for server in servers[:2]:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with bearer(key) as http:
            response = await http.post(server.url, headers=headers, content=content)
        answers.append((response.status_code, normalized(response.text, server.port)))
    return answers[0], answers[1]


def named(name: str, **more: str) -> dict[str, str]:
    return {**HEADERS, "Mcp-Name": name, **more}


CASES = [
    ("ok with structured content", call("t__add", {"a": 1, "b": 2}), named("t__add"), "answered"),
    ("ok, plain text", call("demo__add", {"a": 1, "b": 2}), named("demo__add"), "answered"),
    ("string id", {**call("t__add", {"a": 1, "b": 2}), "id": "x-1"}, named("t__add"), "answered"),
    ("bad arguments", call("t__add", {"a": "one", "b": 2}), named("t__add"), "answered"),
    ("no arguments", call("t__add"), named("t__add"), "answered"),
    ("unknown tool", call("t__nope", {}), named("t__nope"), "answered"),
    ("hidden tool", call("t__secret", {}), named("t__secret"), "answered"),
    ("visualization", call("t__words", {"text": "a b"}), named("t__words"), "answered"),
    ("pending approval", call("t__send", {"to": "x", "text": "y"}), named("t__send"), "answered"),
    ("tool error", call("demo__fail", {}), named("demo__fail"), "answered"),
    ("wrong Mcp-Name", call("t__add", {"a": 1, "b": 2}), named("t__other"), "handed_on"),
    (
        "no Mcp-Method",
        call("t__add", {"a": 1, "b": 2}),
        {**named("t__add"), "Mcp-Method": ""},
        "handed_on",
    ),
    (
        "version mismatch",
        call("t__add", {"a": 1, "b": 2}),
        named("t__add", **{"MCP-Protocol-Version": "2025-11-25"}),
        None,
    ),
    (
        "no envelope",
        {**call("t__add", {}), "params": {"name": "t__add"}},
        named("t__add"),
        "handed_on",
    ),
    ("not JSON", b"{nope", named("t__add"), "handed_on"),
    ("a batch", [call("t__add", {})], named("t__add"), "handed_on"),
    (
        "a notification",
        {"jsonrpc": "2.0", "method": "tools/call", "params": {}},
        named("t__add"),
        "handed_on",
    ),
    ("arguments not an object", call("t__add", [1, 2]), named("t__add"), "handed_on"),
    ("unknown params key", call("t__add", {"a": 1, "b": 2}, task={}), named("t__add"), "handed_on"),
    (
        "forged request state",
        call("t__send", {"to": "x", "text": "y"}, requestState="v1.abc"),
        named("t__send"),
        "handed_on",
    ),
    (
        "JSON-only Accept",
        call("t__add", {"a": 1, "b": 2}),
        named("t__add", Accept="application/json"),
        "handed_on",
    ),
    (
        "wrong Content-Type",
        call("t__add", {"a": 1, "b": 2}),
        named("t__add", **{"Content-Type": "text/plain"}),
        "handed_on",
    ),
    (
        "foreign Host",
        call("t__add", {"a": 1, "b": 2}),
        named("t__add", Host="evil.example"),
        "handed_on",
    ),
]


@pytest.mark.parametrize(("case", "body", "headers", "path"), CASES, ids=[c[0] for c in CASES])
async def test_same_answer_with_and_without_the_fast_path(
    servers: tuple[Any, Any, Spy], case: str, body: Any, headers: dict[str, str], path: str | None
) -> None:
    spy = servers[2]
    fast, sdk = await both(servers, body, headers)
    assert fast == sdk
    if path == "answered":
        assert (spy.answered, spy.handed_on) == (1, 0)
    elif path == "handed_on":
        assert (spy.answered, spy.handed_on) == (0, 1)
    else:  # not even a 2026-07-28 request
        assert spy.answered == 0


async def test_a_call_to_approve_by_form_is_made_once_and_answered_by_the_sdk(
    servers: tuple[Any, Any, Spy],
) -> None:
    body = call("t__send", {"to": "x", "text": "y"})
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"elicitation": {}}
    fast, sdk = await both(servers, body, named("t__send"))
    assert fast == sdk
    assert fast[1]["result"]["resultType"] == "input_required"
    assert servers[2].handed_on == 1
    for server in servers[:2]:
        audit = server.gateway.audit
        assert audit is not None and audit.flush(30)
        assert audit.count(tool_id="t:send") == 1  # the SDK used the fast path's outcome
        assert server.gateway.approvals is not None and len(server.gateway.approvals.pending()) == 1


async def test_the_official_client_takes_the_fast_path(servers: tuple[Any, Any, Spy]) -> None:
    fast = servers[0]
    async with Client(streamable_http_client(fast.url, http_client=bearer("alice-key"))) as mcp:
        result = await mcp.call_tool("t__add", {"a": 20, "b": 22})
    assert result.structured_content == {"total": 42}
    assert servers[2].answered == 1
