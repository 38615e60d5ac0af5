"""The MCP server: the gateway's tools over the official ``mcp`` SDK's low-level server.

The SDK speaks the protocol (both eras: the 2025 ``initialize`` handshake and the 2026-07-28
per-request envelope); the gateway keeps everything else — which tools an agent sees, and the
whole pipeline for every call.

* ``tools/list`` — the tools the caller's agent may call (``gateway.list_tools(agent=...)``), as
  the MCP exporter writes them: provider-safe name, title, description, ``inputSchema``,
  ``outputSchema`` (object schemas), annotations from the side-effect level, ``_meta`` examples
  and tile. In pages of ``page_size`` tools (``serve.mcp_page_size``, 1,000 by default: smaller
  catalogs are one page) sorted by id, each but the last with a ``nextCursor``
  (:mod:`toolgate.serve.paging`: a cursor followed after the catalog changed continues after
  the last tool of its page; a malformed or foreign one is ``-32602``). Which tools the caller
  sees is computed once per (agent, registry version); each entry is converted when a page first
  holds it.
* ``tools/call`` — ``gateway.call``. A call whose client cancels it (``notifications/cancelled``)
  or goes away is cut off and audited ``cancelled`` (:mod:`toolgate.serve.caller_gone`). Every
  failed call is a result with ``isError: true`` and the
  message written for the model (invalid arguments name the field), except an unknown tool, which
  the spec makes a protocol error (``-32602``). ``structuredContent`` is sent when the tool
  declares an output schema; a visualization never is; an overflowed result is the preview and
  note the gateway wrote. Calls that need approval: :mod:`toolgate.serve.mcp.approvals`.
* Server instructions are ``gateway.agent_context(agent=...)`` (the capability guides), computed
  per agent for ``initialize`` and ``server/discover``.
* Tool list changes reach every live client: :mod:`toolgate.serve.mcp.changes`.
* Progressive disclosure (``gateway.disclosure``, the ``search.progressive`` setting):
  ``tools/list`` shows the core tools and ``search_tools``; the tools a session's search finds
  join its list, ``list_changed`` is sent, and a tool not shown to a session is unknown to it.

Transports: :mod:`toolgate.serve.mcp.stdio` and :mod:`toolgate.serve.mcp.http`.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from mcp.server import NotificationOptions, Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    CallToolRequestParams,
    InputRequiredResult,
    NotificationParams,
    PaginatedRequestParams,
)

from ... import __version__
from ...errors import ErrorCode
from ...exporters.mcp import mcp_call_tool_result, mcp_tool
from ...gateway import Gateway
from ...model import CallOutcome, CallStatus, Tool
from ...model.names import to_mcp_name
from ...pipeline.approval import DEFAULT_APPROVAL_TTL
from ...search.tool import SEARCH_TOOL_ID
from ..caller_gone import outliving_cancellation, runs_to_its_end
from ..paging import CursorError, decode_cursor, encode_cursor, page_after
from .approval_link import ApprovalDirections
from .approvals import NO_PROMPT, McpApprovals, pending_result
from .changes import ToolListChanges
from .tasks import McpTasks

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "PRECOMPUTED_OUTCOME_KEY",
    "SERVER_NAME",
    "AgentFor",
    "McpSurface",
    "NamespacesFor",
    "build_mcp_server",
]

logger = logging.getLogger(__name__)

#: ``serverInfo.name``, and the audience sealed request states are bound to.
SERVER_NAME: Final = "toolgate"

#: Tools per ``tools/list`` page unless configured (``serve.mcp_page_size``).
DEFAULT_PAGE_SIZE: Final = 1000
#: The list a ``tools/list`` cursor belongs to (a cursor of another list is refused).
_CURSOR_KIND: Final = "mcp-tools"

#: ASGI scope key: the outcome of a call the HTTP fast path made and handed over to be answered
#: here (see :mod:`toolgate.serve.mcp.fast`), as ``(name, arguments, outcome)``.
PRECOMPUTED_OUTCOME_KEY: Final = "toolgate.mcp.outcome"

#: Who is calling: given the transport's request (a Starlette ``Request`` on HTTP, ``None`` on
#: stdio), the agent name (``None``: the default agent).
AgentFor = Callable[[Any], "str | None"]
#: What the caller's credentials allow, from the transport's request: the tool namespaces of
#: its OAuth token's scopes (``None``: no restriction, as for an API key or on stdio).
NamespacesFor = Callable[[Any], "frozenset[str] | None"]


def _unrestricted(_request: Any) -> frozenset[str] | None:
    return None


#: The transport's request being answered, for what the SDK asks without handing it over (the
#: ``Mcp-Param-*`` header check asks for a tool's input schema by name alone). Set by the HTTP
#: transport where the request is authenticated (:meth:`McpSurface.answering`).
_REQUEST: ContextVar[Any] = ContextVar("toolgate_mcp_request")
_NO_REQUEST: Final = object()


@dataclass(slots=True)
class _Listing:
    """The tools one caller sees, sorted by id, and their ``tools/list`` entries as far as
    pages have needed them."""

    key: object
    tools: list[Tool]
    ids: list[str]
    entries: list[dict[str, Any] | None] = field(default_factory=list)

    def entries_between(self, start: int, end: int) -> list[dict[str, Any]]:
        entries = self.entries
        found = []
        for index in range(start, end):
            entry = entries[index]
            if entry is None:
                entry = entries[index] = mcp_tool(self.tools[index])
            found.append(entry)
        return found


class _ToolgateServer(Server[Any]):
    """The low-level server, announcing ``tools.listChanged`` to handshake-era clients.

    The streamable-HTTP session manager builds the ``initialize`` answer itself, from
    ``create_initialization_options()`` with no options; this default makes that answer say
    that the tool list may change (it does, and the clients are told).
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options
            or NotificationOptions(
                tools_changed=True, resources_changed=True, prompts_changed=True
            ),
            experimental_capabilities,
            extensions,
        )


