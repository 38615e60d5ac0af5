"""Routes for agents: the catalog, calls, exports, health, and who the caller is.

Everything here is filtered by the calling agent: a tool is listed, shown and exported exactly
when a call by that agent would not be refused as ``forbidden``.

``GET /v1/tools`` and ``GET /v1/status`` answer pages (``limit``, default 200, at most 1,000)
sorted by id, each but the last with a ``next_cursor`` to pass as ``cursor``
(:mod:`toolgate.serve.paging`); health figures are computed only for the page.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from collections.abc import Callable, Sequence
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Body, Depends, Query
from starlette.requests import Request
from starlette.responses import Response

from ...errors import ErrorCode, SearchQueryError
from ...exporters import EXPORT_FORMATS, export_tools
from ...gateway import Gateway
from ...health import ToolStatus
from ...model.names import to_provider_name
from ...registry import RegisteredTool
from ...search.query import DEFAULT_LIMIT, clean_query
from ..paging import CursorError, decode_cursor, encode_cursor, page_after
from .call_body import call_route_class
from .calls import is_json, run_call, strict_call_body, workspace_exists
from .deps import ERRORS, Agent, Caller, Context, context_of
from .models import (
    AgentInfo,
    ApprovalNeeded,
    ApprovalRequested,
    CallOutcomeView,
    CallRequest,
    SearchResults,
    StatusList,
    ToolDetail,
    ToolList,
    is_absolute_workspace,
)
from .problems import ApiJSONResponse, ApiProblem, HttpErrorCode
from .views import approval_view, status_view, tool_detail, tool_schemas, tool_summary

__all__ = ["DEFAULT_PAGE_LIMIT", "MAX_PAGE_LIMIT", "router"]

#: Entries per page of ``GET /v1/tools`` and ``GET /v1/status`` unless ``limit`` says.
DEFAULT_PAGE_LIMIT: Final = 200
#: The largest ``limit``.
MAX_PAGE_LIMIT: Final = 1000

#: Where the call route keeps its caller for the problems of a malformed body.
_CALLER_SCOPE_KEY = "toolgate.caller"

_EXPORT_SUMMARIES = {
    "openai": "OpenAI Chat Completions `tools`",
    "openai-responses": "OpenAI Responses API function tools",
    "anthropic": "Anthropic Messages API `tools`",
    "gemini": "Gemini `functionDeclarations`",
    "mcp": "MCP `tools/list` entries",
}


router = APIRouter(prefix="/v1", responses=ERRORS)
"""The agent-facing routes."""


def _sees(gateway: Gateway, who: Caller, tool_id: str) -> bool:
    """Whether ``tool_id`` names a tool ``who`` may see."""
    entry = gateway.registry.get(tool_id)
    return entry is not None and gateway.access.visible(entry.tool, who.agent, who.namespaces)


def _visible(gateway: Gateway, who: Caller, tool_id: str) -> RegisteredTool:
    """The tool ``tool_id`` when ``who`` may see it, else the ``404`` of an unknown tool."""
    entry = gateway.registry.get(tool_id)
    if entry is not None and gateway.access.visible(entry.tool, who.agent, who.namespaces):
        return entry
    # Not "forbidden", and no suggestion of a tool it may not see: to this caller a hidden
    # tool does not exist.
    suggestions = list(gateway.pipeline.suggestions(tool_id, who.agent, who.namespaces))
    hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
    raise ApiProblem(
        404,
        ErrorCode.TOOL_NOT_FOUND,
        f"no tool named {tool_id!r}{hint}",
        extra={"suggestions": suggestions},
    )


_LIMIT_DESCRIPTION = f"Entries per page (1-{MAX_PAGE_LIMIT})."
_CURSOR_DESCRIPTION = "The `next_cursor` of the previous page; leave out for the first page."
Limit = Annotated[int, Query(description=_LIMIT_DESCRIPTION)]
Cursor = Annotated[str | None, Query(description=_CURSOR_DESCRIPTION)]


def _page(
    kind: str, ids: Sequence[str], limit: int, cursor: str | None
) -> tuple[int, int, str | None]:
    """The page of ``ids`` (sorted) that ``limit`` and ``cursor`` ask for: its start, end and
    next cursor; a ``422`` naming the parameter when either is not acceptable."""
    if not 1 <= limit <= MAX_PAGE_LIMIT:
        raise _query_problem(
            "limit", f"between 1 and {MAX_PAGE_LIMIT} entries per page, got {limit}"
        )
    try:
        after = None if cursor is None else decode_cursor(kind, cursor)
    except CursorError as error:
        raise _query_problem(error.field, error.message.removeprefix(f"{error.field}: ")) from None
    start, end, last = page_after(ids, after, limit)
    return start, end, None if last is None else encode_cursor(kind, last)


def _query_problem(parameter: str, message: str) -> ApiProblem:
    """A ``422 invalid_request`` naming a query parameter, shaped like the problems of the
    parameters FastAPI checks itself (an ``errors`` list with ``in`` and ``pointer``)."""
    return ApiProblem(
        422,
        HttpErrorCode.INVALID_REQUEST,
        f"{parameter}: {message}",
        extra={
            "field": parameter,
            "errors": [
                {"in": "query", "pointer": f"/{parameter}", "message": message, "type": "value"}
            ],
        },
    )


_SESSION_DESCRIPTION = (
    "A conversation of this agent: under progressive disclosure, the core tools plus those its "
    "searches found (over HTTP or MCP); leave out for every tool."
)
Session = Annotated[
    str | None, Query(min_length=1, max_length=200, description=_SESSION_DESCRIPTION)
]


@router.get("/tools", response_model=ToolList, summary="List the tools this agent may call")
def list_tools(
    who: Agent,
    context: Context,
    limit: Limit = DEFAULT_PAGE_LIMIT,
    cursor: Cursor = None,
    schemas: Annotated[
        bool, Query(description="Also give each tool's `input_schema` and `timeout`.")
    ] = False,
    session_id: Session = None,
) -> Response:
    """The tools the calling agent may call, sorted by id, a page at a time: each with its
    side-effect level, whether calls need approval, phase, source format and provider name
    (with `schemas=true`, its input schema and timeout too: one request per page instead of
    one per tool). `total` counts them all; follow `next_cursor` (passed as `cursor`) until it
    is `null`. Under progressive disclosure, `session_id` narrows the list to what that
    conversation is shown. A `limit` outside 1-1000 or a cursor not taken from a previous page
    is a 422 naming it."""
    gateway = context.gateway
    allowed = gateway.list_tools(agent=who.agent, namespaces=who.namespaces)
    disclosure = gateway.disclosure
    if disclosure is not None and session_id is not None:
        # Keyed as the MCP server keys a conversation (agent, session), so a search over
        # either surface widens the same list.
        allowed = disclosure.visible((who.agent, session_id), allowed)
    start, end, next_cursor = _page("api-tools", [tool.id for tool in allowed], limit, cursor)
    rows = []
    for tool in allowed[start:end]:
        entry = gateway.registry.get(tool.id)
        if entry is not None:
            row = tool_summary(entry, gateway.status(tool.id), context.approval_policy)
            if schemas:
                row.update(tool_schemas(entry))
            rows.append(row)
    return ApiJSONResponse({"tools": rows, "total": len(allowed), "next_cursor": next_cursor})


# Before /tools/{tool_id:path}, which would take "search" for a tool id.
@router.get("/tools/search", response_model=SearchResults, summary="Search the tools")
def search_tools(
    who: Agent,
    context: Context,
    q: Annotated[str, Query(description="What the tool should do, in plain words.")],
    limit: Annotated[int, Query(description="How many tools (1-100).")] = DEFAULT_LIMIT,
    mode: Annotated[
        Literal["lexical", "semantic", "fused"] | None,
        Query(description="Ranking (default: fused with toolgate[search], else lexical)."),
    ] = None,
    session_id: Session = None,
    explain: Annotated[
        bool,
        Query(
            description="Say why each tool ranked where it did: the request's terms found in "
            "it, the similarity, the closest prompt example."
        ),
    ] = False,
) -> Response:
    """The tools this agent may call that best match `q`, best first, with their
    definitions (input schema, provider name, side-effect level) and scores. Unavailable
    tools are left out. With `explain=true` each tool says why it ranked where it did. Under
    progressive disclosure, the tools found join `session_id`'s list (as a search over MCP
    does). An empty or over-long `q`, or a `limit` outside 1-100, is a 422 naming the field."""
    gateway = context.gateway
    try:
        query = clean_query(q, field="q")
        hits = gateway.search_tools(
            query, agent=who.agent, namespaces=who.namespaces, limit=limit, mode=mode
        )
        explained = gateway.search_index.explain(query, hits, mode=mode) if explain else None
    except SearchQueryError as error:
        raise ApiProblem(
            422, ErrorCode.INVALID_ARGUMENTS, str(error), extra={"field": error.field}
        ) from None
    except RuntimeError as error:  # semantic ranking asked for without the extra
        raise ApiProblem(
            422, ErrorCode.INVALID_ARGUMENTS, f"mode: {error}", extra={"field": "mode"}
        ) from None
    chosen = mode or ("fused" if gateway.search_index.semantic else "lexical")
    rows = [
        {
            "rank": rank,
            "id": hit.tool.id,
            "provider_name": to_provider_name(hit.tool.id),
            "title": hit.tool.display_title,
            "description": hit.tool.description,
            "input_schema": hit.tool.input_schema_dict(),
            "side_effect": str(hit.tool.side_effect),
            "timeout": hit.tool.timeout,
            "score": hit.score,
            "lexical_rank": hit.lexical_rank,
            "semantic_rank": hit.semantic_rank,
        }
        for rank, hit in enumerate(hits, start=1)
    ]
    if explained is not None:
        for row, why in zip(rows, explained, strict=True):
            row["explain"] = why.to_dict()
    disclosure = gateway.disclosure
    if disclosure is not None and session_id is not None:
        disclosure.found((who.agent, session_id), [hit.tool.id for hit in hits])
    return ApiJSONResponse({"query": query, "mode": chosen, "tools": rows})


# Before /tools/{tool_id:path}, which would take "<id>/approval" for a tool id.
@router.get(
    "/tools/{tool_id:path}/approval",
    response_model=ApprovalNeeded,
    summary="Would a call wait for a person",
)
def approval_needed(
    tool_id: str,
    who: Agent,
    context: Context,
    workspace: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=4096,
            description="The folder the call would act on (grants are per workspace).",
        ),
    ] = None,
) -> Response:
    """Whether a call of this tool by the calling agent would wait for a person now: the tool,
    the approval rules or the agent's access rule require approval, and no "always allow"
    grant for `workspace` covers it. A tool's security check may still ask when the call runs.
    A tool this agent may not see is a 404, as on the other tool routes. A `workspace` that
    is not an absolute path is a 422, as in a call's body.

    A tool id may itself end in `/approval` (`ns:notes/approval`): when `tool_id` names no
    tool this agent may see and the whole path does, this is that tool's page, as before this
    route existed. (When both do, this route answers for `tool_id`.)"""
    gateway = context.gateway
    if not _sees(gateway, who, tool_id) and _sees(gateway, who, f"{tool_id}/approval"):
        return show_tool(f"{tool_id}/approval", who, context)
    entry = _visible(gateway, who, tool_id)
    if workspace is not None and not is_absolute_workspace(workspace):
        raise _query_problem("workspace", "must be an absolute path")
    needed = gateway.approval_needed(
        entry.tool.id, agent=who.agent, workspace=workspace, namespaces=who.namespaces
    )
    return ApiJSONResponse({"tool": entry.tool.id, "approval_needed": needed})


@router.get(
    "/tools/{tool_id:path}",
    response_model=ToolDetail,
    summary="Show a tool",
)
def show_tool(tool_id: str, who: Agent, context: Context) -> Response:
    """One tool (by id or provider name): description, schemas, hints, health."""
    gateway = context.gateway
    entry = _visible(gateway, who, tool_id)
    status = gateway.status(entry.tool.id)
    return ApiJSONResponse(tool_detail(entry, status, context.approval_policy))


async def _call_caller(request: Request, who: Agent) -> Caller:
    """The caller, kept in the request for :func:`_tool_arguments` (the call route's body
    problems are written after its dependencies ran)."""
    request.scope[_CALLER_SCOPE_KEY] = who
    return who


def _tool_arguments(request: Request) -> tuple[str, frozenset[str]] | None:
    """The called tool's id and argument names, when the caller may see it."""
    who = request.scope.get(_CALLER_SCOPE_KEY)
    gateway = context_of(request).gateway
    entry = gateway.registry.get(str(request.path_params.get("tool_id", "")))
    if (
        not isinstance(who, Caller)
        or entry is None
        or not gateway.access.visible(entry.tool, who.agent, who.namespaces)
    ):
        return None
    properties = entry.tool.input_schema_dict().get("properties")
    return entry.tool.id, frozenset(properties) if isinstance(properties, dict) else frozenset()


