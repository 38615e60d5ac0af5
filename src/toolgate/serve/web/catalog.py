"""The catalog: the tools as tiles, a page of them at a time (``?page=N``, 100 tools by
default, sorted by id and grouped by namespace), a page per tool, and a form to try a call.

Health figures are read from the audit log only for the tools of the page shown (or of the
search results), so the page costs the same whatever the size of the catalog."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ..._json import StrictJsonError, loads_strict
from ...audit.log_base import AuditStoreError
from ...errors import SearchQueryError, ToolNotFoundError
from ...formats.capability.source import CapabilitySource, Connection
from ...formats.mcp_server.pinning import ToolReview
from ...formats.mcp_server.source import AcceptError
from ...health import Phase, ToolStatus
from ...model import CallOutcome, McpEntry, Tool
from ...model.display import render_display
from ...model.hidden_text import tool_findings
from ...registry import RegisteredTool
from ...search import MAX_LIMIT, MAX_QUERY_CHARS, SearchHit
from .security import form_of, operator_of
from .state import WebUi, path_to, ui_of

__all__ = ["routes"]

#: The most characters of arguments the "try it" form accepts (the form limit is larger).
MAX_ARGUMENTS_CHARS = 100_000
_RECENT_CALLS = 10


@dataclass(frozen=True, slots=True)
class Tile:
    """What a catalog tile shows about one tool."""

    tool: Tool
    status: ToolStatus | None
    unavailable_reason: str | None
    display: str | None
    connection: Connection | None

    @property
    def phase(self) -> str:
        """The health phase; without statistics, what availability alone says."""
        if self.status is not None:
            return str(self.status.phase)
        return str(Phase.UNAVAILABLE if self.unavailable_reason else Phase.READY)


def _connections(ui: WebUi) -> dict[str, Connection]:
    """Connection state by capability id, as the last load saw it."""
    found: dict[str, Connection] = {}
    for source in ui.gateway.declarations.sources:
        if isinstance(source, CapabilitySource):
            for capability in source.capabilities:
                found[capability.manifest.id] = capability.connection
    return found


def _tile_display(tool: Tool) -> str | None:
    """The tile's display line with each argument shown by name (``"‹address›"``)."""
    ui = tool.display.ui
    if ui is None:
        return None
    return render_display(tool, {arg.name: f"‹{arg.name}›" for arg in ui.args})


def _tile(
    entry: RegisteredTool, status: ToolStatus | None, connections: Mapping[str, Connection]
) -> Tile:
    tool = entry.tool
    connection = None if tool.capability is None else connections.get(tool.capability)
    return Tile(tool, status, entry.unavailable_reason, _tile_display(tool), connection)


def _statuses(ui: WebUi, tool_ids: Iterable[str]) -> tuple[list[ToolStatus], str | None]:
    """The health of these tools, or none and why (the audit log, their source, cannot be
    read)."""
    try:
        statuses = [ui.gateway.status(tool_id) for tool_id in tool_ids]
    except AuditStoreError as exc:
        return [], f"health figures are unavailable: {exc}"
    problem = next((s.stats_error for s in statuses if s.stats_error), None)
    return statuses, None if problem is None else f"health figures are unavailable: {problem}"


@dataclass(frozen=True, slots=True)
class CatalogPage:
    """Which page of the catalog is shown: ``number`` of ``pages`` (1-based), ``first`` and
    ``last`` the positions (1-based) of its first and last tool among ``total``."""

    number: int
    pages: int
    total: int
    first: int
    last: int
    problem: str | None = None


def _page_of(request: Request, total: int, size: int) -> CatalogPage:
    """The page ``?page=`` asks for, kept within the pages there are."""
    pages = max(1, math.ceil(total / size))
    text = request.query_params.get("page", "1").strip() or "1"
    problem = None
    try:
        number = int(text)
    except ValueError:
        number, problem = 1, f"page: not a page number ({text[:40]!r}); showing the first page"
    number = max(1, min(number, pages))
    first = (number - 1) * size
    last = min(first + size, total)
    return CatalogPage(number, pages, total, first + 1 if total else 0, last, problem)


