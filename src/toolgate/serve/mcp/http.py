"""MCP over streamable HTTP: the ASGI app ``toolgate serve`` routes ``/mcp`` to.

::

    mcp = McpHttp(gateway, authenticate=identify, approvals_url="http://127.0.0.1:8470")
    app = Starlette(routes=[mcp.route("/mcp"), ...], lifespan=...)  # enter mcp.lifespan() there

Every HTTP request is authenticated first, by the injected ``authenticate(request)``: it returns
the agent name (``None``: the default agent) or a
:class:`~toolgate.serve.auth.identity.Principal` (an agent and the namespaces its OAuth token
allows), or a Starlette ``Response`` to send instead (a 401), or raises ``HTTPException``;
anything else it raises is a 500 and the request is refused (fail closed). The agent is then
fixed for the request; a handshake-era session is bound to the agent that opened it (another key
gets 404, as for an unknown session).

Sessions: the SDK's session manager serves both protocol eras on one URL. A 2026-07-28 request is
one self-contained POST (no session at all); handshake-era clients get stateful sessions, which
they need for what toolgate sends them unasked — ``notifications/tools/list_changed`` on the GET
stream and the ``elicitation/create`` approval form. ``stateless=True`` trades those two for
horizontal scaling of handshake-era clients (then they learn of approvals from the pending
result, and re-list tools on their own).

Limits: request bodies over ``max_body`` bytes (default 1 MiB) get 413 before they are parsed,
with a JSON-RPC error (``-32600``) that gives the body's size, the limit and the setting that
raises it (``serve.max_body_bytes``; the MCP client shows that message to its user);
a body the gateway's strict JSON parser refuses (a duplicate key, ``NaN``/``Infinity``, nesting
deeper than 64 levels) gets 400 with a JSON-RPC parse error naming why, before the SDK reads it;
at most ``max_sessions`` handshake-era sessions are open at once (503 past that), each closed
after ``session_idle_timeout`` seconds without a request. Bound to a loopback ``host``, the
``Host`` and ``Origin`` headers must name a loopback address too (DNS-rebinding protection, as
the SDK sets up for localhost).
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST, PARSE_ERROR
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..._json import StrictJsonError, loads_strict
from ...gateway import Gateway
from ..auth.identity import Principal
from ..oversized import DROP_MAX_BYTES, drop_rest
from .fast import FastToolCalls, read_body
from .server import DEFAULT_PAGE_SIZE, McpSurface, build_mcp_server

__all__ = ["AGENT_SCOPE_KEY", "DEFAULT_MAX_BODY", "NAMESPACES_SCOPE_KEY", "Authenticate", "McpHttp"]

logger = logging.getLogger(__name__)

#: The ASGI scope key holding the authenticated agent name of the request.
AGENT_SCOPE_KEY: Final = "toolgate.agent"
#: The ASGI scope key holding the tool namespaces the request's credentials allow.
NAMESPACES_SCOPE_KEY: Final = "toolgate.namespaces"
#: Largest request body accepted, in bytes.
DEFAULT_MAX_BODY: Final = 1024 * 1024
#: Where ``toolgate serve`` takes ``max_body`` from, named in the answer to a body over it.
LIMIT_SETTING: Final = "serve.max_body_bytes in toolgate.yaml"
_LOOPBACK = ("127.0.0.1", "localhost", "::1")

#: ``authenticate(request)``: the agent name (``None``: the default agent) or a ``Principal``, a
#: ``Response`` to send instead, or an awaitable of any; may raise ``HTTPException``.
Authenticate = Callable[
    [Request],
    "str | Principal | Response | Awaitable[str | Principal | Response | None] | None",
]

_UNSET = object()


class McpHttp:
    """The gateway's MCP server over streamable HTTP: ``.app`` (ASGI) and ``.lifespan()``."""

    def __init__(
        self,
        gateway: Gateway,
        *,
        authenticate: Authenticate,
        approvals_url: str | None = None,
        elicitation: bool = True,
        stateless: bool = False,
        request_state_key: bytes | None = None,
        host: str = "127.0.0.1",
        allowed_hosts: Sequence[str] | None = None,
        allowed_origins: Sequence[str] | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        max_sessions: int = 1000,
        session_idle_timeout: float = 30 * 60,
        fast_path: bool = True,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        """
        Args:
            gateway: The gateway whose tools are served.
            authenticate: Who is calling (see the module documentation).
            approvals_url: The web UI's base URL, for the approval links of pending results.
            elicitation: Ask clients that declare form elicitation to approve calls.
            stateless: Serve handshake-era clients without sessions (see above).
            request_state_key: The key sealing pending approvals' ``requestState``, shared by
                replicas (see :class:`~toolgate.serve.mcp.server.McpSurface`).
            host: The address the server binds; a loopback one turns on Host/Origin checks.
            allowed_hosts: ``Host`` values to accept (``"name:*"`` for any port); given, the
                checks are on whatever ``host`` is.
            allowed_origins: ``Origin`` values to accept (same pattern), with ``allowed_hosts``.
            max_body: Largest request body, in bytes (``toolgate serve``: ``serve.max_body_bytes``,
                which a larger body's ``413`` names).
            max_sessions: Most handshake-era sessions open at once.
            session_idle_timeout: Seconds of inactivity after which such a session is closed.
            fast_path: Answer plain 2026-07-28 ``tools/call`` POSTs directly
                (:mod:`toolgate.serve.mcp.fast`); off, the SDK answers every request.
            page_size: Tools per ``tools/list`` page (``toolgate serve``:
                ``serve.mcp_page_size``).
        """
        self._authenticate = authenticate
        self._max_body = max_body
        self._principals: dict[str | None, AuthenticatedUser] = {}
        self.surface: McpSurface = build_mcp_server(
            gateway,
            agent=_agent_of,
            namespaces=_namespaces_of,
            approvals_url=approvals_url,
            elicitation=elicitation,
            request_state_key=request_state_key,
            page_size=page_size,
        )
        security = _security(host, allowed_hosts, allowed_origins)
        self._fast = (
            FastToolCalls(self.surface, security=security, max_body=max_body) if fast_path else None
        )
        self.manager = StreamableHTTPSessionManager(
            app=self.surface.server,
            # SSE responses: a handshake-era call can then carry its elicitation/create request
            # on its own response stream. 2026-07-28 calls still answer plain JSON unless they
            # emit something first.
            json_response=False,
            stateless=stateless,
            security_settings=security,
            max_request_body_size=max_body,
            max_sessions=max_sessions,
            session_idle_timeout=session_idle_timeout,
        )

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the session manager (and list-change delivery) while the server runs."""
        self.surface.start()
        try:
            async with self.manager.run():
                yield
        finally:
            await self.surface.tasks.aclose()  # running tasks recorded cancelled (stateless ones)
            self.surface.stop()

    def _principal(self, agent: str | None) -> AuthenticatedUser:
        user = self._principals.get(agent)
        if user is None:
            if len(self._principals) > 4096:  # agents come from configuration; bound it anyway
                self._principals.clear()
            token = AccessToken(token="toolgate-agent", client_id=agent or "default", scopes=[])
            user = self._principals[agent] = AuthenticatedUser(token)
        return user

    @property
    def app(self) -> ASGIApp:
        """The ASGI app to serve at ``/mcp`` (this object: it authenticates, then hands the
        request to the SDK's session manager)."""
        return self

    def route(self, path: str = "/mcp") -> Route:
        """A Starlette route serving MCP at exactly ``path`` (GET, POST and DELETE)."""
        # An object (not a function) as endpoint: Starlette then passes the raw ASGI call.
        return Route(path, endpoint=self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # websocket and other scopes are not served here (the server refuses them)
        request = Request(scope, receive)
        try:
            identity = self._authenticate(request)
            if inspect.isawaitable(identity):
                identity = await identity
        except HTTPException as exc:
            await _error(exc.status_code, exc.detail, exc.headers)(scope, receive, send)
            return
        except Exception:
            logger.exception("authenticating an MCP request failed")
            await _error(500, "could not authenticate the request")(scope, receive, send)
            return
        if isinstance(identity, Response):
            await identity(scope, receive, send)
            return
        namespaces = None
        if isinstance(identity, Principal):
            namespaces = identity.namespaces
            identity = identity.agent
        if identity is not None and not isinstance(identity, str):
            logger.error("authenticate returned %r, not an agent name", type(identity).__name__)
            await _error(500, "could not authenticate the request")(scope, receive, send)
            return
        scope[AGENT_SCOPE_KEY] = identity
        scope[NAMESPACES_SCOPE_KEY] = namespaces
        # The SDK binds a stateful session to the principal that opened it (its owner check):
        # present the agent as that principal, so no other key can use the session.
        scope["user"] = self._principal(identity)
        if scope["method"] == "POST":
            declared = _content_length(scope)
            if declared is not None and declared > self._max_body:
                await self._refuse_size(scope, receive, send, declared)
                return
            # The SDK parses JSON-RPC leniently (the last duplicate key wins, NaN is a number):
            # the gateway's strict parser reads every message first and refuses those.
            body, receive, over_limit = await read_body(receive, self._max_body)
            if over_limit:
                await self._refuse_size(scope, receive, send, None)
                return
            problem = _refused_json(body)
            if problem is not None:
                await _error(400, f"Parse error: {problem}", code=PARSE_ERROR)(scope, receive, send)
                return
        if self._fast is not None:
            handed_on = await self._fast(scope, receive, send, identity, namespaces=namespaces)
            if handed_on is None:
                return
            receive = handed_on
        # What the SDK asks by tool name alone (the Mcp-Param-* header check) is answered for
        # this request's caller: a tool hidden from it has no schema to check headers against.
        with self.surface.answering(request):
            await self.manager.handle_request(scope, receive, send)

    async def _refuse_size(
        self, scope: Scope, receive: Receive, send: Send, declared: int | None
    ) -> None:
        """Answer a body over the limit (``declared`` by its ``Content-Length``, or found
        over it while reading) with :func:`_too_large`, after reading the rest of it when that
        is reasonable (:func:`~toolgate.serve.oversized.drop_rest`)."""
        read = (
            None
            if declared is not None and declared > DROP_MAX_BYTES
            else await drop_rest(scope, receive)
        )
        size = declared if declared is not None else read
        await _too_large(size, self._max_body, close=read is None)(scope, receive, send)


def _agent_of(request: Any) -> str | None:
    """The agent :meth:`McpHttp.app` authenticated for this request; refuse when there is none."""
    scope = getattr(request, "scope", None)
    agent = _UNSET if not isinstance(scope, dict) else scope.get(AGENT_SCOPE_KEY, _UNSET)
    if agent is _UNSET:
        # Only reachable if the server were driven around McpHttp.app: fail closed.
        raise MCPError(INVALID_REQUEST, "the request was not authenticated")
    return agent if isinstance(agent, str) else None


def _namespaces_of(request: Any) -> frozenset[str] | None:
    """The namespaces :meth:`McpHttp.app` found the request's credentials to allow."""
    scope = getattr(request, "scope", None)
    found = None if not isinstance(scope, dict) else scope.get(NAMESPACES_SCOPE_KEY)
    return found if isinstance(found, frozenset) else None


def _security(
    host: str, hosts: Sequence[str] | None, origins: Sequence[str] | None
) -> TransportSecuritySettings | None:
    if hosts is not None:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=list(hosts),
            allowed_origins=list(origins or ()),
        )
    if host in _LOOPBACK:
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    return None


def _refused_json(body: bytes | None) -> str | None:
    """Why a request body that is JSON is refused by the gateway's strict parser (a duplicate
    key, ``NaN``/``Infinity``, nesting too deep); ``None`` otherwise (the SDK answers malformed
    JSON itself; a body over the limit was answered before)."""
    if not body:
        return None
    try:
        loads_strict(body)
    except StrictJsonError as exc:
        return None if exc.malformed else str(exc)
    return None


def _content_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, when it gives one that is a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


def _too_large(size: int | None, limit: int, *, close: bool) -> Response:
    """The ``413`` answering a body over ``limit``: a JSON-RPC error whose message gives the
    body's size (``None``: unknown), the limit and the setting that raises it — what an MCP
    client shows its user (the SDK's own answer is plain text, which a client can only report
    as "Server returned an error response"). ``close``: the body was not read to its end, so
    the connection cannot serve another request."""
    said = "over" if size is None else f"{size:,} bytes, over"
    return _error(
        413,
        f"Request body too large: {said} this server's limit of {limit:,} bytes (set by "
        f"{LIMIT_SETTING})",
        {"Connection": "close"} if close else None,
    )


def _error(
    status: int, message: str, headers: Any = None, *, code: int = INVALID_REQUEST
) -> Response:
    """A JSON-RPC error body with no id (the request was not read), with an HTTP status."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return Response(
        json.dumps(body), status_code=status, headers=headers, media_type="application/json"
    )