async def _checked_call_body(raw: Request, body: CallRequest | None) -> CallRequest:
    """A call's body as the gateway's own parser reads it (FastAPI parsed it leniently), its
    workspace a folder on this host; else the problem that says why."""
    strict_call_body(await raw.body(), is_json(raw.scope))
    request = body or CallRequest()
    if not workspace_exists(request):
        raise ApiProblem(
            422,
            ErrorCode.INVALID_ARGUMENTS,
            f"workspace: no such folder on the gateway's host: {request.workspace}",
        )
    return request


async def call_tool(
    tool_id: str,
    who: Annotated[Caller, Depends(_call_caller)],
    context: Context,
    raw: Request,
    body: Annotated[CallRequest | None, Body()] = None,
) -> Response:
    """Call a tool through the whole pipeline (validation, access, rate limits, approval,
    execution, shaping, audit). Send the body as JSON (`Content-Type: application/json`):
    `{"arguments": {...}}`, the tool's arguments by name, optionally with `session_id` and
    `workspace`; it may be left out for a tool without arguments. The call's own errors are
    not HTTP errors: the body's `status` is `error` with a stable `code` and a `message`
    written for the model (and the HTTP status 200)."""
    # Well-formed calls are answered before FastAPI (calls.py); this route answers the rest.
    # FastAPI parsed the body leniently; the gateway's own parser has the last word.
    request = await _checked_call_body(raw, body)
    # A client that goes away cuts its call off, as on the fast path (calls.py).
    return await run_call(context, who.agent, tool_id, request, who.namespaces, receive=raw.receive)


