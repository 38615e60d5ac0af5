"""REST tools (Joch ``type: rest``) against real HTTP servers started by the tests.

Every call goes through the gateway's whole pipeline; the servers are stdlib ``http.server``
instances in threads, recording exactly what arrived (raw path, headers, body).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway_support import gateway_with
from toolgate import Gateway
from toolgate.backends.rest import EXCERPT_CHARS, PreparedRequest, prepare_request
from toolgate.model import CallStatus, RestEndpoint
from toolgate.sandbox.runner import Sandbox
from toolgate.secrets import MemorySecretStore

FIXTURES = Path(__file__).parent / "fixtures" / "resources"
TOKEN = "tok-9f8e7d6c5b4a-live-secret"
SEED_TOOL = "support-platform:zendesk.create_ticket"
#: The test servers listen on loopback, which REST tools reach only with the operator's grant.
LOOPBACK_GRANTS = Sandbox(
    cidr_grants={
        tool_id: ("127.0.0.1/32",)
        for tool_id in (
            SEED_TOOL,
            *(f"test:{name}" for name in ("api", "echo", "fail", "text", "bin", "badjson")),
        )
    }
)

Reply = tuple[int, dict[str, str], bytes]


@dataclass
class Seen:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Server:
    """A local HTTP server whose answers the test chooses, path by path."""

    httpd: ThreadingHTTPServer
    routes: dict[str, Callable[[Seen], Reply]] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def origin(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def json_reply(self, path: str, value: Any, status: int = 200) -> None:
        body = json.dumps(value).encode()
        self.routes[path] = lambda seen: (status, {"Content-Type": "application/json"}, body)


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = Seen(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length) if length else b"",
            )
            server.requests.append(seen)
            route = server.routes.get(urlsplit(self.path).path)
            status, headers, body = route(seen) if route else (404, {}, b"no such route")
            headers = dict(headers)
            # Without a length the body ends when the connection closes (HTTP/1.0).
            omit_length = headers.pop("X-Omit-Length", None) is not None
            try:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if not omit_length and status != 204:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading (size cap, timeout): expected

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _start_server() -> Server:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server = Server(httpd)
    httpd.RequestHandlerClass = _handler(server)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return server


@pytest.fixture
def server() -> Iterator[Server]:
    started = _start_server()
    yield started
    started.release.set()
    started.httpd.shutdown()
    started.httpd.server_close()


@pytest.fixture
def other_server() -> Iterator[Server]:
    """A second server: another origin (another port)."""
    started = _start_server()
    yield started
    started.httpd.shutdown()
    started.httpd.server_close()


@pytest.fixture
def store() -> MemorySecretStore:
    return MemorySecretStore({("", "api-token"): TOKEN, ("", "zendesk-api-token"): TOKEN})


@pytest.fixture
def gateway(tmp_path: Path, store: MemorySecretStore) -> Iterator[Gateway]:
    with gateway_with(
        secret_store=store, audit_path=tmp_path / "audit.db", sandbox=LOOPBACK_GRANTS
    ) as gw:
        yield gw


def _resource(
    folder: Path,
    url: str,
    *,
    method: str = "GET",
    properties: dict[str, Any] | None = None,
    required: list[str] | None = None,
    output_schema: dict[str, Any] | None = None,
    auth: bool = True,
    timeout: str | None = None,
    name: str = "api",
) -> Path:
    spec: dict[str, Any] = {
        "type": "rest",
        "description": "Call the test API.",
        "endpoint": {"method": method, "url": url},
        "inputSchema": {
            "type": "object",
            "properties": properties or {},
            "required": required or [],
        },
        "sideEffects": {"level": "read_only"},
        "observability": {"redactFields": ["args.password"]},
    }
    if auth:
        spec["endpoint"]["auth"] = {"type": "bearer", "secretRef": {"name": "api-token"}}
    if timeout is not None:
        spec["endpoint"]["timeout"] = timeout
    if output_schema is not None:
        spec["outputSchema"] = output_schema
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": name, "namespace": "test"},
        "spec": spec,
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def _audit_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("audit"))


# -- the seed's own example ------------------------------------------------------------------


def test_the_seed_zendesk_example_runs_through_the_pipeline(
    tmp_path: Path, server: Server, store: MemorySecretStore
) -> None:
    server.json_reply(
        "/api/v2/tickets.json", {"ticketUrl": "https://example.zendesk.com/t/7", "ticketId": 7}, 201
    )
    decisions: list[str] = []

    def approver(request: Any) -> str:
        decisions.append(request.tool_id)
        return "approve"

    with gateway_with(
        secret_store=store,
        audit_path=tmp_path / "audit.db",
        approver=approver,
        sandbox=LOOPBACK_GRANTS,
    ) as gateway:
        load = gateway.add_source(
            FIXTURES / "zendesk.yaml",
            options={"endpoint_origins": {"https://example.zendesk.com": server.origin}},
        )
        assert load.diagnostics == []
        arguments = {"subject": "Refund", "body": "customer-private-text", "priority": "high"}
        outcome = gateway.call_sync(
            SEED_TOOL, arguments, agent="support-triage", wait_for_approval=10
        )
        assert outcome.status is CallStatus.OK, outcome.message
        assert outcome.content == {"ticketUrl": "https://example.zendesk.com/t/7", "ticketId": 7}
        assert decisions == [SEED_TOOL]  # sideEffects.requiresApproval: true
        (seen,) = server.requests
        assert (seen.method, seen.path) == ("POST", "/api/v2/tickets.json")
        assert seen.headers["authorization"] == f"Bearer {TOKEN}"
        assert seen.headers["content-type"] == "application/json"
        assert seen.json == arguments
        # idempotencyKeyTemplate: the same subject replays the stored outcome; nothing is sent.
        again = gateway.call_sync(
            SEED_TOOL, arguments, agent="support-triage", wait_for_approval=10
        )
        assert again.status is CallStatus.OK
        assert again.metadata["idempotency"]["replayed"] is True
        assert len(server.requests) == 1
        # safety.allowedAgents
        denied = gateway.call_sync(SEED_TOOL, {**arguments, "subject": "x"}, agent="intruder")
        assert denied.code == "tool_not_found"  # hidden from this agent
        assert len(server.requests) == 1
    raw = _audit_bytes(tmp_path)
    assert SEED_TOOL.encode() in raw  # the records are there…
    assert TOKEN.encode() not in raw  # …without the token
    assert b"customer-private-text" not in raw  # redactFields: args.body


# -- the request -------------------------------------------------------------------------------


def test_placeholders_are_filled_url_encoded_and_the_rest_goes_in_the_query(
    gateway: Gateway, server: Server, tmp_path: Path
) -> None:
    server.json_reply("/users/a%2Fb%20c/items/%2E%2E", {"ok": True})
    path = _resource(
        tmp_path,
        f"{server.origin}/users/{{user}}/items/{{item}}?fixed=1",
        properties={
            "user": {"type": "string"},
            "item": {"type": "string"},
            "q": {"type": "string"},
            "tags": {"type": "array"},
            "flag": {"type": "boolean"},
            "skip": {"type": ["string", "null"]},
        },
        required=["user", "item"],
    )
    gateway.add_source(path)
    outcome = gateway.call_sync(
        "test:api",
        {
            "user": "a/b c",
            "item": "..",
            "q": "x y&z",
            "tags": [1, "two"],
            "flag": True,
            "skip": None,
        },
    )
    assert outcome.status is CallStatus.OK, outcome.message
    (seen,) = server.requests
    assert seen.method == "GET"
    assert seen.body == b""
    # '/' cannot split the segment and '..' cannot climb the path.
    assert (
        seen.path == "/users/a%2Fb%20c/items/%2E%2E?fixed=1&q=x%20y%26z&tags=1&tags=two&flag=true"
    )


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_body_methods_send_the_remaining_arguments_as_json(
    gateway: Gateway, server: Server, tmp_path: Path, method: str
) -> None:
    server.json_reply("/tickets/42", {"updated": True})
    properties = {"id": {"type": "integer"}, "note": {"type": "string"}, "n": {"type": "object"}}
    gateway.add_source(
        _resource(
            tmp_path,
            f"{server.origin}/tickets/{{id}}",
            method=method,
            properties=properties,
            required=["id"],
        )
    )
    outcome = gateway.call_sync("test:api", {"id": 42, "note": "hi", "n": {"a": [1]}})
    assert outcome.status is CallStatus.OK, outcome.message
    (seen,) = server.requests
    assert (seen.method, seen.path) == (method, "/tickets/42")
    assert seen.json == {"note": "hi", "n": {"a": [1]}}


def test_delete_sends_the_remaining_arguments_in_the_query(
    gateway: Gateway, server: Server, tmp_path: Path
) -> None:
    server.routes["/tickets/7"] = lambda seen: (204, {}, b"")
    properties = {"id": {"type": "string"}, "reason": {"type": "string"}}
    gateway.add_source(
        _resource(
            tmp_path,
            f"{server.origin}/tickets/{{id}}",
            method="DELETE",
            properties=properties,
            required=["id"],
        )
    )
    outcome = gateway.call_sync("test:api", {"id": "7", "reason": "dup"})
    assert outcome.status is CallStatus.OK, outcome.message
    assert outcome.content is None  # an empty body
    (seen,) = server.requests
    assert (seen.method, seen.path, seen.body) == ("DELETE", "/tickets/7?reason=dup", b"")


def test_prepare_request_refuses_objects_and_empty_values_in_placeholders() -> None:
    endpoint = RestEndpoint("GET", "https://api.example.com/x/{id}")
    from toolgate.backends import ArgumentConversionError

    with pytest.raises(ArgumentConversionError, match=r"/id: .*string or a number, not an object"):
        prepare_request(endpoint, {"id": {"a": 1}})
    with pytest.raises(ArgumentConversionError, match=r"/id: .*must not be empty"):
        prepare_request(endpoint, {"id": ""})
    assert prepare_request(endpoint, {"id": 1.5}) == PreparedRequest(
        "GET", "https://api.example.com/x/1.5", None
    )


# -- secrets -----------------------------------------------------------------------------------


def test_the_token_never_appears_in_results_errors_or_the_audit_log(
    tmp_path: Path, server: Server, store: MemorySecretStore
) -> None:
    # A server that echoes the token: in a JSON result, and in an error body.
    server.json_reply("/echo", {"youSent": f"Bearer {TOKEN}", TOKEN: "as a key"})
    server.routes["/fail"] = lambda seen: (
        500,
        {"Content-Type": "text/plain"},
        f"bad token {TOKEN} rejected".encode(),
    )
    audit = tmp_path / "audit"
    audit.mkdir()
    with gateway_with(
        secret_store=store, audit_path=audit / "audit.db", sandbox=LOOPBACK_GRANTS
    ) as gateway:
        gateway.add_source(_resource(tmp_path, f"{server.origin}/echo", name="echo"))
        gateway.add_source(_resource(tmp_path, f"{server.origin}/fail", name="fail"))
        ok = gateway.call_sync("test:echo", {})
        failed = gateway.call_sync("test:fail", {})
    assert server.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert ok.status is CallStatus.OK
    assert ok.content == {"youSent": "Bearer [REDACTED]", "[REDACTED]": "as a key"}
    assert failed.code == "tool_error"
    assert "HTTP 500" in (failed.message or "")
    assert "bad token [REDACTED] rejected" in (failed.message or "")
    for outcome in (ok, failed):
        assert TOKEN not in json.dumps(outcome.to_dict(), default=str)
        assert TOKEN not in repr(outcome)
    raw = _audit_bytes(audit)
    assert b"test:echo" in raw and b"test:fail" in raw
    assert TOKEN.encode() not in raw


def test_a_missing_secret_makes_the_tool_unavailable_until_it_is_set(
    tmp_path: Path, server: Server
) -> None:
    server.json_reply("/x", {"ok": True})
    store = MemorySecretStore()
    with Gateway(secret_store=store, sandbox=LOOPBACK_GRANTS) as gateway:
        gateway.add_source(_resource(tmp_path, f"{server.origin}/x"))
        (entry,) = gateway.entries()
        assert entry.unavailable_reason is not None
        assert "'api-token'" in entry.unavailable_reason
        assert "toolgate secrets set api-token" in entry.unavailable_reason
        outcome = gateway.call_sync("test:api", {})
        assert outcome.code == "unavailable"
        assert "toolgate secrets set api-token" in (outcome.message or "")
        assert gateway.status("test:api").phase == "Unavailable"
        assert server.requests == []

        store.set("", "api-token", TOKEN)
        (source,) = gateway.declarations.sources
        gateway.declarations.reload(source)
        assert gateway.call_sync("test:api", {}).status is CallStatus.OK
        assert server.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


async def test_a_running_gateway_notices_a_secret_being_set(tmp_path: Path, server: Server) -> None:
    import asyncio

    server.json_reply("/x", {"ok": True})
    store = MemorySecretStore()
    gateway = Gateway(secret_store=store, sandbox=LOOPBACK_GRANTS)
    gateway.add_source(_resource(tmp_path, f"{server.origin}/x"), options={"reload_interval": 0.05})
    await gateway.start()  # starts the source's watch for changed files and secrets
    try:
        assert not gateway.entries()[0].available
        store.set("", "api-token", TOKEN)
        for _ in range(400):  # a bounded wait for the watch; no timing is asserted
            if gateway.entries()[0].available:
                break
            await asyncio.sleep(0.025)
        assert gateway.entries()[0].available
        outcome = await gateway.call("test:api", {})
        assert outcome.status is CallStatus.OK, outcome.message
    finally:
        await gateway.aclose()


def test_a_tool_without_auth_sends_no_authorization_header(
    gateway: Gateway, server: Server, tmp_path: Path
) -> None:
    server.json_reply("/open", [1, 2])
    gateway.add_source(_resource(tmp_path, f"{server.origin}/open", auth=False))
    outcome = gateway.call_sync("test:api", {})
    assert outcome.content == [1, 2]
    assert "authorization" not in server.requests[0].headers


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 422, 503])
def test_http_errors_are_tool_errors_with_the_status_and_a_bounded_excerpt(
    gateway: Gateway, server: Server, tmp_path: Path, status: int
) -> None:
    body = ("E" * 50 + " ") * 100  # 5,100 characters
    server.routes["/x"] = lambda seen: (status, {"Content-Type": "text/plain"}, body.encode())
    gateway.add_source(_resource(tmp_path, f"{server.origin}/x"))
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "tool_error"
    message = outcome.message or ""
    assert f"HTTP {status}" in message
    assert f"GET {server.origin}/x" in message
    assert "E" * 50 in message
    assert len(message) < EXCERPT_CHARS + 400  # the excerpt is bounded, the body was not


def test_a_redirect_to_another_origin_is_not_followed(
    gateway: Gateway, server: Server, other_server: Server, tmp_path: Path
) -> None:
    other_server.json_reply("/steal", {"stolen": True})
    server.routes["/start"] = lambda seen: (302, {"Location": f"{other_server.origin}/steal"}, b"")
    gateway.add_source(_resource(tmp_path, f"{server.origin}/start"))
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "tool_error"
    assert "another origin" in (outcome.message or "")
    assert other_server.requests == []  # never requested: neither token nor arguments went there


def test_same_origin_redirects_are_followed_with_the_token(
    gateway: Gateway, server: Server, tmp_path: Path
) -> None:
    server.routes["/old"] = lambda seen: (307, {"Location": "/newer"}, b"")
    server.routes["/newer"] = lambda seen: (303, {"Location": "/result"}, b"")
    server.json_reply("/result", {"done": True})
    gateway.add_source(
        _resource(
            tmp_path, f"{server.origin}/old", method="POST", properties={"a": {"type": "string"}}
        )
    )
    outcome = gateway.call_sync("test:api", {"a": "1"})
    assert outcome.content == {"done": True}, outcome.message
    methods = [(seen.method, urlsplit(seen.path).path) for seen in server.requests]
    # 307 keeps the method and body; 303 turns it into a GET.
    assert methods == [("POST", "/old"), ("POST", "/newer"), ("GET", "/result")]
    assert server.requests[1].json == {"a": "1"}
    assert all(seen.headers["authorization"] == f"Bearer {TOKEN}" for seen in server.requests)


def test_a_redirect_loop_stops(gateway: Gateway, server: Server, tmp_path: Path) -> None:
    server.routes["/loop"] = lambda seen: (302, {"Location": "/loop"}, b"")
    gateway.add_source(_resource(tmp_path, f"{server.origin}/loop"))
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "tool_error"
    assert "redirected more than 5 times" in (outcome.message or "")
    assert len(server.requests) == 6


def test_a_result_that_does_not_match_the_output_schema_is_invalid_output(
    gateway: Gateway, server: Server, tmp_path: Path
) -> None:
    server.json_reply("/x", {"ticketId": "not a number"})
    gateway.add_source(
        _resource(
            tmp_path,
            f"{server.origin}/x",
            output_schema={"type": "object", "properties": {"ticketId": {"type": "integer"}}},
        )
    )
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "invalid_output"
    assert "ticketId" in (outcome.message or "")


def test_a_slow_endpoint_times_out(gateway: Gateway, server: Server, tmp_path: Path) -> None:
    def slow(seen: Seen) -> Reply:
        server.release.wait(30)  # released when the test ends
        return 200, {}, b"{}"

    server.routes["/slow"] = slow
    gateway.add_source(_resource(tmp_path, f"{server.origin}/slow", timeout="300ms"))
    assert gateway.get_tool("test:api").timeout == 0.3
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "timeout"


def test_an_endpoint_nobody_listens_on_is_unavailable(gateway: Gateway, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gateway.add_source(_resource(tmp_path, f"http://127.0.0.1:{port}/x"))
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "unavailable"
    assert "cannot connect" in (outcome.message or "")


@pytest.mark.parametrize("declared_length", [True, False])
def test_a_response_past_the_size_cap_is_refused(
    gateway: Gateway, server: Server, tmp_path: Path, declared_length: bool
) -> None:
    big = b'"' + b"x" * (10 * 1024 * 1024 + 10) + b'"'
    headers = {"Content-Type": "application/json"}
    if not declared_length:
        headers["X-Omit-Length"] = "1"  # the cap is then found while reading
    server.routes["/big"] = lambda seen: (200, headers, big)
    gateway.add_source(_resource(tmp_path, f"{server.origin}/big"))
    outcome = gateway.call_sync("test:api", {})
    assert outcome.code == "tool_error"
    assert "more than 10,485,760 bytes" in (outcome.message or "")


def test_text_responses_are_strings_and_binary_ones_are_errors(
    gateway: Gateway, server: Server, tmp_path: Path
) -> None:
    server.routes["/text"] = lambda seen: (
        200,
        {"Content-Type": "text/plain; charset=utf-8"},
        "héllo".encode(),
    )
    server.routes["/bin"] = lambda seen: (
        200,
        {"Content-Type": "image/png"},
        b"\x89PNG\xff\xfe\x00",
    )
    server.routes["/badjson"] = lambda seen: (200, {"Content-Type": "application/json"}, b"{oops")
    gateway.add_source(_resource(tmp_path, f"{server.origin}/text", name="text"))
    gateway.add_source(_resource(tmp_path, f"{server.origin}/bin", name="bin"))
    gateway.add_source(_resource(tmp_path, f"{server.origin}/badjson", name="badjson"))
    assert gateway.call_sync("test:text", {}).content == "héllo"
    binary = gateway.call_sync("test:bin", {})
    assert binary.code == "tool_error" and "binary content (image/png)" in (binary.message or "")
    bad = gateway.call_sync("test:badjson", {})
    assert bad.code == "tool_error" and "not valid JSON" in (bad.message or "")
