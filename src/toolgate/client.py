"""``toolgate.Client``: a running ``toolgate serve`` as a
:class:`~toolgate.integrations.base.ToolGateway`.

The framework adapters take any ``ToolGateway``; with this client they work against one gateway
service shared by many agents exactly as against an in-process gateway::

    async with Client("http://127.0.0.1:8470", key=AGENT_KEY) as gateway:
        tools = await gateway.list_tools()
        outcome = await gateway.call("demo:lookup", {"city": "Cairo"})

The agent is the one the key names (``GET /v1/me``): a client cannot call as anyone else.
A tool call's own errors are outcomes (``status="error"`` with a ``code``), never exceptions;
the API's refusals (``application/problem+json``) become the typed :class:`RemoteError`
exceptions below, their message the server's ``detail``.

Keys go to ``url``'s origin only: redirects are never followed, the environment's proxies and
``.netrc`` are ignored, and every path segment (a tool id chosen by a model, an approval id) is
percent-encoded so it cannot leave its route.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final, NoReturn, cast
from urllib.parse import quote

import httpx2

from .errors import ErrorCode, ToolgateError
from .integrations.base import ToolSpec
from .model import (
    ApprovalRequest,
    ApprovalStatus,
    CallOutcome,
    CallStatus,
    Overflow,
    PermissionKey,
)
from .model.approval import Decision
from .model.content import content_from_fields

__all__ = [
    "ApproverKeyRequiredError",
    "Client",
    "GatewayUnreachableError",
    "RemoteAuthError",
    "RemoteConflictError",
    "RemoteError",
    "RemoteNotFoundError",
]

#: Seconds any request but a tool call may take.
DEFAULT_TIMEOUT: Final = 30.0
#: Seconds a tool call may take when the tool's own timeout is not known yet.
DEFAULT_CALL_TIMEOUT: Final = 300.0
#: Beyond a tool's own timeout: its wait in the tool's queue (bounded by the same timeout) and
#: the gateway's work around the run.
_CALL_MARGIN: Final = 30.0
#: Entries per page of ``GET /v1/tools`` (the API's largest page).
_PAGE: Final = 1000


class RemoteError(ToolgateError):
    """The gateway's HTTP API refused a request; the message is the server's ``detail``.

    ``status`` is the HTTP status (0 when no answer came), ``problem`` the whole problem
    document (``code``, ``detail``, and extras such as ``errors`` or ``suggestions``)."""

    code = ErrorCode.CRASHED

    def __init__(self, message: str, *, status: int = 0, problem: Mapping[str, Any] | None = None):
        super().__init__(message)
        self.status = status
        self.problem: Mapping[str, Any] = problem or {}

    @property
    def problem_code(self) -> str | None:
        """The problem's stable ``code`` (``unauthenticated``, ``forbidden``, ``not_found``…)."""
        code = self.problem.get("code")
        return code if isinstance(code, str) else None


class RemoteAuthError(RemoteError, PermissionError):
    """``401``: no key, or an unknown or revoked one; ``403``: the key may not do this (an
    operator route, deciding its own agent's request)."""

    code = ErrorCode.FORBIDDEN


class RemoteNotFoundError(RemoteError, LookupError):
    """``404``: no such tool for this agent, no such approval request, or no such route (a
    ``url`` that is not a toolgate server)."""

    code = ErrorCode.TOOL_NOT_FOUND


class RemoteConflictError(RemoteError):
    """``409``: the approval request is no longer pending (decided, expired, or its tool
    changed)."""

    code = ErrorCode.APPROVAL_CLOSED


class GatewayUnreachableError(RemoteError, ConnectionError):
    """No answer from the gateway: nothing listens at the URL, the connection broke, or the
    answer did not come in time. The message names the URL."""

    code = ErrorCode.UNAVAILABLE


class ApproverKeyRequiredError(ToolgateError):
    """:meth:`Client.decide` needs an operator's key (``approver_key``)."""

    code = ErrorCode.FORBIDDEN