router.add_api_route(
    "/tools/{tool_id:path}/call",
    call_tool,
    methods=["POST"],
    response_model=CallOutcomeView,
    summary="Call a tool",
    responses={
        202: {
            "model": CallOutcomeView,
            "description": "The call waits for a person's approval: `approval` says which "
            "request, where to follow it and where to decide it. Calling again with the "
            "same arguments attaches to the same request and, once approved, returns the "
            "result.",
        }
    },
    route_class_override=call_route_class(_tool_arguments),
)


async def request_approval(
    tool_id: str,
    who: Annotated[Caller, Depends(_call_caller)],
    context: Context,
    raw: Request,
    body: Annotated[CallRequest | None, Body()] = None,
) -> Response:
    """The approval request of exactly this call — found, or made now and put to people —
    without running the call, ever. The body is a call's (`{"arguments": {...}}` with
    `session_id`, `workspace`, `tool_call_id` and `idempotency_key`): the same call with the
    same `tool_call_id` finds the same request, and the call itself (`POST
    /v1/tools/{id}/call`) attaches to it and, once it is approved, runs it once. A decided
    request is shown as it stands (`status` approved or denied), never taken: only the call
    takes it.

    `approval` is `null` when the call would not wait for a person now: no approval required,
    an "always allow" grant covers it, an earlier call holds its `idempotency_key` (the call
    replays that outcome, or reports the conflict), or the call would be refused (invalid
    arguments, say: the call itself says why). A tool's security check is not run here: it
    may still ask when the call runs. A tool this agent may not see is a 404, as on the other
    tool routes; a body that is not a call's is a 422 (a 400 for JSON the gateway refuses), as
    for a call.

    A POST to a path ending in `/approval` is always this route, for the tool before it: the
    request of a tool whose id itself ends in `/approval` is at `.../approval/approval`."""
    request = await _checked_call_body(raw, body)
    gateway = context.gateway
    entry = _visible(gateway, who, tool_id)
    found = await gateway.request_approval(
        entry.tool.id,
        request.arguments,
        agent=who.agent,
        session_id=request.session_id,
        workspace=request.workspace,
        tool_call_id=request.tool_call_id,
        namespaces=who.namespaces,
        idempotency_key=request.idempotency_key,
    )
    view = None if found is None else approval_view(found, entry.tool)
    return ApiJSONResponse({"tool": entry.tool.id, "approval": view})


