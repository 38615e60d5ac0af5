"""The MCP client's connections to streamable HTTP servers go through the SSRF guard (issue 8).

Every request the SDK client sends to an ``MCPServer`` URL passes through the REST tools'
:class:`~toolgate.backends.rest_transport.GuardedTransport`: loopback and private addresses only
with the operator's grant for the server (``MCPServer:<name>`` in ``sandbox.network_grants``),
metadata addresses never, the gateway's own ports never, each redirect hop checked when it opens
a connection. The servers here are real: the SDK-written ``changing_server.py`` over streamable
HTTP on loopback, and small HTTP servers that answer with redirects.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from test_mcp_tools import CHANGING_SERVER, HttpServer, _free_port, close, open_gateway, ref, spec
from toolgate.backends import rest_transport
from toolgate.backends.mcp_client import grant_key
from toolgate.config.files import load_config
from toolgate.errors import ConfigError, ErrorCode
from toolgate.formats._common.diagnostics import Severity
from toolgate.formats.mcp_server.source import McpServerSpec, parse_mcp_server
from toolgate.model import CallStatus, SideEffect
from toolgate.sandbox.runner import Sandbox

pytestmark = pytest.mark.slow

TOKEN = "guard-test-t0ken"
SECRETS = {"local-token": TOKEN}


@pytest.fixture(scope="module")
def local_server() -> Iterator[HttpServer]:
    """A real MCP server (the official SDK's) on 127.0.0.1 that wants ``Bearer TOKEN``."""
    port = _free_port()
    server = HttpServer([sys.executable, str(CHANGING_SERVER), "http", str(port), TOKEN], port)
    server.start()
    yield server
    server.stop()


def local(name: str, url: str) -> McpServerSpec:
    return spec(name, url=url, bearer_secret="local-token", level=SideEffect.LOCAL_WRITE)


def grants(name: str, *networks: str, deny_ports: tuple[int, ...] = ()) -> Sandbox:
    return Sandbox(cidr_grants={grant_key(name): networks}, deny_ports=deny_ports)


def unavailable_reason(server_spec: McpServerSpec, sandbox: Sandbox | None = None) -> str:
    """Why the server's tool (named by a ``Tool`` resource) is unavailable: the call's message."""
    added = ref("ops:add", server_spec.name, "add_tool", side_effect=SideEffect.LOCAL_WRITE)
    gateway, source = open_gateway([server_spec], [added], secrets=SECRETS, sandbox=sandbox)
    try:
        outcome = gateway.call_sync("ops:add", {"name": "x"})
        assert outcome.code is ErrorCode.UNAVAILABLE, outcome
        return outcome.message or ""
    finally:
        close(gateway, source)


# -- loopback: only with the operator's grant for the server -------------------------------------


def test_loopback_without_a_grant_is_refused_and_the_gateway_keeps_serving(
    local_server: HttpServer,
) -> None:
    def ping() -> str:
        """Answer pong."""
        return "pong"

    added = ref("ops:add", "local", "add_tool", side_effect=SideEffect.LOCAL_WRITE)
    # A grant keyed by a tool id, as for REST tools, is not the server's grant.
    by_tool_id = Sandbox(cidr_grants={"ops:add": ("127.0.0.0/8",)})
    gateway, source = open_gateway(
        [local("local", local_server.url)], [added], secrets=SECRETS, sandbox=by_tool_id
    )
    try:
        gateway.add(ping, namespace="util")
        outcome = gateway.call_sync("ops:add", {"name": "x"})
        assert outcome.code is ErrorCode.UNAVAILABLE
        message = outcome.message or ""
        assert "the MCP server local is refused" in message
        assert "toolgate does not connect to 127.0.0.1" in message
        assert "127.0.0.1 is a loopback address" in message
        assert "MCPServer:local in sandbox.network_grants" in message
        assert TOKEN not in message
        # The gateway goes on serving its other tools.
        assert gateway.call_sync("util:ping", {}).content == "pong"
    finally:
        close(gateway, source)


def test_with_the_operators_grant_the_server_is_listed_and_called(
    local_server: HttpServer,
) -> None:
    gateway, source = open_gateway(
        [local("local", local_server.url)],
        secrets=SECRETS,
        sandbox=grants("local", "127.0.0.0/8"),
    )
    try:
        ids = {tool.id for tool in gateway.list_tools()}
        assert {"local:add_tool", "local:remove_tool"} <= ids
        outcome = gateway.call_sync("local:add_tool", {"name": "granted"})
        assert outcome.status is CallStatus.OK, outcome.message
        assert outcome.to_dict()["content"] == {"result": "added granted"}
    finally:
        close(gateway, source)


def test_a_listing_without_a_grant_reports_the_refusal_as_a_diagnostic(
    local_server: HttpServer,
) -> None:
    gateway, source = open_gateway([local("local", local_server.url)], secrets=SECRETS)
    try:
        (problem,) = gateway.diagnostics()
        assert "no tools listed yet" in problem.message
        assert "the MCP server local is refused" in problem.message
        assert "loopback" in problem.message
        assert gateway.list_tools() == []
    finally:
        close(gateway, source)


def test_the_gateways_own_port_is_refused_even_with_a_grant(local_server: HttpServer) -> None:
    sandbox = grants("local", "127.0.0.0/8", deny_ports=(local_server.port,))
    message = unavailable_reason(local("local", local_server.url), sandbox)
    assert f"port {local_server.port} is one of the gateway's own ports" in message


# -- metadata addresses: never -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "networks", "says"),
    [
        # A grant that covers the address is itself refused: nothing is ever connected.
        ("http://169.254.169.254/mcp", ("169.254.0.0/16",), "metadata addresses can never"),
        # Every range that can be granted, around it: the address is still refused.
        (
            "http://169.254.169.254/mcp",
            ("127.0.0.0/8", "169.254.0.0/17", "169.254.169.0/25"),
            "169.254.169.254 is a metadata address, which a tool may never reach",
        ),
        ("http://0xa9fea9fe/mcp", ("10.0.0.0/8",), "169.254.169.254 is a metadata address"),
        ("http://[fd00:ec2::254]/mcp", ("fd00::/16",), "metadata addresses can never"),
        ("http://[fd00:ec2::254]/mcp", ("fd01::/16",), "fd00:ec2::254 is a metadata address"),
    ],
)
def test_a_metadata_address_is_refused_even_with_a_grant(
    url: str, networks: tuple[str, ...], says: str
) -> None:
    message = unavailable_reason(local("meta", url), grants("meta", *networks))
    assert "the MCP server meta" in message
    assert says in message


