"""``build_app``: one ASGI application for ``toolgate serve`` — the HTTP API, MCP and the web UI.

Requests are routed by path, unchanged (no prefix is stripped, so each sub-app sees the paths
it documents):

* ``/v1``, ``/v1/…``, ``/healthz``, ``/openapi.json``, ``/metrics`` → the HTTP API
  (:func:`~toolgate.serve.api.build_api`; ``GET /v1`` is its index, which links to MCP and the
  web UI when they are served);
* ``/mcp`` and ``/mcp/…`` → the MCP sub-app (streamable HTTP), when given;
* ``/.well-known/oauth-protected-resource`` and ``…/mcp`` → the OAuth Protected Resource
  Metadata (:mod:`toolgate.serve.auth.metadata`), when ``auth:`` is configured;
* anything else → the web UI sub-app, when given (else the API, which answers ``404``).

The MCP and UI sub-apps are plain ASGI apps, optionally wrapped in :class:`SubApp` with a
``lifespan``: an async context manager factory entered at startup (after the gateway started)
and left at shutdown, in reverse order (the MCP SDK's session manager runs there). ASGI lifespan
events are not forwarded to sub-apps; their lifespan goes in :class:`SubApp`.

The application's own lifespan starts the gateway (``await gateway.start()``: tool folders are
watched, declaration sources such as MCP-server tools connect) and closes it at shutdown
(``await gateway.aclose()``, which flushes the audit log).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from .._loop_watchdog import DEFAULT_BLOCKED_AFTER, LoopWatchdog
from ..gateway import Gateway
from ..pipeline.approval_policy import ApprovalPolicy
from ..telemetry.metrics import CallMetrics
from .api import ApiLimits, build_api
from .auth.identity import AuthenticationError, Connection, Principal
from .auth.metadata import ResourceMetadata

__all__ = [
    "API_PATHS",
    "MCP_PATH",
    "ServeApp",
    "SubApp",
    "build_app",
    "http_authenticator",
    "mcp_authenticator",
]

log = logging.getLogger("toolgate.serve")

#: Where the MCP sub-app is served.
MCP_PATH: Final = "/mcp"
#: Paths the HTTP API answers besides everything under ``/v1/``.
API_PATHS: Final = frozenset({"/v1", "/healthz", "/openapi.json", "/metrics"})
#: The web UI page deciding an approval request (``{id}``), given to agents whose call waits.
UI_APPROVAL_PATH: Final = "/approvals/{id}"


@dataclass(frozen=True)
class SubApp:
    """An ASGI app mounted by :func:`build_app`, and what must run while it is served."""

    app: ASGIApp
    lifespan: Callable[[], AbstractAsyncContextManager[Any]] | None = None
    """Entered at startup, left at shutdown (e.g. ``session_manager.run`` of the MCP SDK)."""


def http_authenticator(authenticate: Callable[[Request], str]) -> Callable[[Request], str]:
    """``authenticate`` raising Starlette's ``HTTPException(401)`` (with ``WWW-Authenticate:
    Bearer``) instead of :class:`~toolgate.serve.auth.identity.AuthenticationError`, for sub-apps
    that answer HTTP errors themselves (the MCP surface)."""

    def checked(request: Request) -> str:
        try:
            return authenticate(request)
        except AuthenticationError as exc:
            raise HTTPException(
                401, detail=exc.message, headers={"WWW-Authenticate": 'Bearer realm="toolgate"'}
            ) from None

    return checked


def mcp_authenticator(
    identify: Callable[[Request], Awaitable[Principal]], metadata: ResourceMetadata | None
) -> Callable[[Request], Awaitable[Principal]]:
    """``identify`` for the MCP surface: a refusal is Starlette's ``HTTPException`` with the
    status the credential earned (401, 403 for a missing scope, 503 when a token cannot be
    checked) and, with ``metadata``, a challenge naming the MCP endpoint's resource metadata."""

    async def checked(request: Request) -> Principal:
        try:
            return await identify(request)
        except AuthenticationError as exc:
            if exc.status == 503:
                headers = {"Retry-After": "30"}
            elif metadata is None:
                headers = {"WWW-Authenticate": 'Bearer realm="toolgate"'}
            else:
                headers = {"WWW-Authenticate": metadata.challenge(exc, mcp=True)}
            raise HTTPException(exc.status, detail=exc.message, headers=headers) from None

    return checked


def _sub(value: SubApp | ASGIApp | None) -> SubApp | None:
    if value is None or isinstance(value, SubApp):
        return value
    return SubApp(value)


