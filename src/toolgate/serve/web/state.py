"""What every page of the console shares: the gateway, the options, and page rendering."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from ...gateway import Gateway
from .security import csrf_token_of, operator_of
from .templating import make_environment

__all__ = ["UiOptions", "WebUi", "path_to", "ui_of"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class UiOptions:
    """Settings of the console (the keyword arguments of :func:`~toolgate.serve.web.build_ui`)."""

    agent: str = "web-ui"
    """The agent the "try it" form calls tools as (access rules and grants apply to it)."""
    session_id: str = "web-ui"
    """The session of those calls."""
    workspace: Path | None = None
    """The workspace of those calls (scripts run there; grants are keyed by it)."""
    poll_interval: float = 2.0
    """Seconds between the inbox's checks for new approval requests."""
    page_size: int = 50
    """Rows per page of the audit table."""
    catalog_page_size: int = 100
    """Tools per page of the catalog."""


class WebUi:
    """The console's shared state, kept on ``app.state.ui``."""

    def __init__(self, gateway: Gateway, options: UiOptions) -> None:
        self.gateway = gateway
        self.options = options
        self.templates = Jinja2Templates(env=make_environment())

    def page(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any] | None = None,
        *,
        status_code: int = 200,
    ) -> Response:
        """Render ``template`` with the values every page needs plus ``context``."""
        values: dict[str, Any] = {
            "root": request.scope.get("root_path", "").rstrip("/"),
            "csrf_token": csrf_token_of(request),
            "operator": operator_of(request),
            "options": self.options,
            "pending_count": self.pending_count(),
            "approvals_on": self.gateway.approvals is not None,
            "nav": context.get("nav", "") if context else "",
        }
        values.update(context or {})
        return self.templates.TemplateResponse(request, template, values, status_code=status_code)

    def pending_count(self) -> int:
        """How many approval requests wait (0 when approvals are off)."""
        approvals = self.gateway.approvals
        return 0 if approvals is None else len(approvals.pending())

    @staticmethod
    async def blocking(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking read (SQLite, a keyring over D-Bus) off the event loop."""
        return await asyncio.to_thread(function, *args, **kwargs)


def ui_of(request: Request) -> WebUi:
    """The console state of the app serving ``request``."""
    ui: WebUi = request.app.state.ui
    return ui


def path_to(request: Request, *segments: str) -> str:
    """The console's path made of ``segments`` (each quoted), under the path it is mounted at."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return root + "/" + "/".join(quote(segment, safe="") for segment in segments)