def test_a_grant_that_covers_a_metadata_address_is_a_configuration_error(project: Path) -> None:
    config = project / "toolgate.yaml"
    config.write_text(
        yaml.safe_dump({"sandbox": {"network_grants": {"MCPServer:local": ["127.0.0.1/32"]}}}),
        encoding="utf-8",
    )
    loaded = load_config(config)
    assert loaded.config.sandbox.network_grants == {"MCPServer:local": ("127.0.0.1/32",)}
    config.write_text(
        yaml.safe_dump({"sandbox": {"network_grants": {"MCPServer:meta": ["169.254.0.0/16"]}}}),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="metadata"):
        load_config(config)


@pytest.mark.parametrize("host", ["169.254.169.254", "0xa9fea9fe", "[fd00:ec2::254]"])
def test_validate_warns_about_a_metadata_url(host: str) -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "meta"},
        "spec": {"url": f"http://{host}/mcp"},
    }
    parsed, problems = parse_mcp_server(document, path="mcp.yaml", pointer="")
    assert parsed is not None  # declared: the connection refuses it with the reason
    (problem,) = problems
    assert (problem.severity, problem.field) == (Severity.WARNING, "/spec/url")
    assert "is a cloud metadata address; toolgate never connects to it" in problem.message


# -- host names are resolved once and every address is checked ---------------------------------