class ServeApp:
    """The composed ASGI application (see the module docstring)."""

    def __init__(
        self,
        gateway: Gateway,
        api: ASGIApp,
        *,
        mcp: SubApp | None = None,
        ui: SubApp | None = None,
        manage_gateway: bool = True,
        resource_metadata: ResourceMetadata | None = None,
        watchdog: LoopWatchdog | None = None,
    ) -> None:
        self.gateway = gateway
        self.watchdog = watchdog
        """Watches the serving loop while the app is served (started by :meth:`lifespan`)."""
        self.api = api
        self.mcp = mcp
        self.ui = ui
        self.manage_gateway = manage_gateway
        self.resource_metadata = resource_metadata

    def route(self, path: str) -> ASGIApp:
        """The sub-app serving ``path``."""
        metadata = self.resource_metadata
        if metadata is not None and path in metadata.paths:
            return metadata
        if self.mcp is not None and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
            return self.mcp.app
        if path in API_PATHS or path.startswith("/v1/"):
            return self.api
        return self.api if self.ui is None else self.ui.app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.route(scope.get("path", ""))(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Start the gateway and the sub-apps' lifespans; stop them in reverse order."""
        async with AsyncExitStack() as stack:
            if self.watchdog is not None:
                self.watchdog.start()
                stack.callback(self.watchdog.stop)
            if self.manage_gateway:
                stack.push_async_callback(self.gateway.aclose)
                await self.gateway.start()
            for sub in (self.mcp, self.ui):
                if sub is not None and sub.lifespan is not None:
                    await stack.enter_async_context(sub.lifespan())
            yield

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol around :meth:`lifespan`."""
        await receive()  # lifespan.startup
        context = self.lifespan()
        try:
            await context.__aenter__()
        except BaseException as exc:
            log.exception("toolgate could not start")
            await send({"type": "lifespan.startup.failed", "message": f"{exc}"})
            return
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await context.__aexit__(None, None, None)
        except BaseException as exc:
            log.exception("toolgate did not stop cleanly")
            await send({"type": "lifespan.shutdown.failed", "message": f"{exc}"})
            return
        await send({"type": "lifespan.shutdown.complete"})


def build_app(
    gateway: Gateway,
    *,
    authenticate: Callable[[Connection], str],
    is_operator: Callable[[str], bool] | None = None,
    mcp: SubApp | ASGIApp | None = None,
    ui: SubApp | ASGIApp | None = None,
    approval_policy: ApprovalPolicy | None = None,
    limits: ApiLimits | None = None,
    public_url: str = "",
    manage_gateway: bool = True,
    identify: Callable[[Connection], Awaitable[Principal]] | None = None,
    resource_metadata: ResourceMetadata | None = None,
    metrics: CallMetrics | None = None,
    loop_blocked_after: float = DEFAULT_BLOCKED_AFTER,
) -> ServeApp:
    """One ASGI app serving ``gateway``: the HTTP API, plus MCP at ``/mcp`` and the web UI at
    ``/`` when given.

    ``authenticate`` and ``is_operator`` are the identity rules
    (:class:`~toolgate.serve.auth.identity.AgentIdentity`), shared with the sub-apps by whoever
    builds them. ``public_url`` (``http://127.0.0.1:8470``) prefixes the web UI link agents get
    for a call that waits for approval. With ``manage_gateway`` (the default) the app's
    lifespan starts and closes the gateway. ``metrics`` (told about the gateway's calls) are
    served to operators at ``/metrics``.

    With OAuth (``auth:``), ``identify`` names callers by API key or bearer token
    (:meth:`~toolgate.serve.auth.callers.Callers.identify`) and ``resource_metadata`` is served at
    the well-known paths and named in every 401's challenge.

    While it is served, a :class:`~toolgate._loop_watchdog.LoopWatchdog` reports the event loop
    when it does not answer for ``loop_blocked_after`` seconds (``0``: no watchdog).
    """
    ui_app = _sub(ui)
    approve_link = None if ui_app is None else public_url.rstrip("/") + UI_APPROVAL_PATH
    served = {"mcp": MCP_PATH} if mcp is not None else {}
    if ui_app is not None:
        served["ui"] = "/"
    api = build_api(
        gateway,
        authenticate=authenticate,
        is_operator=is_operator,
        approval_policy=approval_policy,
        limits=limits,
        approve_link=approve_link,
        identify=identify,
        challenge=None if resource_metadata is None else resource_metadata.challenge,
        metrics=metrics,
        index_links=served,
    )
    return ServeApp(
        gateway,
        api,
        mcp=_sub(mcp),
        ui=ui_app,
        manage_gateway=manage_gateway,
        resource_metadata=resource_metadata,
        watchdog=LoopWatchdog(
            loop_blocked_after, setting="serve.loop_blocked_after in toolgate.yaml"
        )
        if loop_blocked_after > 0
        else None,
    )
