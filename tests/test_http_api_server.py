"""The HTTP API and the composed app over real HTTP: uvicorn on 127.0.0.1 (a free port), an HTTP
client, raw sockets for what a client library would not send, and dummy MCP and UI sub-apps to
prove the composition seam (routing, lifespans, and the gateway's start and close)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from http_api_support import (
    RUNS,
    TOOLS,
    auth,
    live_server,
    make_app,
    make_gateway,
    make_identity,
)
from toolgate import Gateway, GatewaySettings, StateSettings
from toolgate.audit.sqlite_log import SQLiteAuditLog
from toolgate.serve.api import ApiLimits
from toolgate.serve.app import ServeApp, SubApp, http_authenticator

pytestmark = pytest.mark.slow

PROBLEM = "application/problem+json"


@pytest.fixture(autouse=True)
def _reset_runs() -> None:
    RUNS.clear()


def wait_until(condition: Any, what: str) -> None:
    """Poll ``condition`` (a hang guard, not a performance bound)."""
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.05)


def raw_exchange(url: str, payload: bytes) -> bytes:
    """Send raw bytes to the server and return whatever it answers before closing."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


# -- the API over HTTP --------------------------------------------------------------------------


def test_the_api_over_real_http(tmp_path: Path) -> None:
    with (
        make_gateway(tmp_path) as gateway,
        live_server(make_app(gateway)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        assert client.get("/healthz").json()["status"] == "ok"
        spec = client.get("/openapi.json").json()
        assert spec["openapi"].startswith("3.") and "/v1/tools/{tool_id}/call" in spec["paths"]
        tools = client.get("/v1/tools", headers=auth("bob")).json()["tools"]
        assert "t:add" in {row["id"] for row in tools}
        outcome = client.post(
            "/v1/tools/t:add/call", json={"arguments": {"a": 20, "b": 22}}, headers=auth("bob")
        ).json()
        assert outcome["content"] == 42
        pending = client.post(
            "/v1/tools/t:send/call",
            json={"arguments": {"to": "a", "text": "b"}},
            headers=auth("bob"),
        )
        assert pending.status_code == 202
        approval_id = pending.json()["approval"]["id"]
        decided = client.post(
            f"/v1/approvals/{approval_id}/decision",
            json={"decision": "approve"},
            headers=auth("ops"),
        )
        assert decided.status_code == 200 and decided.json()["outcome"] is None  # recorded only
        assert [run["tool"] for run in RUNS] == ["add"]
        retried = client.post(  # the agent's retry runs the approved call
            "/v1/tools/t:send/call",
            json={"arguments": {"to": "a", "text": "b"}},
            headers=auth("bob"),
        )
        assert retried.status_code == 200 and retried.json()["status"] == "ok", retried.text
        unauthorized = client.get("/v1/tools")
        assert unauthorized.status_code == 401
        assert unauthorized.headers["content-type"] == PROBLEM
    assert [run["tool"] for run in RUNS] == ["add", "send"]


def test_bad_requests_never_take_the_server_down(tmp_path: Path) -> None:
    app = make_app(make_gateway(tmp_path), limits=ApiLimits(max_body_bytes=4096))
    with live_server(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        headers = {**auth("bob"), "Content-Type": "application/json"}

        def stream() -> Iterator[bytes]:  # chunked: no Content-Length to refuse up front
            yield b'{"arguments": {"pad": "'
            for _ in range(64):
                yield b"x" * 1024
            yield b'"}}'

        too_big = client.post("/v1/tools/t:add/call", content=stream(), headers=headers)
        assert too_big.status_code == 413
        assert too_big.headers["content-type"] == PROBLEM
        assert too_big.json()["code"] == "payload_too_large"

        # A Content-Length of 10 GB is refused before a byte of the body is read.
        answer = raw_exchange(
            server.url,
            b"POST /v1/tools/t:add/call HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {auth('bob')['Authorization'][7:]}\r\n".encode()
            + b"Content-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n{",
        )
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert b"payload_too_large" in answer

        for payload in (
            b"NOT HTTP AT ALL\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
            b"\x00\xff" * 1000,
        ):
            raw_exchange(server.url, payload)
        bad_json = client.post("/v1/tools/t:add/call", content=b'{"a":', headers=headers)
        assert bad_json.status_code == 400 and bad_json.json()["code"] == "invalid_request"
        assert client.get("/healthz").json()["status"] == "ok"
        assert (
            client.post(
                "/v1/tools/t:add/call", json={"arguments": {"a": 1, "b": 1}}, headers=auth("bob")
            ).json()["content"]
            == 2
        )


async def test_concurrent_calls_all_complete_and_are_audited(tmp_path: Path) -> None:
    gateway = make_gateway(tmp_path)
    with live_server(make_app(gateway)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:

            async def one(number: int) -> Any:
                response = await client.post(
                    "/v1/tools/t:add/call",
                    json={"arguments": {"a": number, "b": 1}},
                    headers=auth("alice" if number % 2 else "bob"),
                )
                return response.json()["content"]

            results = await asyncio.gather(*(one(n) for n in range(64)))
    assert results == [n + 1 for n in range(64)]
    # Stopping the server closed the gateway, which flushed the audit log.
    with SQLiteAuditLog(tmp_path / "audit.db") as log:
        assert log.count(tool_id="t:add") == 64
        assert log.count(agent="alice") == 32


# -- composition: routing, sub-apps, lifespans --------------------------------------------------


class DummySubApp:
    """An ASGI app that reports the path it was given and records its lifespan."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name = name
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await JSONResponse({"app": self.name, "path": scope["path"]})(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        self.events.append(f"{self.name} start")
        yield
        self.events.append(f"{self.name} stop")


class RecordingGateway(Gateway):
    events: list[str]

    async def start(self) -> None:
        self.events.append("gateway start")
        await super().start()

    async def aclose(self) -> None:
        self.events.append("gateway close")
        await super().aclose()


def test_mcp_and_ui_sub_apps_are_routed_by_path_with_their_lifespans(tmp_path: Path) -> None:
    events: list[str] = []
    tools = tmp_path / "watched"
    tools.mkdir()
    gateway = RecordingGateway(
        GatewaySettings(state=StateSettings(path=tmp_path / "s.db")),
        approver="queue",
        tool_folders=[tools],
    )
    gateway.events = events
    gateway.add(TOOLS)
    mcp, ui = DummySubApp("mcp", events), DummySubApp("ui", events)
    app = make_app(
        gateway,
        mcp=SubApp(mcp, mcp.lifespan),
        ui=SubApp(ui, ui.lifespan),
        public_url="http://127.0.0.1:9",
    )
    assert isinstance(app, ServeApp)
    with live_server(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert events == ["gateway start", "mcp start", "ui start"]
        routes = {
            "/mcp": ("mcp", "/mcp"),
            "/mcp/messages": ("mcp", "/mcp/messages"),
            "/": ("ui", "/"),
            "/approvals/apr_1": ("ui", "/approvals/apr_1"),
            "/mcpx": ("ui", "/mcpx"),
            "/v1x": ("ui", "/v1x"),
        }
        for path, (name, seen) in routes.items():
            assert client.get(path).json() == {"app": name, "path": seen}, path
        assert client.get("/healthz").json()["status"] == "ok"
        assert client.get("/openapi.json").json()["info"]["title"] == "toolgate"
        problem = client.get("/v1/unknown", headers=auth("bob"))
        assert problem.status_code == 404 and problem.json()["code"] == "not_found"

        # The gateway was started: the tool folders are watched while the app runs.
        folder = tools / "hello"
        folder.mkdir()
        (folder / "hello.py").write_text(
            "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'hi': 1}))\n"
        )
        (folder / "tool.md").write_text(
            "---\nname: hello\nscript: hello.py\nruntime: python\ninputSchema:\n"
            "  type: object\n---\nSays hi.\n"
        )

        def listed() -> bool:
            rows = client.get("/v1/tools", headers=auth("bob")).json()["tools"]
            return "local:hello" in {row["id"] for row in rows}

        wait_until(listed, "the new tool folder is served")
        outcome = client.post("/v1/tools/local:hello/call", headers=auth("bob")).json()
        assert outcome["content"] == {"hi": 1}, outcome
    assert events[-3:] == ["ui stop", "mcp stop", "gateway close"]


def test_a_pending_call_links_to_the_web_ui_when_one_is_served(tmp_path: Path) -> None:
    ui_events: list[str] = []
    gateway = make_gateway(tmp_path)
    app = make_app(gateway, ui=DummySubApp("ui", ui_events), public_url="http://[::1]:8470/")
    with live_server(app) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        approval = client.post(
            "/v1/tools/t:send/call",
            json={"arguments": {"to": "a", "text": "b"}},
            headers=auth("alice"),
        ).json()["approval"]
    assert approval["approve_url"] == f"http://[::1]:8470/approvals/{approval['id']}"
    assert ui_events == []  # a bare ASGI app has no lifespan to run


def test_a_sub_app_that_fails_to_start_leaves_the_gateway_closed(tmp_path: Path) -> None:
    events: list[str] = []
    gateway = RecordingGateway(
        GatewaySettings(state=StateSettings(path=tmp_path / "s.db")), approver="queue"
    )
    gateway.events = events

    @contextlib.asynccontextmanager
    async def broken() -> AsyncIterator[None]:
        raise RuntimeError("the MCP session manager cannot start")
        yield

    app = make_app(gateway, mcp=SubApp(DummySubApp("mcp", events), broken))

    async def run() -> None:
        with pytest.raises(RuntimeError, match="cannot start"):
            async with app.lifespan():
                raise AssertionError("started anyway")

    asyncio.run(run())
    assert events == ["gateway start", "gateway close"]


def test_http_authenticator_answers_401_for_sub_apps() -> None:
    identity = make_identity()
    checked = http_authenticator(identity.authenticate)

    def request(headers: dict[str, str]) -> Request:
        raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        return Request({"type": "http", "headers": raw, "client": ("127.0.0.1", 1)})

    assert checked(request(auth("alice"))) == "alice"
    with pytest.raises(HTTPException) as caught:
        checked(request({}))
    assert caught.value.status_code == 401
    assert caught.value.headers == {"WWW-Authenticate": 'Bearer realm="toolgate"'}
    assert "API key" in str(caught.value.detail)


def test_openapi_documents_every_error_as_a_problem(tmp_path: Path) -> None:
    with make_gateway(tmp_path) as gateway:
        spec = make_app(gateway).api.openapi()  # type: ignore[attr-defined]
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            default = operation["responses"]["default"]
            assert list(default["content"]) == [PROBLEM], (method, path)
            if path not in ("/healthz", "/v1"):  # both answer without a key
                assert operation["security"] == [{"bearer": []}], (method, path)
    assert json.dumps(spec)  # plain JSON
