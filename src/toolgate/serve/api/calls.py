"""Tool calls over HTTP: the one function that runs a call and answers it, and the fast path
that serves well-formed calls without FastAPI's routing and dependency machinery.

A tool call is the API's hot path (an agent makes thousands; everything else is occasional).
FastAPI resolves routes and dependencies generically, which costs more per request than the
gateway's whole pipeline. :class:`FastCallMiddleware` therefore answers a ``POST
/v1/tools/{tool_id}/call`` itself when everything about it is in order — no query string, a JSON
body that parses into :class:`~.models.CallRequest`, a known key, an existing workspace — and
hands anything else, unchanged, to the FastAPI route, which produces the documented problems.
Both run the call with :func:`run_call`, so they answer alike.
"""

from __future__ import annotations

from email.message import Message
from pathlib import Path
from typing import Final

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ...model import CallStatus
from ..identity import AuthenticationError
from .deps import ApiContext
from .limits import BODY_SCOPE_KEY
from .models import CallRequest
from .problems import ApiJSONResponse
from .views import outcome_view

__all__ = ["CALL_PREFIX", "CALL_SUFFIX", "FastCallMiddleware", "run_call", "workspace_exists"]

CALL_PREFIX: Final = "/v1/tools/"
CALL_SUFFIX: Final = "/call"


def workspace_exists(request: CallRequest) -> bool:
    """Whether the call names no workspace, or one that is a folder on this host."""
    return request.workspace is None or Path(request.workspace).is_dir()


async def run_call(context: ApiContext, agent: str, tool_id: str, request: CallRequest) -> Response:
    """Call the tool as ``agent`` and answer with its outcome: ``200`` when it ended (ok or
    error), ``202`` with ``Location`` when it waits for approval."""
    outcome = await context.gateway.call(
        tool_id,
        request.arguments,
        agent=agent,
        session_id=request.session_id,
        workspace=request.workspace,
    )
    data = outcome_view(outcome, approve_link=context.approve_link)
    if outcome.status is CallStatus.PENDING_APPROVAL and outcome.approval is not None:
        return ApiJSONResponse(
            data, status_code=202, headers={"Location": f"/v1/approvals/{outcome.approval.id}"}
        )
    return ApiJSONResponse(data)


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            if value == b"application/json":  # what nearly every client sends: no parsing
                return True
            message = Message()
            message["content-type"] = value.decode("latin-1")
            subtype = message.get_content_subtype()
            return message.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")
            )
    return False


class FastCallMiddleware:
    """Serves well-formed tool calls directly (see the module docstring); needs the body in
    ``scope[BODY_SCOPE_KEY]``, so it sits inside :class:`~.limits.RequestLimitsMiddleware`."""

    def __init__(self, app: ASGIApp, *, context: ApiContext) -> None:
        self.app = app
        self.context = context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not scope["query_string"]:
            path: str = scope["path"]
            if path.startswith(CALL_PREFIX) and path.endswith(CALL_SUFFIX):
                tool_id = path[len(CALL_PREFIX) : -len(CALL_SUFFIX)]
                response = await self._answer(scope, tool_id) if tool_id else None
                if response is not None:
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, tool_id: str) -> Response | None:
        """The answer, or ``None`` to leave the request to the FastAPI route."""
        body = scope.get(BODY_SCOPE_KEY)
        if not isinstance(body, bytes):
            return None
        if body:
            if not _is_json(scope):
                return None
            try:
                request = CallRequest.model_validate_json(body)
            except ValidationError:
                return None
        else:
            request = CallRequest()
        try:
            agent = self.context.authenticate(Request(scope))
        except AuthenticationError:
            return None
        if not workspace_exists(request):
            return None
        return await run_call(self.context, agent, tool_id, request)
