"""Tool calls over HTTP: the one function that runs a call and answers it, and the fast path
that serves well-formed calls without FastAPI's routing and dependency machinery.

A tool call is the API's hot path (an agent makes thousands; everything else is occasional).
FastAPI resolves routes and dependencies generically, which costs more per request than the
gateway's whole pipeline. :class:`FastCallMiddleware` therefore answers a ``POST
/v1/tools/{tool_id}/call`` itself, in front of the framework, when everything about it is in
order — no query string, a JSON body that parses into :class:`~.models.CallRequest`, a known
key, an existing workspace — and hands anything else, unchanged, to the FastAPI route, which
produces the documented problems. Both run the call with :func:`answer_call`, so they answer
alike, and both cut off a call whose client goes away (:mod:`toolgate.serve.caller_gone`).
"""

from __future__ import annotations

from email.message import Message as MimeHeader
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError
from starlette.datastructures import Address
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..._json import StrictJsonError, loads_strict
from ...model import CallStatus
from ..auth.identity import AuthenticationError
from ..caller_gone import Gone, runs_to_its_end, unless_gone
from .deps import ApiContext
from .limits import BODY_SCOPE_KEY
from .models import CallRequest
from .problems import (
    ApiJSONResponse,
    ApiProblem,
    HttpErrorCode,
    authentication_problem,
    render_json,
)
from .views import outcome_view

__all__ = [
    "CALL_PREFIX",
    "CALL_SUFFIX",
    "FastCallMiddleware",
    "answer_call",
    "is_json",
    "run_call",
    "strict_call_body",
    "workspace_exists",
]


CALL_PREFIX: Final = "/v1/tools/"
CALL_SUFFIX: Final = "/call"
#: The status of a call whose client went away (nginx's "client closed request"): never
#: received, it only shows in the server's own records.
CLIENT_CLOSED_REQUEST: Final = 499


def workspace_exists(request: CallRequest) -> bool:
    """Whether the call names no workspace, or one that is a folder on this host (a path the
    system refuses to look at, too long say, is none)."""
    if request.workspace is None:
        return True
    try:
        return Path(request.workspace).is_dir()
    except (OSError, ValueError):
        return False