router.add_api_route(
    "/tools/{tool_id:path}/approval",
    request_approval,
    methods=["POST"],
    response_model=ApprovalRequested,
    summary="Ask for a call's approval without running it",
    route_class_override=call_route_class(_tool_arguments),
)


@router.get("/status", response_model=StatusList, summary="Health of the tools")
def list_statuses(
    who: Agent, context: Context, limit: Limit = DEFAULT_PAGE_LIMIT, cursor: Cursor = None
) -> Response:
    """Phase, calls and failure rate over 7 days, latency and last error of each tool this
    agent may call, sorted by id, a page at a time (`limit`, `cursor` and `next_cursor` as for
    `GET /v1/tools`); operators also see declarations that fail to load (phase Failed)."""
    gateway = context.gateway
    items: list[tuple[str, Callable[[], ToolStatus]]]
    if who.operator:
        items = [(entry.tool.id, _status_of(gateway, entry.tool.id)) for entry in gateway.registry]
        items += [(failed.tool_id, _known(failed)) for failed in gateway.failed_statuses()]
    else:
        allowed = gateway.list_tools(agent=who.agent, namespaces=who.namespaces)
        items = [(tool.id, _status_of(gateway, tool.id)) for tool in allowed]
    items.sort(key=lambda item: item[0])
    start, end, next_cursor = _page("api-status", [item[0] for item in items], limit, cursor)
    rows = [status_view(status()) for _, status in items[start:end]]
    return ApiJSONResponse({"tools": rows, "total": len(items), "next_cursor": next_cursor})