def _status(ui: WebUi, tool_id: str) -> tuple[ToolStatus | None, str | None]:
    try:
        status = ui.gateway.status(tool_id)
    except AuditStoreError as exc:
        return None, f"health figures are unavailable: {exc}"
    problem = status.stats_error
    return status, None if problem is None else f"health figures are unavailable: {problem}"


def _search(ui: WebUi, query: str) -> tuple[list[SearchHit], str | None]:
    """The tools ranked for ``query`` (the operator's view: every tool, available or not), or
    none and what is wrong with the query."""
    try:
        return ui.gateway.search_index.search(query, limit=MAX_LIMIT, matches_only=True), None
    except SearchQueryError as exc:
        return [], exc.message


async def catalog(request: Request) -> Response:
    ui = ui_of(request)
    query = request.query_params.get("q", "").strip()[:MAX_QUERY_CHARS]
    connections = _connections(ui)
    entries = ui.gateway.entries()
    registered = {entry.tool.id for entry in entries}
    failed = [s for s in ui.gateway.failed_statuses() if s.tool_id not in registered]
    groups: dict[str, list[RegisteredTool]] = {}
    scores: dict[str, float] = {}
    search_error = None
    page = None
    if query:
        # Ranked by the tool search, best first, in one group; the first search after a
        # change rebuilds the index, so it runs off the event loop.
        hits, search_error = await ui.blocking(_search, ui, query)
        by_tool = {entry.tool.id: entry for entry in entries}
        found = [by_tool[hit.tool.id] for hit in hits if hit.tool.id in by_tool]
        scores = {hit.tool.id: hit.score for hit in hits}
        if found:
            groups[f"Best matches for “{query}”"] = found
    else:
        size = ui.options.catalog_page_size
        page = _page_of(request, len(entries), size)
        for entry in entries[(page.number - 1) * size : page.number * size]:
            groups.setdefault(entry.tool.namespace, []).append(entry)
    shown = [entry.tool.id for group in groups.values() for entry in group]
    statuses, health_error = await ui.blocking(_statuses, ui, shown)
    by_id = {status.tool_id: status for status in statuses}
    tiles = {
        name: [_tile(entry, by_id.get(entry.tool.id), connections) for entry in group]
        for name, group in groups.items()
    }
    in_namespace = Counter(entry.tool.namespace for entry in entries) if page else Counter()
    return ui.page(
        request,
        "catalog.html",
        {
            "nav": "catalog",
            "groups": tiles,
            "in_namespace": in_namespace,
            "page": page,
            "failed": failed,
            "query": query,
            "scores": scores,
            "search_error": search_error,
            "health_error": health_error,
        },
    )


def _argument_template(tool: Tool) -> str:
    """A starting point for the arguments: each property with its default or an empty value."""
    properties = tool.input_schema.get("properties") or {}
    required = set(tool.input_schema.get("required") or ())
    template: dict[str, Any] = {}
    empty = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    for name, schema in properties.items():
        schema = schema if isinstance(schema, Mapping) else {}
        if "default" in schema:
            template[name] = schema["default"]
        elif name in required:
            kind = schema.get("type")
            template[name] = empty.get(kind) if isinstance(kind, str) else None
    return json.dumps(template, indent=2, ensure_ascii=False, default=str)


def _recent(ui: WebUi, tool_id: str) -> list[Any]:
    audit = ui.gateway.audit
    try:
        return [] if audit is None else audit.query(tool_id=tool_id, limit=_RECENT_CALLS)
    except AuditStoreError:
        return []  # the health section says why