async def answer_call(
    context: ApiContext,
    agent: str,
    tool_id: str,
    request: CallRequest,
    namespaces: frozenset[str] | None = None,
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """Call the tool as ``agent`` (whose credentials allow ``namespaces``): the answer's status,
    body and headers — ``200`` when the call ended (ok or error), ``202`` with ``Location`` when
    it waits for approval."""
    outcome = await context.gateway.call(
        tool_id,
        request.arguments,
        agent=agent,
        session_id=request.session_id,
        workspace=request.workspace,
        namespaces=namespaces,
        tool_call_id=request.tool_call_id,
        idempotency_key=request.idempotency_key,
    )
    data = outcome_view(outcome, approve_link=context.approve_link)
    if outcome.status is CallStatus.PENDING_APPROVAL and outcome.approval is not None:
        return 202, data, {"Location": f"/v1/approvals/{outcome.approval.id}"}
    return 200, data, {}


async def run_call(
    context: ApiContext,
    agent: str,
    tool_id: str,
    request: CallRequest,
    namespaces: frozenset[str] | None = None,
    receive: Receive | None = None,
) -> Response:
    """:func:`answer_call` as a response (for the FastAPI route). Given the request's
    ``receive`` (read past its body), a call whose client disconnects is cut off as
    :func:`~toolgate.serve.caller_gone.unless_gone` does, and answered with an empty ``499``
    that nobody receives."""
    call = answer_call(context, agent, tool_id, request, namespaces)
    if receive is None:
        answer = await call
    else:
        gateway = context.gateway
        watched = await unless_gone(call, receive, lambda: runs_to_its_end(gateway, tool_id))
        if isinstance(watched, Gone):
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        answer = watched
    status, data, headers = answer
    return ApiJSONResponse(data, status_code=status, headers=headers)


#: The headers :meth:`~toolgate.serve.auth.identity.AgentIdentity.authenticate` reads.
_IDENTITY_HEADERS: Final = {
    name.encode("latin-1"): name for name in ("authorization", "host", "origin", "sec-fetch-site")
}


class _ScopeConnection:
    """The request as :meth:`~toolgate.serve.auth.identity.AgentIdentity.authenticate` reads it,
    straight from the ASGI scope (a Starlette ``Request`` and its ``Headers`` cost more than the
    lookups themselves): only the headers it reads, the first of repeated ones winning, as with
    Starlette."""

    __slots__ = ("client", "headers")

    def __init__(self, scope: Scope) -> None:
        headers: dict[str, str] = {}
        for raw, value in scope["headers"]:
            name = _IDENTITY_HEADERS.get(raw)
            if name is not None and name not in headers:
                headers[name] = value.decode("latin-1")
        self.headers = headers
        client = scope.get("client")
        self.client = None if client is None else Address(*client)


#: The headers of a JSON answer, less its length.
_JSON_HEADERS: Final = [(b"content-type", b"application/json")]


async def _send_json(send: Send, status: int, data: Any, extra: dict[str, str]) -> None:
    """Answer ``data`` as JSON, in the two ASGI messages and nothing more."""
    body = render_json(data)
    headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode("latin-1"))]
    for name, value in extra.items():
        headers.append((name.lower().encode("latin-1"), value.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def is_json(scope: Scope) -> bool:
    """Whether the request says its body is JSON (``application/json`` or ``…+json``)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            if value == b"application/json":  # what nearly every client sends: no parsing
                return True
            message = MimeHeader()
            message["content-type"] = value.decode("latin-1")
            subtype = message.get_content_subtype()
            return message.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")
            )
    return False


class FastCallMiddleware:
    """Serves well-formed tool calls directly (see the module docstring); needs the body in
    ``scope[BODY_SCOPE_KEY]``, so it sits inside :class:`~.limits.RequestLimitsMiddleware`.

    It runs in front of the framework's error handling, so it answers a failure of its own
    (a bug) with the same ``500`` problem the framework would."""

    def __init__(self, app: ASGIApp, *, context: ApiContext) -> None:
        self.app = app
        self.context = context

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path: str = scope["path"]
            if path.startswith(CALL_PREFIX) and path.endswith(CALL_SUFFIX):
                # Every call body is parsed strictly here, before FastAPI's lenient parser
                # (json.loads: last duplicate wins, NaN accepted, deep nesting a 400 that
                # names nothing) sees it; the route checks again for an app mounted without
                # this middleware.
                try:
                    document = strict_call_body(scope.get(BODY_SCOPE_KEY), is_json(scope))
                except ApiProblem as problem:
                    await problem.response()(scope, receive, send)
                    return
                tool_id = path[len(CALL_PREFIX) : -len(CALL_SUFFIX)]
                if (
                    tool_id
                    and not scope["query_string"]
                    and await self._answered(scope, receive, send, tool_id, document)
                ):
                    return
        await self.app(scope, receive, send)

    async def _answered(
        self, scope: Scope, receive: Receive, send: Send, tool_id: str, document: Any
    ) -> bool:
        """Answer the call; ``False`` (nothing sent) leaves it to the FastAPI route.

        A failure here (a bug) propagates to :class:`~.limits.RequestLimitsMiddleware`, which
        answers the same ``500`` problem as the framework."""
        request = _call_request(scope, document)
        if request is None:
            return False
        identify = self.context.identify
        namespaces = None
        if identify is None:
            try:
                agent = self.context.authenticate(_ScopeConnection(scope))
            except AuthenticationError:
                return False
        else:
            try:
                principal = await identify(_ScopeConnection(scope))
            except AuthenticationError as exc:
                # Answered here, as the route would: a token is not checked (nor the issuer's
                # keys fetched) twice.
                problem = authentication_problem(exc, self.context.challenge)
                await problem(scope, _no_body, send)
                return True
            agent, namespaces = principal.agent, principal.namespaces
        if not workspace_exists(request):
            return False
        gateway = self.context.gateway
        answer = await unless_gone(
            answer_call(self.context, agent, tool_id, request, namespaces),
            receive,
            lambda: runs_to_its_end(gateway, tool_id),
        )
        if not isinstance(answer, Gone):
            await _send_json(send, *answer)
        # else the call ended ``cancelled`` (audited), or before it ran: nobody is left to answer
        return True


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


_UNPARSED: Final = object()


def strict_call_body(body: Any, json_body: bool) -> Any:
    """The call body parsed by the gateway's strict JSON parser; :data:`_UNPARSED` when there
    is none to parse (no body, not JSON, or malformed: FastAPI answers those).

    Raises :class:`ApiProblem` (``400 invalid_request``) for JSON the gateway refuses: a
    duplicate key (named), ``NaN``/``Infinity``, or nesting deeper than
    :data:`~toolgate._json.MAX_DEPTH` levels."""
    if not isinstance(body, bytes) or not body or not json_body:
        return _UNPARSED
    try:
        return loads_strict(body)
    except StrictJsonError as exc:
        if exc.malformed:
            return _UNPARSED
        raise ApiProblem(
            400, HttpErrorCode.INVALID_REQUEST, f"the request body is not accepted as JSON: {exc}"
        ) from None


def _call_request(scope: Scope, document: Any) -> CallRequest | None:
    """The call's body as a :class:`CallRequest`, or ``None`` when it is not one."""
    body = scope.get(BODY_SCOPE_KEY)
    if not isinstance(body, bytes):
        return None
    if not body:
        return CallRequest()
    if document is _UNPARSED:
        return None
    try:
        return CallRequest.model_validate(document)
    except ValidationError:
        return None
