"""``build_ui``: the operator's console as one Starlette app (mounted at ``/`` by the server)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...audit.log_base import AuditStoreError
from ...gateway import Gateway
from . import calls, catalog, inbox, settings
from .security import (
    CSP,
    DEFAULT_ALLOWED_HOSTS,
    ConsoleGuard,
    OperatorCheck,
    loopback_operator,
)
from .state import UiOptions, WebUi, ui_of
from .templating import make_environment
from .visualize import highlight_css

__all__ = ["build_ui"]

log = logging.getLogger("toolgate.serve.web")


def build_ui(
    gateway: Gateway,
    *,
    agent: str = "web-ui",
    session_id: str = "web-ui",
    workspace: Path | str | None = None,
    require_operator: OperatorCheck = loopback_operator,
    allowed_hosts: Iterable[str] | None = DEFAULT_ALLOWED_HOSTS,
    poll_interval: float = 2.0,
    page_size: int = 50,
    catalog_page_size: int = 100,
    csrf_key: bytes | None = None,
) -> Starlette:
    """The web console for ``gateway``: catalog, approvals inbox, audit and settings.

    Args:
        gateway: The gateway whose tools, approvals, audit log and connections are shown.
            Approvals need ``approver="queue"`` (or a callable approver), the audit pages an
            ``audit_path``; without them those pages say so.
        agent: The agent the "try it" form calls tools as (its access rules apply).
        session_id: The session of those calls.
        workspace: The workspace of those calls (default: none; scripts run in the gateway's
            working folder).
        require_operator: Who may use the console: called with each request, returns the
            operator's name (recorded as who decided an approval) or ``None`` to refuse with
            403. The default admits loopback clients only; a server exposed beyond loopback
            must pass a check of an operator credential.
        allowed_hosts: Host names the console answers to (DNS-rebinding protection); ``None``
            accepts any (only behind a proxy that checks the host itself).
        poll_interval: Seconds between the inbox's checks for new approval requests.
        page_size: Rows per page of the audit table.
        catalog_page_size: Tools per page of the catalog (health figures are read only for
            the tools of the page shown).
        csrf_key: The key that signs form tokens (default: random per process, so a restart
            asks open pages to reload before their forms are accepted).
    """
    if poll_interval <= 0 or page_size < 1 or catalog_page_size < 1:
        raise ValueError(
            "poll_interval must be positive, and page_size and catalog_page_size at least 1"
        )
    ui = WebUi(
        gateway,
        UiOptions(
            agent=agent,
            session_id=session_id,
            workspace=None if workspace is None else Path(workspace).expanduser().resolve(),
            poll_interval=poll_interval,
            page_size=page_size,
            catalog_page_size=catalog_page_size,
        ),
    )
    refusals = make_environment().get_template("refused.html")

    def refuse(scope: Scope, status: int, message: str) -> ASGIApp:
        html = refusals.render(status=status, message=message)
        headers = dict(_PLAIN_HEADERS)
        if status == 401:
            headers["www-authenticate"] = 'Basic realm="toolgate console", charset="UTF-8"'
        return HTMLResponse(html, status_code=status, headers=headers)

    app = Starlette(
        routes=[
            *catalog.routes(),
            *inbox.routes(),
            *calls.routes(),
            *settings.routes(),
            Route("/assets/highlight.css", _highlight_stylesheet, name="highlight_css"),
            Mount(
                "/static",
                app=_Revalidated(StaticFiles(packages=[("toolgate.serve.web", "static")])),
                name="static",
            ),
        ],
        middleware=[
            Middleware(
                ConsoleGuard,
                require_operator=require_operator,
                allowed_hosts=allowed_hosts,
                refuse=refuse,
                key=csrf_key,
            )
        ],
        exception_handlers={
            HTTPException: _http_error,
            AuditStoreError: _audit_unreadable,
            Exception: _server_error,
        },
    )
    app.state.ui = ui
    return app


#: Headers of responses made outside the guard (refusals, server errors).
_PLAIN_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}


class _Revalidated:
    """Static files may be kept by the browser but are revalidated (ETag) on each use, so an
    upgraded toolgate's script and styles apply at once. (Pages themselves are ``no-store``.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_revalidated(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", ()), (b"cache-control", b"no-cache")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_revalidated)


async def _highlight_stylesheet(request: Request) -> Response:
    return Response(highlight_css(), media_type="text/css", headers={"cache-control": "no-cache"})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {404: "Not found", 405: "Method not allowed"}
    return ui_of(request).page(
        request,
        "error.html",
        {"title": titles.get(exc.status_code, "Request refused"), "message": exc.detail},
        status_code=exc.status_code,
    )


async def _audit_unreadable(request: Request, exc: Exception) -> Response:
    return ui_of(request).page(
        request,
        "error.html",
        {"title": "The audit log cannot be read", "message": str(exc)},
        status_code=503,
    )


async def _server_error(request: Request, exc: Exception) -> Response:
    # Details go to the log, not to the page: they may hold paths or values of the gateway.
    log.error("the web console failed on %s %s", request.method, request.url.path, exc_info=exc)
    return HTMLResponse(
        "<!doctype html><title>Error</title><h1>Something went wrong</h1>"
        "<p>The console failed to show this page; the server log has the details.</p>",
        status_code=500,
        headers=_PLAIN_HEADERS,
    )