def _segment(value: str) -> str:
    """``value`` as one path segment: every reserved character percent-encoded, dots too (so
    ``..`` is not a step up that a URL normalizer would apply)."""
    return quote(value, safe="").replace(".", "%2E")


def _base_url(url: str) -> httpx2.URL:
    """The server's base URL, checked: http(s), a host, no credentials, query or fragment."""
    if not isinstance(url, str):
        raise ToolgateError(f"url must be a string such as 'http://127.0.0.1:8470', not {url!r}")
    try:
        parsed = httpx2.URL(url.strip())
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolgateError(f"not a URL: {url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise ToolgateError(f"the gateway's URL must start with http:// or https://, not {url!r}")
    if not parsed.host:
        raise ToolgateError(f"the gateway's URL names no host: {url!r}")
    if parsed.userinfo:
        raise ToolgateError(
            "the gateway's URL must not carry credentials (user:password@); pass the API key "
            "as key="
        )
    if parsed.query or parsed.fragment:
        raise ToolgateError(f"the gateway's URL must not have a query or fragment: {url!r}")
    return parsed.copy_with(path=parsed.path.rstrip("/") or "")


def _code(value: Any) -> ErrorCode | None:
    if value is None:
        return None
    try:
        return ErrorCode(value)
    except ValueError:
        # A code of a newer server: kept as the server said it (CallOutcome.text shows it).
        return cast(ErrorCode, str(value))


def _approval(data: Mapping[str, Any]) -> ApprovalRequest:
    """An approval request from ``GET /v1/approvals/{id}``'s ``approval`` (``ApprovalView``).

    The API does not send the request's digests (``arguments_digest``, ``definition_hash``):
    they stay empty; ``arguments`` are as people are shown them (URL credentials masked)."""
    permission = data.get("permission") or {}
    decision = data.get("decision")
    return ApprovalRequest(
        id=str(data["id"]),
        tool_id=str(data["tool"]),
        title=str(data.get("title") or ""),
        risk=str(data.get("risk") or ""),
        facts=tuple((str(label), str(value)) for label, value in data.get("facts") or ()),
        arguments=dict(data.get("arguments") or {}),
        arguments_digest="",
        definition_hash="",
        created_at=float(data.get("created_at") or 0.0),
        expires_at=float(data.get("expires_at") or 0.0),
        workspace=data.get("workspace"),
        agent=data.get("agent"),
        session_id=data.get("session_id"),
        permission=PermissionKey(
            str(permission.get("type", "tool")), str(permission.get("key", "*"))
        ),
        security_message=data.get("security_message"),
        display=data.get("display"),
        status=ApprovalStatus(data.get("status", "pending")),
        decision=None if decision is None else Decision(decision),
        decided_by=data.get("decided_by"),
        decided_at=data.get("decided_at"),
        decision_message=data.get("decision_message"),
    )


class Client:
    """A running ``toolgate serve``, as the agent its ``key`` names (a
    :class:`~toolgate.integrations.base.ToolGateway`).

    ``key`` is the agent's API key (``toolgate agents add NAME``); leave it out for a server
    without keys (every caller is then ``default``). ``approver_key`` is an operator's key
    (an agent labelled ``role: operator``), needed only by :meth:`decide`. ``timeout`` bounds
    every request but tool calls; a call may take the tool's own timeout (learnt from
    :meth:`list_tools`) twice plus 30 s, else ``call_timeout`` (default 300 s) — set
    ``call_timeout`` to fix it for every call.

    Use it as ``async with Client(...) as gateway`` (closed at the end), or without: the HTTP
    connection pool is made at the first request; :meth:`aclose` closes it. One client may
    serve several event loops in turn (``asyncio.run`` per call): each gets its own pool."""

    def __init__(
        self,
        url: str,
        *,
        key: str | None = None,
        approver_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        call_timeout: float | None = None,
    ) -> None:
        self._url = _base_url(url)
        self.url = str(self._url)
        """The gateway's base URL."""
        self._key = key
        self._approver_key = approver_key
        self.timeout = timeout
        self.call_timeout = call_timeout
        self._http: httpx2.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._agent: str | None = None
        self._known_agent = False
        self._tool_timeouts: dict[str, float] = {}

    def __repr__(self) -> str:
        # Never the keys.
        agent = f", agent={self._agent!r}" if self._known_agent else ""
        return f"Client({self.url!r}{agent})"

    # -- the connection ---------------------------------------------------------------------

    def _client(self) -> httpx2.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is not None and self._loop is not loop:
            # Its connections belong to another event loop (a framework's sync entry point
            # runs each call in asyncio.run): they cannot be used, nor closed, from this one.
            self._http = None
        if self._http is None:
            self._loop = loop
            self._http = httpx2.AsyncClient(
                base_url=self._url,
                follow_redirects=False,  # a redirect would carry the key to another origin
                trust_env=False,  # no proxy or .netrc from the environment sees the key
                timeout=self.timeout,
                headers={"Accept": "application/json"},
            )
        return self._http

    async def aclose(self) -> None:
        """Close the HTTP connections (the client can be used again: it reconnects)."""
        http, self._http = self._http, None
        if http is not None and self._loop is asyncio.get_running_loop():
            await http.aclose()

    async def __aenter__(self) -> Client:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def connect(self) -> str | None:
        """Ask the gateway who the key names (``GET /v1/me``); returns the agent. Checks the
        URL and key at once (``async with`` does it)."""
        if not self._known_agent:
            data = await self._request("GET", "/v1/me")
            self._agent = data.get("agent")
            self._known_agent = True
        return self._agent

    @property
    def agent(self) -> str | None:
        """The agent every call is made as: the one the key names. Known after
        :meth:`connect` (or ``async with``, or any request); read before, it is asked for
        with a short blocking request."""
        if not self._known_agent:
            headers = self._auth(self._key)
            try:
                with httpx2.Client(
                    base_url=self._url,
                    follow_redirects=False,
                    trust_env=False,
                    timeout=self.timeout,
                ) as http:
                    response = http.get("/v1/me", headers=headers)
            except httpx2.TransportError as exc:
                self._unreachable(exc)
            data = self._answer(response)
            self._agent = data.get("agent")
            self._known_agent = True
        return self._agent

    def _auth(self, key: str | None) -> dict[str, str]:
        return {} if key is None else {"Authorization": f"Bearer {key}"}

    def _unreachable(self, exc: httpx2.TransportError) -> NoReturn:
        if isinstance(exc, httpx2.TimeoutException):
            reason = "no answer in time"
        else:
            reason = str(exc) or type(exc).__name__
        raise GatewayUnreachableError(
            f"cannot reach the toolgate gateway at {self.url}: {reason}"
        ) from None

    async def _request(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        use_key: bool = True,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        headers = self._auth(self._key if use_key and key is None else key)
        query = None if params is None else {k: v for k, v in params.items() if v is not None}
        try:
            response = await self._client().request(
                method,
                path,
                headers=headers,
                params=query,
                json=json,
                timeout=self.timeout if timeout is None else timeout,
            )
        except httpx2.TransportError as exc:
            self._unreachable(exc)
        return self._answer(response)

    def _answer(self, response: httpx2.Response) -> dict[str, Any]:
        """The JSON body of a success, else the typed error of the problem."""
        status = response.status_code
        if 200 <= status < 300:
            try:
                data = response.json()
            except ValueError:
                data = None
            if not isinstance(data, dict):
                raise RemoteError(
                    f"{self.url} answered {status} without a JSON object: is it a toolgate server?",
                    status=status,
                )
            return data
        if 300 <= status < 400:
            location = response.headers.get("location", "?")
            raise RemoteError(
                f"{self.url} answered a redirect ({status}) to {location}: redirects are not "
                "followed (the key must not go elsewhere); pass the final URL as url=",
                status=status,
            )
        problem: dict[str, Any] = {}
        try:
            parsed = response.json()
            if isinstance(parsed, dict):
                problem = parsed
        except ValueError:
            pass
        detail = problem.get("detail")
        if not isinstance(detail, str):
            detail = f"{self.url} answered {status}: {response.text[:300]!r}"
        kind: type[RemoteError]
        if status in (401, 403):
            kind = RemoteAuthError
        elif status == 404:
            kind = RemoteNotFoundError
        elif status == 409:
            kind = RemoteConflictError
        elif status in (502, 503, 504):
            kind = GatewayUnreachableError
        else:
            kind = RemoteError
        raise kind(detail, status=status, problem=problem)

    # -- tools ------------------------------------------------------------------------------

    def _spec(self, row: Mapping[str, Any]) -> ToolSpec:
        schema = dict(row.get("input_schema") or {})
        schema.setdefault("type", "object")
        timeout = row.get("timeout")
        if isinstance(timeout, (int, float)):
            self._tool_timeouts[str(row["id"])] = float(timeout)
        annotations = {
            name: row[name]
            for name in ("requires_approval", "dangerous", "tile", "examples")
            if row.get(name) is not None
        }
        return ToolSpec(
            id=str(row["id"]),
            name=str(row["provider_name"]),
            description=str(row.get("description") or ""),
            parameters=schema,
            title=row.get("title"),
            side_effect=str(row.get("side_effect") or "read_only"),
            annotations=annotations,
        )

    async def list_tools(self, *, session_id: str | None = None) -> list[ToolSpec]:
        """The tools the agent may call and that are available now, sorted by id, with their
        input schemas as declared (every page of ``GET /v1/tools?schemas=true``).

        Under progressive disclosure, with ``session_id``: the core set plus what that
        session's searches found (over HTTP or MCP for this agent and session id); without
        one, every tool (the HTTP API is a catalog)."""
        await self.connect()
        specs: list[ToolSpec] = []
        cursor: str | None = None
        while True:
            page = await self._request(
                "GET",
                "/v1/tools",
                params={
                    "schemas": "true",
                    "limit": _PAGE,
                    "cursor": cursor,
                    "session_id": session_id,
                },
            )
            specs.extend(self._spec(row) for row in page["tools"] if row.get("available", True))
            cursor = page.get("next_cursor")
            if not cursor:
                return specs

    async def search_tools(
        self, query: str, *, session_id: str | None = None, limit: int = 10
    ) -> list[ToolSpec]:
        """The tools that best match ``query``, best first (``GET /v1/tools/search``); under
        progressive disclosure they join ``session_id``'s list."""
        await self.connect()
        found = await self._request(
            "GET",
            "/v1/tools/search",
            params={"q": query, "limit": limit, "session_id": session_id},
        )
        return [self._spec(row) for row in found["tools"]]

    def _call_timeout(self, tool_id: str) -> float:
        if self.call_timeout is not None:
            return self.call_timeout
        known = self._tool_timeouts.get(tool_id)
        if known is None:
            return DEFAULT_CALL_TIMEOUT
        return 2 * known + _CALL_MARGIN

    async def call(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        """Call a tool through the gateway's pipeline (``POST /v1/tools/{id}/call``).

        The call's own errors (unknown tool, invalid arguments, rate limit, a denial, the
        tool's failure…) are outcomes with ``status="error"`` and a ``code``; a call waiting
        for a person is ``pending_approval`` with :attr:`~toolgate.CallOutcome.approval` set
        — call again with the same ``tool_call_id`` once it is decided. Only a refusal of the
        request itself (the key, the body) raises a :class:`RemoteError`."""
        await self.connect()
        body: dict[str, Any] = {"arguments": dict(arguments or {})}
        for name, value in (
            ("session_id", session_id),
            ("workspace", workspace),
            ("tool_call_id", tool_call_id),
            ("idempotency_key", idempotency_key),
        ):
            if value is not None:
                body[name] = value
        data = await self._request(
            "POST",
            f"/v1/tools/{_segment(tool_id)}/call",
            json=body,
            timeout=self._call_timeout(tool_id),
        )
        return self._outcome(data, body)

    def _outcome(self, data: Mapping[str, Any], body: Mapping[str, Any]) -> CallOutcome:
        overflow = data.get("overflow")
        pending = data.get("approval")
        approval = None
        if isinstance(pending, Mapping):
            expires_at = float(pending.get("expires_at") or 0.0)
            approval = ApprovalRequest(
                id=str(pending["id"]),
                tool_id=str(data["tool"]),
                title=str(pending.get("title") or ""),
                risk=str(pending.get("risk") or ""),
                facts=tuple((str(k), str(v)) for k, v in pending.get("facts") or ()),
                arguments=body["arguments"],
                arguments_digest="",
                definition_hash="",
                # A server before created_at was sent: about now (the call just made it).
                created_at=float(pending.get("created_at") or time.time()),
                expires_at=expires_at,
                workspace=body.get("workspace"),
                agent=self._agent,
                session_id=body.get("session_id"),
                display=pending.get("display"),
            )
        return CallOutcome(
            status=CallStatus(data["status"]),
            tool_id=str(data["tool"]),
            call_id=str(data.get("call_id") or ""),
            content=content_from_fields(data),
            code=_code(data.get("code")),
            message=data.get("message"),
            visualization=data.get("visualization"),
            overflow=None
            if not isinstance(overflow, Mapping)
            else Overflow(str(overflow["path"]), int(overflow["original_size"])),
            approval=approval,
            duration=float(data.get("duration") or 0.0),
            metadata=dict(data.get("metadata") or {}),
        )

    # -- approvals --------------------------------------------------------------------------

    async def approval_needed(self, tool_id: str, *, workspace: str | None = None) -> bool:
        """Whether a call of ``tool_id`` would wait for a person now: approval is required and
        no "always allow" grant covers it (``GET /v1/tools/{id}/approval``). ``False`` for a
        tool this agent may not see (the call itself says why), as in-process."""
        await self.connect()
        try:
            data = await self._request(
                "GET",
                f"/v1/tools/{_segment(tool_id)}/approval",
                params={"workspace": workspace},
            )
        except RemoteNotFoundError as exc:
            if exc.problem_code == ErrorCode.TOOL_NOT_FOUND:
                return False
            raise
        return bool(data["approval_needed"])

    async def approval(self, approval_id: str) -> ApprovalRequest:
        """An approval request of this agent's calls, as it stands now
        (``GET /v1/approvals/{id}``; :class:`RemoteNotFoundError` for another agent's)."""
        data = await self._request("GET", f"/v1/approvals/{_segment(approval_id)}")
        return _approval(data["approval"])

    async def decide(
        self,
        approval_id: str,
        decision: str,
        *,
        by: str,
        message: str | None = None,
    ) -> ApprovalRequest:
        """Record a decision — ``approve``, ``always`` or ``deny`` — with the operator key
        ``approver_key`` (``POST /v1/approvals/{id}/decision``); nothing runs here.

        The gateway records the operator key's agent as the decider, not ``by``: a client
        cannot claim to be another operator. Raises :class:`ApproverKeyRequiredError` without
        an ``approver_key``, :class:`RemoteConflictError` when the request is no longer
        pending, :class:`RemoteAuthError` when the key is not an operator's."""
        del by  # the server names the decider from the key (see above)
        if self._approver_key is None:
            raise ApproverKeyRequiredError(
                f"deciding approval request {approval_id} needs an operator's key: make the "
                "client with Client(url, key=AGENT_KEY, approver_key=OPERATOR_KEY) (an agent "
                "labelled 'role: operator'), or decide it in the web UI or with "
                f"'toolgate approvals approve {approval_id}'"
            )
        body: dict[str, Any] = {"decision": decision}
        if message is not None:
            body["message"] = message
        data = await self._request(
            "POST",
            f"/v1/approvals/{_segment(approval_id)}/decision",
            key=self._approver_key,
            json=body,
        )
        return _approval(data["approval"])