async def _tool_page(
    request: Request,
    tool_id: str,
    *,
    outcome: CallOutcome | None = None,
    arguments_text: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    ui = ui_of(request)
    try:
        tool = ui.gateway.get_tool(tool_id)
    except ToolNotFoundError as exc:
        return ui.page(
            request, "error.html", {"title": "No such tool", "message": str(exc)}, status_code=404
        )
    entry = next((e for e in ui.gateway.entries() if e.tool.id == tool.id), None)
    status, health_error = await ui.blocking(_status, ui, tool.id)
    recent = await ui.blocking(_recent, ui, tool.id)
    connection = None if tool.capability is None else _connections(ui).get(tool.capability)
    upstream, upstream_error = await ui.blocking(_upstream, ui, tool)
    return ui.page(
        request,
        "tool.html",
        {
            "hidden_text": tool_findings(tool),
            "upstream": upstream,
            "upstream_error": upstream_error,
            "nav": "catalog",
            "tool": tool,
            "status": status,
            "health_error": health_error,
            "unavailable_reason": None if entry is None else entry.unavailable_reason,
            "connection": connection,
            "display": _tile_display(tool),
            "recent": recent,
            "audit_on": ui.gateway.audit is not None,
            "arguments_text": arguments_text or _argument_template(tool),
            "outcome": outcome,
            "outcome_display": None if outcome is None else _call_display(tool, arguments_text),
            "error": error,
        },
        status_code=status_code,
    )


def _upstream(ui: WebUi, tool: Tool) -> tuple[ToolReview | None, str | None]:
    """How the MCP server behind ``tool`` lists it now, against its accepted definition (for a
    tool of an MCP server), or why that cannot be told."""
    entry = tool.entry
    if not isinstance(entry, McpEntry):
        return None, None
    try:
        reviews = ui.gateway.review_mcp_server(entry.server)
    except AcceptError as exc:
        return None, str(exc)
    return reviews.get(entry.remote_name), None


async def accept_upstream(request: Request) -> Response:
    """Accept the definition of one tool of an MCP server, as the operator reviewed it on the
    tool's page (refused if the server changed it since: the form carries its hash)."""
    ui = ui_of(request)
    server = request.path_params["server"]
    form = form_of(request)
    name, digest, back = form.get("tool", ""), form.get("definition_hash", ""), form.get("back", "")
    try:
        ui.gateway.accept_mcp_tools(
            server, [name], by=operator_of(request), expected={name: digest}
        )
    except AcceptError as exc:
        return ui.page(
            request,
            "error.html",
            {"title": "Not accepted", "message": str(exc)},
            status_code=409,
        )
    if back and ui.gateway.registry.get(back) is not None:
        return RedirectResponse(path_to(request, "tools", back), status_code=303)
    return RedirectResponse(path_to(request), status_code=303)


def _call_display(tool: Tool, arguments_text: str | None) -> str | None:
    try:
        arguments = json.loads(arguments_text or "{}")
    except ValueError:
        return None
    return render_display(tool, arguments) if isinstance(arguments, Mapping) else None


async def tool_page(request: Request) -> Response:
    return await _tool_page(request, request.path_params["tool_id"])


async def try_call(request: Request) -> Response:
    """Call the tool as the console's agent with the arguments of the form."""
    ui = ui_of(request)
    tool_id = request.path_params["tool_id"]
    text = form_of(request).get("arguments", "").strip() or "{}"
    if len(text) > MAX_ARGUMENTS_CHARS:
        return await _tool_page(
            request,
            tool_id,
            arguments_text=text[:MAX_ARGUMENTS_CHARS],
            error=f"the arguments are limited to {MAX_ARGUMENTS_CHARS:,} characters",
            status_code=400,
        )
    try:
        arguments = loads_strict(text)
    except StrictJsonError as exc:
        return await _tool_page(
            request,
            tool_id,
            arguments_text=text,
            error=f"the arguments are not valid JSON: {exc}",
            status_code=400,
        )
    if not isinstance(arguments, dict):
        return await _tool_page(
            request,
            tool_id,
            arguments_text=text,
            error="the arguments must be a JSON object ({...})",
            status_code=400,
        )
    options = ui.options
    outcome = await ui.gateway.call(
        tool_id,
        arguments,
        agent=options.agent,
        session_id=options.session_id,
        workspace=options.workspace,
    )
    audit = ui.gateway.audit
    if audit is not None:
        # Records are written in batches; wait briefly so "recent calls" includes this one.
        await ui.blocking(audit.flush, 2.0)
    return await _tool_page(request, tool_id, outcome=outcome, arguments_text=text)


def routes() -> list[Route]:
    """The catalog's routes."""
    return [
        Route("/", catalog, name="catalog"),
        Route(
            "/mcp-servers/{server}/accept",
            accept_upstream,
            methods=["POST"],
            name="accept_upstream",
        ),
        Route("/tools/{tool_id:path}", tool_page, methods=["GET"], name="tool"),
        Route("/tools/{tool_id:path}", try_call, methods=["POST"], name="try_call"),
    ]
