"""The HTTP API's first hour: what a newcomer gets wrong, and what the API answers.

A call's body is ``{"arguments": {...}}``: a bare ``{"a": 2}``, a body without ``Content-Type:
application/json`` and other shapes are answered with problems that show the shape; ``GET /v1``
(and ``/v1/``) is an index of the API; a body over the limit is answered with its size, the
limit and the setting that raises it, readable by a client that is still sending it. Every test
speaks real HTTP to a real uvicorn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

from http_api_support import (
    RUNS,
    auth,
    live_server,
    make_app,
    make_gateway,
    problem,
)
from test_http_api_server import raw_exchange
from toolgate import Gateway, tool
from toolgate.serve.api import ApiLimits

pytestmark = pytest.mark.slow

SHAPE = (
    'A call body is {"arguments": {...}}, the tool\'s arguments by name, optionally with '
    '"session_id", "workspace", "tool_call_id" and "idempotency_key".'
)
CALL = "/v1/tools/t:add/call"


@tool(namespace="fh", effect="read_only", allowed_agents=["alice"])
def salary(person: str) -> int:
    """Only alice may see this tool."""
    return len(person)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    gateway = make_gateway(tmp_path_factory.mktemp("first-hour"))
    gateway.add([salary])
    app = make_app(gateway, limits=ApiLimits(max_body_bytes=64 * 1024))
    with gateway, live_server(app) as running:
        yield running.url


@pytest.fixture
def client(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30) as http:
        yield http


def _detail(response: httpx.Response, status: int) -> str:
    detail: str = problem(response, status, "invalid_request")["detail"]
    return detail


# -- the body of a call -------------------------------------------------------------------------


def test_bare_arguments_are_told_to_go_under_arguments(client: httpx.Client) -> None:
    before = len(RUNS)
    response = client.post(CALL, json={"a": 2, "b": 40}, headers=auth("bob"))
    assert _detail(response, 422) == (
        '"a" and "b" are arguments of t:add, not fields of a call body: put them under '
        f'"arguments", as in {{"arguments": {{"a": ..., "b": ...}}}}. {SHAPE}'
    )
    assert [e["pointer"] for e in response.json()["errors"]] == ["/a", "/b"]
    assert len(RUNS) == before  # nothing ran
    # Sent as the answer says, it runs.
    fixed = client.post(CALL, json={"arguments": {"a": 2, "b": 40}}, headers=auth("bob"))
    assert fixed.status_code == 200 and fixed.json()["content"] == 42


def test_one_bare_argument_among_other_keys(client: httpx.Client) -> None:
    response = client.post(CALL, json={"a": 2, "zzz": 1}, headers=auth("bob"))
    assert _detail(response, 422).startswith(
        '"a" is an argument of t:add, not a field of a call body: put it under "arguments", '
        'as in {"arguments": {"a": ...}}.'
    )


def test_a_misspelt_field_gets_a_suggestion(client: httpx.Client) -> None:
    response = client.post(CALL, json={"argumnets": {"a": 1, "b": 2}}, headers=auth("bob"))
    assert _detail(response, 422) == (
        f'the call body has an unknown field "argumnets" (did you mean "arguments"?). {SHAPE}'
    )


def test_a_hidden_tool_lends_no_names_to_the_answer(client: httpx.Client) -> None:
    # bob may not see fh:salary: its arguments are not named as such (nor the tool).
    hidden = client.post("/v1/tools/fh:salary/call", json={"person": "x"}, headers=auth("bob"))
    detail = _detail(hidden, 422)
    assert "fh:salary" not in detail
    assert detail == (
        'the call body has an unknown field "person"; if it is the tool\'s arguments, put it '
        f'under "arguments". {SHAPE}'
    )
    # alice may: the same body is recognised as the tool's arguments.
    shown = client.post("/v1/tools/fh:salary/call", json={"person": "x"}, headers=auth("alice"))
    assert _detail(shown, 422).startswith('"person" is an argument of fh:salary')


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ([1, 2], "the call body must be a JSON object, not an array."),
        ("add 2 and 40", "the call body must be a JSON object, not a string."),
        (
            {"arguments": [2, 40]},
            '"arguments" must be a JSON object of the tool\'s arguments by name, not an array.',
        ),
        (
            {"arguments": {}, "session_id": ""},
            "the call body does not match its schema: /session_id: String should have at least "
            "1 character.",
        ),
    ],
)
def test_other_shapes_are_named(client: httpx.Client, body: Any, said: str) -> None:
    response = client.post(CALL, json=body, headers=auth("bob"))
    assert _detail(response, 422) == f"{said} {SHAPE}"


@pytest.mark.parametrize(
    ("content_type", "said"),
    [
        (None, "this request has no Content-Type header"),
        ("text/plain", "this request's Content-Type is 'text/plain'"),
        (
            "application/x-www-form-urlencoded",
            "this request's Content-Type is 'application/x-www-form-urlencoded'",
        ),
    ],
)
def test_a_body_not_sent_as_json_is_told_the_header(
    client: httpx.Client, content_type: str | None, said: str
) -> None:
    before = len(RUNS)
    headers = auth("bob") | ({} if content_type is None else {"Content-Type": content_type})
    response = client.post(CALL, content=b'{"arguments": {"a": 2, "b": 40}}', headers=headers)
    assert _detail(response, 415) == (
        'send the request body as JSON, as in {"arguments": {...}}, with the header '
        f"Content-Type: application/json ({said})"
    )
    assert len(RUNS) == before


def test_other_routes_say_so_too(client: httpx.Client) -> None:
    response = client.post(
        "/v1/approvals/nope/decision", content=b'{"decision": "deny"}', headers=auth("ops")
    )
    assert _detail(response, 415) == (
        "send the request body as JSON, with the header Content-Type: application/json (this "
        "request has no Content-Type header)"
    )


def test_what_worked_still_works(client: httpx.Client) -> None:
    # No body at all needs no Content-Type (a tool without arguments), nor does an empty one.
    for kwargs in ({}, {"content": b""}):
        empty = client.post("/v1/tools/t:fail/call", headers=auth("bob"), **kwargs)
        assert empty.status_code == 200 and empty.json()["code"] == "tool_error"
    typed = client.post(
        CALL,
        content=b'{"arguments": {"a": 1, "b": 2}}',
        headers=auth("bob") | {"Content-Type": "application/json; charset=utf-8"},
    )
    assert typed.json()["content"] == 3
    # Still authenticated first: a bad body from nobody is a 401.
    assert client.post(CALL, json={"a": 1}).status_code == 401


# -- the index ----------------------------------------------------------------------------------


def test_v1_is_an_index_of_the_api(client: httpx.Client, server: str) -> None:
    index = client.get("/v1")  # no key needed
    assert index.status_code == 200
    assert index.headers["content-type"] == "application/json"
    body = index.json()
    assert client.get("/v1/").json() == body
    assert body["name"] == "toolgate" and body["version"]
    assert "Authorization: Bearer <key>" in body["authentication"]
    assert "/openapi.json" in body["docs"] and "docs/guides/serving.md" in body["docs"]
    assert body["call"] == {
        "method": "POST",
        "path": "/v1/tools/{tool_id}/call",
        "content_type": "application/json",
        "body": '{"arguments": {...}}',
        "example": "curl -H 'Content-Type: application/json' "
        f"""-d '{{"arguments": {{"a": 2, "b": 40}}}}' {server}/v1/tools/demo:add/call""",
    }
    links = body["links"]
    assert {"openapi", "tools", "approvals", "health", "me", "call"} <= set(links)
    assert "mcp" not in links and "ui" not in links  # not served by this app
    assert client.get(links["openapi"]).status_code == 200
    assert client.get(links["health"]).json()["status"] == "ok"
    assert client.get(links["tools"], headers=auth("bob")).status_code == 200
    assert client.get(links["approvals"], headers=auth("ops")).status_code == 200


def test_the_index_lists_every_operation_and_is_in_the_openapi_document(
    client: httpx.Client,
) -> None:
    document = client.get("/openapi.json").json()
    assert document["paths"]["/v1"]["get"]["summary"]
    assert "/v1/" not in document["paths"]
    listed = {(op["method"], op["path"]) for op in client.get("/v1").json()["operations"]}
    documented = {
        (method.upper(), path) for path, ops in document["paths"].items() for method in ops
    }
    assert listed == documented
    assert ("POST", "/v1/tools/{tool_id}/call") in listed and ("GET", "/v1") in listed


def test_an_unknown_path_points_at_the_index(client: httpx.Client) -> None:
    detail = problem(client.get("/v1/tool", headers=auth("bob")), 404, "not_found")["detail"]
    assert "GET /v1 lists its routes" in detail


def test_the_index_links_mcp_and_the_web_ui_when_they_are_served(tmp_path: Path) -> None:
    async def nothing(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    with Gateway() as gateway:
        app = make_app(gateway, mcp=nothing, ui=nothing, manage_gateway=False)
        with live_server(app) as running, httpx.Client(base_url=running.url) as http:
            links = http.get("/v1").json()["links"]
    assert (links["mcp"], links["ui"]) == ("/mcp", "/")


# -- the body limit -----------------------------------------------------------------------------

LIMIT = "this server's limit of 65,536 bytes (set by serve.max_body_bytes in toolgate.yaml)"


def _too_large(response: Any) -> str:
    detail: str = problem(response, 413, "payload_too_large")["detail"]
    return detail


def test_a_body_over_the_limit_gives_its_size_and_the_limit(client: httpx.Client) -> None:
    body = b'{"arguments": {"a": "' + b"x" * 5_000_000 + b'"}}'
    response = client.post(
        CALL, content=body, headers=auth("bob") | {"Content-Type": "application/json"}
    )
    assert _too_large(response) == f"the request body is {len(body):,} bytes, over {LIMIT}"


async def test_an_async_client_still_sending_reads_the_answer(server: str) -> None:
    # Without a Content-Length the size is only known once the body is read to its end.
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(50):
            yield b"x" * 100_000
            await asyncio.sleep(0)

    async with httpx2.AsyncClient(base_url=server, timeout=30) as http:
        sized = await http.post(
            CALL, json={"arguments": {"a": "x" * 5_000_000}}, headers=auth("bob")
        )
        streamed = await http.post(CALL, content=chunks(), headers=auth("bob"))
        # The connection was not spoiled: the next call is answered.
        after = await http.post(CALL, json={"arguments": {"a": 1, "b": 1}}, headers=auth("bob"))
    assert _too_large(sized) == f"the request body is 5,000,022 bytes, over {LIMIT}"
    assert _too_large(streamed) == f"the request body is 5,000,000 bytes, over {LIMIT}"
    assert after.json()["content"] == 2


def test_a_huge_declared_body_is_refused_without_reading_it(server: str) -> None:
    for extra in (b"", b"Expect: 100-continue\r\n"):
        answer = raw_exchange(
            server,
            b"POST /v1/tools/t:add/call HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: {auth('bob')['Authorization']}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 10000000000\r\n"
            + extra
            + b"\r\n{",
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"connection: close" in answer.lower()
        assert f"the request body is 10,000,000,000 bytes, over {LIMIT}".encode() in answer