def test_a_host_name_that_resolves_to_loopback_is_refused(local_server: HttpServer) -> None:
    url = f"http://localhost:{local_server.port}/mcp"
    message = unavailable_reason(local("named", url))
    assert "toolgate does not connect to localhost" in message
    assert "localhost resolves to" in message and "loopback" in message


def test_a_host_name_that_resolves_to_a_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["10.20.30.40"]

    monkeypatch.setattr(rest_transport, "system_resolver", resolver)
    # A grant for loopback does not open the private network the name points to.
    message = unavailable_reason(
        local("internal", "http://mcp.internal.test/mcp"), grants("internal", "127.0.0.0/8")
    )
    assert "mcp.internal.test" in asked
    assert "mcp.internal.test resolves to 10.20.30.40" in message
    assert "10.20.30.40 is a private address" in message


# -- redirects -----------------------------------------------------------------------------------


class _Redirects(ThreadingHTTPServer):
    """Answers every request with a 307 to ``location`` on a connection it then closes."""

    def __init__(self, host: str, location: str | None) -> None:
        self.location = location
        self.paths: list[str] = []
        super().__init__((host, 0), _RedirectHandler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _RedirectHandler(BaseHTTPRequestHandler):
    server: _Redirects

    def _answer(self) -> None:
        self.server.paths.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        location = self.server.location
        self.send_response(307 if location else 404)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        # A closed connection makes the next hop open (and check) a new one.
        self.send_header("Connection", "close")
        self.close_connection = True
        self.end_headers()

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_servers() -> Iterator[list[_Redirects]]:
    """Start the servers a test appends (``start``); stop them all after it."""
    started: list[_Redirects] = []
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


def start(servers: list[_Redirects], host: str, location: str | None = None) -> _Redirects:
    server = _Redirects(host, location)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    servers.append(server)
    return server


def test_a_redirect_to_another_address_is_not_followed(http_servers: list[_Redirects]) -> None:
    # 127.0.0.2 is loopback too, but outside the server's /32 grant: never asked.
    target = start(http_servers, "127.0.0.2")
    target_url = f"http://127.0.0.2:{target.port}/mcp"
    front = start(http_servers, "127.0.0.1", target_url)
    url = f"http://127.0.0.1:{front.port}/mcp"
    message = unavailable_reason(local("hop", url), grants("hop", "127.0.0.1/32"))
    assert "the MCP server hop" in message
    assert f"Redirect to {target_url} not followed" in message
    assert front.paths and set(front.paths) == {"/mcp"}
    assert target.paths == []


def test_a_redirect_hop_is_checked_again_when_its_connection_opens(
    http_servers: list[_Redirects], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Same origin, so the SDK follows it; the server closes the connection, so the next hop
    # opens a new one, and by then the name points at a private address (DNS rebinding).
    front = start(http_servers, "127.0.0.1", "/mcp/")
    answers = iter([["127.0.0.1"]])
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return next(answers, ["10.0.0.7"])

    monkeypatch.setattr(rest_transport, "system_resolver", rebinding)
    url = f"http://rebind.test:{front.port}/mcp"
    message = unavailable_reason(local("rebind", url), grants("rebind", "127.0.0.1/32"))
    assert "the MCP server rebind is refused" in message
    assert "rebind.test resolves to 10.0.0.7: 10.0.0.7 is a private address" in message
    # The first hop reached the server; the redirected one never did.
    assert front.paths[:1] == ["/mcp"] and "/mcp/" not in front.paths
    assert len(asked) >= 2


# -- stdio servers are not affected --------------------------------------------------------------


def test_a_stdio_server_needs_no_grant() -> None:
    stdio = spec(
        "changing",
        command=sys.executable,
        args=(str(CHANGING_SERVER),),
        level=SideEffect.LOCAL_WRITE,
    )
    gateway, source = open_gateway([stdio], sandbox=Sandbox())
    try:
        outcome = gateway.call_sync("changing:add_tool", {"name": "s"})
        assert outcome.to_dict()["content"] == {"result": "added s"}
    finally:
        close(gateway, source)