class McpSurface:
    """The gateway as an MCP server: handlers, approvals and list-change delivery.

    ``surface.server`` is the SDK's low-level ``Server`` to run on a transport; call
    :meth:`start` on the serving event loop (and :meth:`stop` at shutdown) so that tool list
    changes are delivered.
    """

    def __init__(
        self,
        gateway: Gateway,
        *,
        agent: AgentFor,
        approvals_url: str | None = None,
        elicitation: bool = True,
        session_id: str | None = None,
        namespaces: NamespacesFor = _unrestricted,
        request_state_key: bytes | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        directions: ApprovalDirections | None = None,
    ) -> None:
        """
        Args:
            gateway: The gateway whose tools are served.
            agent: Who is calling, from the transport's request (see :data:`AgentFor`).
            namespaces: What the caller's token allows (see :data:`NamespacesFor`).
            approvals_url: The web UI's base URL (``http://127.0.0.1:8470``); pending results
                link to ``<url>/approvals/<id>``. ``None``: only the CLI command is named.
            elicitation: Ask clients that declare form elicitation to approve calls (see
                :mod:`toolgate.serve.mcp.approvals` for the trust this implies).
            session_id: The session id calls carry when the transport has none of its own
                (stdio: one per process).
            request_state_key: The key sealing the approval ids handed out as
                ``requestState`` (32 bytes). Replicas behind one load balancer share it, so a
                retry may land on any of them; default: a random key of this process.
            page_size: Tools per ``tools/list`` page (at least 1).
            directions: Where pending results send the person (default: ``approvals_url``
                as given, and plain ``toolgate``); stdio checks its guessed address.
        """
        if page_size < 1:
            raise ValueError(f"page_size: at least 1 tool per tools/list page, got {page_size}")
        self.page_size = page_size
        self.gateway = gateway
        self.approvals_url = approvals_url
        self.directions = directions or ApprovalDirections(approvals_url)
        self.approvals = McpApprovals(gateway, elicitation=elicitation)
        self.changes = ToolListChanges(gateway.registry)
        self._agent_for = agent
        self._namespaces_for = namespaces
        self._session_id = session_id
        self._catalog: dict[object, _Listing] = {}
        server = _ToolgateServer(
            SERVER_NAME,
            version=__version__,
            title="toolgate",
            description="One gateway for every tool an AI agent calls.",
            on_subscriptions_listen=self.changes.listen,
            get_tool_input_schema=self._input_schema,
        )
        self._offerings(server)
        # Registered by method: these handlers answer wire dicts (the catalog is cached as
        # such), which the constructor's typed on_* parameters do not admit.
        server.add_request_handler("tools/list", PaginatedRequestParams, self._list_tools)
        server.add_request_handler("tools/call", CallToolRequestParams, self._call_tool)
        server.add_notification_handler(
            "notifications/initialized", NotificationParams, self._initialized
        )
        server.middleware.append(self._instructions)
        # Seal the approval id handed out as requestState (see serve.mcp.approvals), bound to the
        # agent as well as to the tool and its exact arguments.
        server.middleware.append(
            RequestStateBoundary(
                RequestStateSecurity(
                    keys=[os.urandom(32) if request_state_key is None else request_state_key],
                    ttl=DEFAULT_APPROVAL_TTL * 2,
                    bind_principal=self._principal,
                ),
                default_audience=SERVER_NAME,
            )
        )
        # Task-augmented tools/call and tasks/* (2025-11-25): serve.mcp.tasks.
        self.tasks = McpTasks(self)
        self.tasks.install(server)
        self.server: Server[Any] = server

    def _offerings(self, server: Server[Any]) -> None:
        """Register ``resources/*`` and ``prompts/*`` (:mod:`.resources`, :mod:`.prompts`)."""
        from .prompts import McpPrompts
        from .resources import McpResources

        self.server = server
        self.resources = McpResources(self)
        self.prompts = McpPrompts(self)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Deliver tool list changes on the running event loop."""
        self.changes.start()
        self.resources.start()

    def stop(self) -> None:
        """Stop delivering changes and end the open listen streams."""
        self.resources.stop()
        self.changes.stop()
        self.tasks.close()

    # -- identity -------------------------------------------------------------------------------

    def agent(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The agent this request comes from."""
        return self._agent_for(ctx.request)

    def namespaces(self, ctx: ServerRequestContext[Any, Any]) -> frozenset[str] | None:
        """The tool namespaces this request's credentials allow (``None``: any)."""
        return self._namespaces_for(ctx.request)

    def _principal(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        agent = self.agent(ctx)
        return None if agent is None else f"agent:{agent}"

    def session_of(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """The session this request belongs to (what calls and audit records carry)."""
        return _session_of(ctx.request, self._session_id)

    def _call_session(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        return _session_of(ctx.request, self._session_id)

    # -- tools/list -----------------------------------------------------------------------------

    def conversation(self, ctx: ServerRequestContext[Any, Any]) -> tuple[str | None, str | None]:
        """Whose tool list this request sees under progressive disclosure: agent and session."""
        return self.agent(ctx), self._call_session(ctx)

    def _listing(
        self,
        agent: str | None,
        namespaces: frozenset[str] | None,
        conversation: object,
    ) -> _Listing:
        """The tools ``agent`` sees with credentials allowing ``namespaces`` (cached until the
        tools or policies change); under progressive disclosure, those shown to
        ``conversation``."""
        disclosure = self.gateway.disclosure
        revision = None if disclosure is None else disclosure.revision(conversation)
        key = (self.gateway.registry.version, self.gateway.access.policies, revision)
        cache_key = (agent, namespaces) if disclosure is None else (agent, namespaces, conversation)
        cached = self._catalog.get(cache_key)
        if cached is not None and cached.key == key:
            return cached
        allowed = self.gateway.list_tools(agent=agent, namespaces=namespaces)
        if disclosure is not None:
            allowed = disclosure.visible(conversation, allowed)
        tools = sorted(allowed, key=lambda tool: tool.id)  # the order cursors rely on
        listing = _Listing(key, tools, [tool.id for tool in tools], [None] * len(tools))
        if len(self._catalog) > 1024:  # agent names come from configuration; bound it anyway
            self._catalog.clear()
        self._catalog[cache_key] = listing
        return listing

    def tools_for(
        self,
        agent: str | None,
        namespaces: frozenset[str] | None = None,
        conversation: object = None,
    ) -> list[dict[str, Any]]:
        """Every ``tools/list`` entry ``agent`` sees with credentials allowing ``namespaces``
        (all pages); under progressive disclosure, those shown to ``conversation``."""
        listing = self._listing(agent, namespaces, conversation)
        return listing.entries_between(0, len(listing.tools))

    def page_for(
        self,
        agent: str | None,
        namespaces: frozenset[str] | None = None,
        conversation: object = None,
        cursor: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One ``tools/list`` page of what :meth:`tools_for` lists: the page after ``cursor``
        (``None``: the first) and the cursor of the next one (``None``: this is the last).
        Raises :class:`~toolgate.serve.paging.CursorError` for a cursor this server did not
        write."""
        after = None if cursor is None else decode_cursor(_CURSOR_KIND, cursor)
        listing = self._listing(agent, namespaces, conversation)
        start, end, last = page_after(listing.ids, after, self.page_size)
        entries = listing.entries_between(start, end)
        return entries, None if last is None else encode_cursor(_CURSOR_KIND, last)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> dict[str, Any]:
        try:
            tools, next_cursor = self.page_for(
                self.agent(ctx), self.namespaces(ctx), self.conversation(ctx), params.cursor
            )
        except CursorError as error:
            raise MCPError(INVALID_PARAMS, f"Invalid {error.message}") from None
        # The 2026-07-28 result fields (the SDK drops them for handshake-era clients): the list
        # depends on the agent and may change at any moment, so it is private and never fresh.
        result: dict[str, Any] = {
            "tools": tools,
            "ttlMs": 0,
            "cacheScope": "private",
            "resultType": "complete",
        }
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    @contextmanager
    def answering(self, request: Any) -> Iterator[None]:
        """While the transport hands ``request`` (authenticated) to the SDK: what the SDK asks
        by tool name alone is answered for this request's caller."""
        token = _REQUEST.set(request)
        try:
            yield
        finally:
            _REQUEST.reset(token)

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        # For the 2026-07-28 HTTP check of ``Mcp-Param-*`` headers: without it the SDK would run
        # the whole tools/list handler on every call to find one schema. Only a tool the caller
        # may call has one: a header check of a hidden tool would tell that it exists, and name
        # its parameters. No request being answered: no schema (no check, nothing told).
        request = _REQUEST.get(_NO_REQUEST)
        if request is _NO_REQUEST:
            return None
        entry = self.gateway.registry.get(name)
        if entry is None or not self.callable_by(
            entry.tool.id, self._agent_for(request), self._namespaces_for(request)
        ):
            return None
        disclosure = self.gateway.disclosure
        if disclosure is not None and not disclosure.shown(
            (self._agent_for(request), _session_of(request, self._session_id)), entry.tool.id
        ):
            return None
        return entry.tool.input_schema_dict()

    # -- tools/call -----------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> dict[str, Any] | InputRequiredResult:
        agent = self.agent(ctx)
        namespaces = self.namespaces(ctx)
        conversation = self.conversation(ctx)
        arguments = params.arguments or {}
        disclosure = self.gateway.disclosure
        if disclosure is not None and not self._shown(conversation, params.name, agent, namespaces):
            # A tool hidden from the caller and one not shown to this session are answered by
            # the one path a missing tool takes (suggestions from this session's list).
            raise self.unknown_tool(params.name, agent, namespaces, conversation)
        ask = True
        if params.request_state is not None:
            if not self.callable_by(params.name, agent, namespaces):
                # An approval sealed for a token with broader scopes is not resumed by one
                # whose scopes (or the access rules) no longer let it see the tool.
                raise self.unknown_tool(params.name, agent, namespaces, conversation)
            # The user's answer is recorded as the decision; the call below then attaches to
            # the request and runs the approved call (or gets the refusal).
            ask = await self.approvals.resume(ctx, params, agent) is not NO_PROMPT

        async def call() -> CallOutcome:
            # The SDK cancels this handler when the client cancels the request or goes away:
            # the call is then cut off and recorded ``cancelled`` (or, with an idempotency key,
            # runs to its end for the retry), not dropped unrecorded.
            return await outliving_cancellation(
                self.gateway.call(
                    params.name,
                    arguments,
                    agent=agent,
                    session_id=self._call_session(ctx),
                    namespaces=namespaces,
                ),
                lambda: runs_to_its_end(self.gateway, params.name),
            )

        # The gateway records what a search found for this conversation; the list changed if
        # the conversation's revision did.
        revision = None if disclosure is None else disclosure.revision(conversation)
        outcome = _precomputed(ctx, params.name, arguments) or await call()
        if outcome.status is CallStatus.PENDING_APPROVAL and ask:
            step = await self.approvals.ask(ctx, outcome, agent, call)
            if isinstance(step, InputRequiredResult):
                return step
            outcome = step
        if disclosure is not None and outcome.tool_id == SEARCH_TOOL_ID:
            self._disclose(ctx, outcome, revision)
        if outcome.status is CallStatus.PENDING_APPROVAL:
            await self.directions.refresh()
        return self.result(outcome, agent, params.name, namespaces, conversation)

    def _shown(
        self,
        conversation: object,
        name: str,
        agent: str | None,
        namespaces: frozenset[str] | None,
    ) -> bool:
        """Whether ``name`` may be called in this conversation: a tool the caller may call and
        that was shown to it (a missing name is left to the gateway's own answer)."""
        disclosure = self.gateway.disclosure
        entry = self.gateway.registry.get(name)
        if disclosure is None or entry is None:
            return True
        if not self.callable_by(entry.tool.id, agent, namespaces):
            return False  # checked first: whether it was "shown" is not for a hidden tool
        return disclosure.shown(conversation, entry.tool.id)

    def _disclose(
        self, ctx: ServerRequestContext[Any, Any], outcome: CallOutcome, revision: int | None
    ) -> None:
        """The tools a search found join the session's list (the gateway records them for the
        call's session; recorded here too, for a call made without one); its clients are told
        when the list grew since ``revision``, taken before the call."""
        disclosure = self.gateway.disclosure
        if disclosure is None:
            return
        conversation = self.conversation(ctx)
        ok = outcome.status is CallStatus.OK
        disclosure.found_by(conversation, outcome.tool_id, ok, outcome.content)
        if disclosure.revision(conversation) != revision:
            self.changes.changed()

    def result(
        self,
        outcome: CallOutcome,
        agent: str | None,
        name: str,
        namespaces: frozenset[str] | None = None,
        conversation: object = None,
    ) -> dict[str, Any]:
        """The ``CallToolResult`` for the outcome of calling ``name`` (raises ``MCPError`` for an
        unknown tool, suggesting from what ``conversation`` was shown)."""
        if outcome.status is CallStatus.PENDING_APPROVAL:
            result = pending_result(outcome, self.directions.url, command=self.directions.command)
        elif outcome.code is ErrorCode.TOOL_NOT_FOUND or (
            outcome.code is ErrorCode.FORBIDDEN
            and not self.callable_by(outcome.tool_id, agent, namespaces)
        ):
            # Unknown tools are protocol errors (MCP tools spec). A tool this agent may not call
            # is not in its tools/list either, so it is unknown to it too: saying "forbidden"
            # would reveal that it exists.
            raise self.unknown_tool(name, agent, namespaces, conversation)
        else:
            result = mcp_call_tool_result(outcome)
            if "structuredContent" in result and not self._has_output_schema(outcome.tool_id):
                # Structured content repeats the text block; send it only where the tool promised
                # it (an output schema), not to every client for every result.
                del result["structuredContent"]
        result["resultType"] = "complete"  # required at 2026-07-28, dropped for older clients
        return result

    def _has_output_schema(self, tool_id: str) -> bool:
        entry = self.gateway.registry.get(tool_id)
        schema = None if entry is None else entry.tool.output_schema
        return schema is not None and schema.get("type") == "object"

    def callable_by(
        self, tool_id: str, agent: str | None, namespaces: frozenset[str] | None
    ) -> bool:
        """Whether ``agent``, with credentials allowing ``namespaces``, may see and call the
        tool (else it does not exist for it)."""
        entry = self.gateway.registry.get(tool_id)
        return (
            entry is not None and self.gateway.access.decide(entry.tool, agent, namespaces).allowed
        )

    def unknown_tool(
        self,
        name: str,
        agent: str | None,
        namespaces: frozenset[str] | None = None,
        conversation: object = None,
    ) -> MCPError:
        """The one answer to a tool that does not exist for this caller — missing, hidden from
        it, or (progressive disclosure) not shown to ``conversation``: suggestions come only from
        the list ``conversation`` sees, so nothing tells these cases apart."""
        # The gateway's own message suggests ids from every tool; name only the ones this agent
        # sees, so a tool hidden from it is not revealed.
        listing = self._listing(agent, namespaces, conversation)
        visible = [to_mcp_name(tool.id) for tool in listing.tools]
        close = difflib.get_close_matches(name, visible, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else "; call tools/list for the tools"
        return MCPError(INVALID_PARAMS, f"Unknown tool: {name}{hint}")

    # -- handshake and instructions -------------------------------------------------------------

    async def _initialized(
        self, ctx: ServerRequestContext[Any, Any], params: NotificationParams
    ) -> None:
        self.changes.track(ctx.session)

    async def _instructions(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method not in ("initialize", "server/discover"):
            return await call_next(ctx)
        try:
            agent = self.agent(ctx)
        except MCPError:
            raise
        except Exception:
            logger.exception("could not tell which agent is connecting")
            raise MCPError(INVALID_REQUEST, "unknown caller") from None
        result = await call_next(ctx)
        if isinstance(result, dict):
            text = self._agent_context(agent, self.namespaces(ctx))
            if text:
                result = {**result, "instructions": text}
        return result

    def _agent_context(self, agent: str | None, namespaces: frozenset[str] | None) -> str:
        try:
            return self.gateway.agent_context(agent=agent, namespaces=namespaces)
        except Exception:
            logger.exception("could not build the server instructions")
            return ""


def _precomputed(
    ctx: ServerRequestContext[Any, Any], name: str, arguments: Mapping[str, Any]
) -> CallOutcome | None:
    """The outcome the fast path already reached for this very call (taken once)."""
    scope = getattr(ctx.request, "scope", None)
    if not isinstance(scope, dict):
        return None
    found = scope.pop(PRECOMPUTED_OUTCOME_KEY, None)
    if not isinstance(found, tuple) or len(found) != 3:
        return None
    found_name, found_arguments, outcome = found
    if found_name != name or found_arguments != arguments or not isinstance(outcome, CallOutcome):
        return None
    return outcome


def _session_of(request: Any, default: str | None) -> str | None:
    """The session a transport's request belongs to (its ``Mcp-Session-Id``), else
    ``default``."""
    headers = getattr(request, "headers", None)
    if isinstance(headers, Mapping):
        session = headers.get("mcp-session-id")
        if isinstance(session, str) and session:
            return session
    return default


def _fixed_agent(name: str | None) -> AgentFor:
    def agent_for(_request: Any) -> str | None:
        return name

    return agent_for


def build_mcp_server(
    gateway: Gateway,
    *,
    agent: str | AgentFor | None = None,
    approvals_url: str | None = None,
    elicitation: bool = True,
    session_id: str | None = None,
    namespaces: NamespacesFor = _unrestricted,
    request_state_key: bytes | None = None,
    page_size: int = DEFAULT_PAGE_SIZE,
    directions: ApprovalDirections | None = None,
) -> McpSurface:
    """The gateway as an MCP server (``.server`` is the SDK's low-level ``Server``).

    ``agent`` is a fixed agent name (stdio) or a function of the transport's request (HTTP);
    ``namespaces`` what the request's credentials allow (HTTP with OAuth). See
    :class:`McpSurface` for the other options.
    """
    agent_for: AgentFor = agent if callable(agent) else _fixed_agent(agent)
    return McpSurface(
        gateway,
        agent=agent_for,
        approvals_url=approvals_url,
        elicitation=elicitation,
        session_id=session_id,
        namespaces=namespaces,
        request_state_key=request_state_key,
        page_size=page_size,
        directions=directions,
    )
