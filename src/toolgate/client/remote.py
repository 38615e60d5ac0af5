"""The :class:`Client` itself: the gateway's HTTP API behind the ``ToolGateway`` methods."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

import httpx2

from ..errors import ErrorCode
from ..integrations.base import ToolSpec
from ..model import ApprovalRequest, CallOutcome
from .errors import ApproverKeyRequiredError, RemoteNotFoundError, json_object, unreachable
from .wire import approval_of, base_url, outcome_of, segment, spec_of

__all__ = ["DEFAULT_CALL_TIMEOUT", "DEFAULT_TIMEOUT", "Client"]

#: Seconds any request but a tool call may take.
DEFAULT_TIMEOUT: Final = 30.0
#: Seconds a tool call may take when the tool's own timeout is not known yet.
DEFAULT_CALL_TIMEOUT: Final = 300.0
#: Beyond a tool's own timeout: its wait in the tool's queue (bounded by the same timeout) and
#: the gateway's work around the run.
_CALL_MARGIN: Final = 30.0
#: Entries per page of ``GET /v1/tools`` (the API's largest page).
_PAGE: Final = 1000


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
        self._url = base_url(url)
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
                unreachable(self.url, exc)
            data = json_object(self.url, response)
            self._agent = data.get("agent")
            self._known_agent = True
        return self._agent

    def _auth(self, key: str | None) -> dict[str, str]:
        return {} if key is None else {"Authorization": f"Bearer {key}"}

    async def _request(
        self,
        method: str,
        path: str,
        *,
        key: str | None = None,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        headers = self._auth(self._key if key is None else key)
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
            unreachable(self.url, exc)
        return json_object(self.url, response)

    # -- tools ------------------------------------------------------------------------------

    def _spec(self, row: Mapping[str, Any]) -> ToolSpec:
        timeout = row.get("timeout")
        if isinstance(timeout, (int, float)):
            self._tool_timeouts[str(row["id"])] = float(timeout)
        return spec_of(row)

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
        body = _call_body(arguments, session_id, workspace, tool_call_id, idempotency_key)
        data = await self._request(
            "POST",
            f"/v1/tools/{segment(tool_id)}/call",
            json=body,
            timeout=self._call_timeout(tool_id),
        )
        return outcome_of(data, body, self._agent)

    # -- approvals --------------------------------------------------------------------------

    async def approval_needed(self, tool_id: str, *, workspace: str | None = None) -> bool:
        """Whether a call of ``tool_id`` would wait for a person now: approval is required and
        no "always allow" grant covers it (``GET /v1/tools/{id}/approval``). ``False`` for a
        tool this agent may not see (the call itself says why), as in-process."""
        await self.connect()
        try:
            data = await self._request(
                "GET",
                f"/v1/tools/{segment(tool_id)}/approval",
                params={"workspace": workspace},
            )
        except RemoteNotFoundError as exc:
            if exc.problem_code == ErrorCode.TOOL_NOT_FOUND:
                return False
            raise
        return bool(data["approval_needed"])

    async def request_approval(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApprovalRequest | None:
        """The approval request of exactly this call — found, or made now and put to people —
        without running the call (``POST /v1/tools/{id}/approval``): the same ``tool_call_id``
        finds the same request, and :meth:`call` with it attaches to it and, once approved,
        runs it once. A decided request comes back as it stands (``status`` approved or
        denied), never taken. ``None`` when the call would not wait for a person now (no
        approval required, an "always allow" grant covers it, the call would replay what
        ``idempotency_key`` already holds, the call would be refused), and for a tool this
        agent may not see, as in-process."""
        await self.connect()
        body = _call_body(arguments, session_id, workspace, tool_call_id, idempotency_key)
        try:
            data = await self._request("POST", f"/v1/tools/{segment(tool_id)}/approval", json=body)
        except RemoteNotFoundError as exc:
            if exc.problem_code == ErrorCode.TOOL_NOT_FOUND:
                return None
            raise
        found = data.get("approval")
        return None if found is None else approval_of(found)

    async def approval(self, approval_id: str) -> ApprovalRequest:
        """An approval request of this agent's calls, as it stands now
        (``GET /v1/approvals/{id}``; :class:`RemoteNotFoundError` for another agent's)."""
        data = await self._request("GET", f"/v1/approvals/{segment(approval_id)}")
        return approval_of(data["approval"])

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
        pending, :class:`RemoteAuthError` when the key is not an operator's,
        :class:`RemoteNotFoundError` for a request another agent's call made (unless ``key``
        is an operator's too)."""
        del by  # the server names the decider from the key (see above)
        if self._approver_key is None:
            raise ApproverKeyRequiredError(
                f"deciding approval request {approval_id} needs an operator's key: make the "
                "client with Client(url, key=AGENT_KEY, approver_key=OPERATOR_KEY) (an agent "
                "labelled 'role: operator'), or decide it in the web UI or with "
                f"'toolgate approvals approve {approval_id}'"
            )
        # Only a request of this client's agent (an operator's key sees any): an approval id
        # read back from a framework's saved state must not decide another agent's call. The
        # agent's key is refused another agent's request (RemoteNotFoundError).
        await self.approval(approval_id)
        body: dict[str, Any] = {"decision": decision}
        if message is not None:
            body["message"] = message
        data = await self._request(
            "POST",
            f"/v1/approvals/{segment(approval_id)}/decision",
            key=self._approver_key,
            json=body,
        )
        return approval_of(data["approval"])


def _call_body(
    arguments: Mapping[str, Any] | None,
    session_id: str | None,
    workspace: str | None,
    tool_call_id: str | None,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """A call's request body (``CallRequest``): the fields left out are not sent."""
    body: dict[str, Any] = {"arguments": dict(arguments or {})}
    for name, value in (
        ("session_id", session_id),
        ("workspace", workspace),
        ("tool_call_id", tool_call_id),
        ("idempotency_key", idempotency_key),
    ):
        if value is not None:
            body[name] = value
    return body