def _status_of(gateway: Gateway, tool_id: str) -> Callable[[], ToolStatus]:
    return lambda: gateway.status(tool_id)


def _known(status: ToolStatus) -> Callable[[], ToolStatus]:
    return lambda: status


@router.get("/me", response_model=AgentInfo, summary="Who is calling")
def whoami(who: Agent, context: Context) -> Response:
    """The agent this request was authenticated as, whether it is an operator, and the
    capability guides it should be given (MCP server instructions): only of the tools it
    may see."""
    instructions = context.gateway.agent_context(agent=who.agent, namespaces=who.namespaces)
    return ApiJSONResponse(
        {"agent": who.agent, "operator": who.operator, "instructions": instructions}
    )


def _exporter(export_format: str) -> Any:
    """The route answering the tools the caller may call in ``export_format``."""

    def export(who: Agent, context: Context) -> Response:
        tools = context.gateway.list_tools(agent=who.agent, namespaces=who.namespaces)
        return ApiJSONResponse(export_tools(tools, export_format))

    return export


for _export_format in EXPORT_FORMATS:
    router.add_api_route(
        f"/export/{_export_format}",
        _exporter(_export_format),
        methods=["GET"],
        response_model=list[dict[str, Any]],
        summary=f"Tool definitions as {_EXPORT_SUMMARIES[_export_format]}",
        description="The tools this agent may call, ready to pass to the provider.",
        operation_id=f"export_{_export_format.replace('-', '_')}",
    )
