"""The gateway's catalog: registering tools and declarations, and what it tells about them
(lookup, the tools an agent may call, search, health, diagnostics, alerts).

:class:`GatewayCatalog` is mixed into :class:`~toolgate.gateway.Gateway`, which builds the
registry, access rules, search index, statistics and sources it reads; calling lives there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .backends import Backend
from .errors import ToolNotFoundError
from .formats._common.diagnostics import Diagnostic
from .formats.declarations import (
    DeclarationSource,
    SourceAlert,
    SourceContext,
    SourceLoad,
    SourceSet,
)
from .formats.detect import open_source
from .formats.python_function.source import entry_for, flatten
from .formats.tool_folder.source import FolderRoot, ScanReport, ToolFolderSource
from .health import StatsSource, ToolStatus, failed_status, tool_status
from .model import ImplementationKind, Tool
from .pipeline.authorize import AccessRules
from .python import FunctionTool
from .registry import RegisteredTool, Registry
from .sandbox.runner import Sandbox
from .schema_check import compile_schema
from .search import SearchHit, ToolIndex
from .search.disclosure import ProgressiveDisclosure
from .search.index import SearchMode
from .search.tool import search_tool

__all__ = ["Addable", "GatewayCatalog"]

Addable = FunctionTool[Any, Any] | Callable[..., Any] | Tool
"""What :meth:`GatewayCatalog.add` takes: ``@tool`` functions, plain functions, tools."""


class GatewayCatalog:
    """Registration and the catalog of a gateway (see the module docstring)."""

    registry: Registry
    access: AccessRules
    search_index: ToolIndex
    disclosure: ProgressiveDisclosure | None
    stats: StatsSource
    tool_folders: ToolFolderSource
    declarations: SourceSet
    source_context: SourceContext
    #: list_tools answers by (agent, namespaces): (registry version, policies, tools).
    _listed: dict[tuple[str | None, frozenset[str] | None], tuple[int, object, tuple[Tool, ...]]]
    sandbox: Sandbox | None
    _backends: dict[ImplementationKind, Backend]

    # -- registration ---------------------------------------------------------------------------

    def add(
        self,
        *items: Addable | Iterable[Addable],
        namespace: str | None = None,
        handler: Callable[..., Any] | None = None,
    ) -> list[Tool]:
        """Register tools: ``@tool`` functions, plain functions (wrapped with ``@tool``), or
        :class:`~toolgate.Tool` values with a ``handler=``. Lists and tuples are flattened.

        ``namespace=`` re-homes every added tool in that namespace. Raises
        :class:`~toolgate.DuplicateToolError` when an id is taken (naming both declarations) and
        :class:`~toolgate.ToolDefinitionError` for a malformed declaration.
        """
        added: list[Tool] = []
        for item in flatten(items):
            entry = entry_for(item, handler)
            if namespace is not None:
                renamed = dataclasses.replace(entry.tool, id=f"{namespace}:{entry.tool.name}")
                entry = dataclasses.replace(entry, tool=renamed)
            self._check(entry.tool)
            self.registry.add(entry)
            added.append(entry.tool)
        return added

    @staticmethod
    def _check(definition: Tool) -> None:
        # Compiling (not only checking) catches references that cannot resolve offline.
        compile_schema(definition.input_schema, f"{definition.id}: input schema")
        if definition.output_schema is not None:
            compile_schema(definition.output_schema, f"{definition.id}: output schema")

    def remove(self, tool_id: str) -> bool:
        """Unregister a tool; returns whether it was registered."""
        return self.registry.remove(tool_id)

    # -- catalog --------------------------------------------------------------------------------

    def get_tool(self, tool_id: str) -> Tool:
        """The tool with this id (or provider-safe name). Raises :class:`ToolNotFoundError`."""
        entry = self.registry.get(tool_id)
        if entry is None:
            suggestions = self.registry.suggestions(tool_id)
            hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
            raise ToolNotFoundError(f"no tool named {tool_id!r}{hint}", suggestions=suggestions)
        return entry.tool

    def list_tools(
        self, *, agent: str | None = None, namespaces: frozenset[str] | None = None
    ) -> list[Tool]:
        """The tools ``agent`` may call, sorted by id — exactly the ones a call would not refuse
        as ``forbidden``. ``namespaces``: what the caller's credentials allow (OAuth scopes)."""
        # Kept until the tools or the policies change: every page of a large catalog (MCP
        # tools/list, GET /v1/tools) asks again, and deciding 10,000 tools takes ~0.1 s.
        listed = self.__dict__.setdefault("_listed", {})
        key = (agent, namespaces)
        version, policies = self.registry.version, self.access.policies
        cached = listed.get(key)
        if cached is not None and cached[0] == version and cached[1] is policies:
            return list(cached[2])
        decide = self.access.decide
        tools = tuple(
            entry.tool for entry in self.registry if decide(entry.tool, agent, namespaces).allowed
        )
        if len(listed) >= 256:  # agents come from configuration; bound it anyway
            listed.clear()
        listed[key] = (version, policies, tools)
        return list(tools)

    def search_tools(
        self,
        query: str,
        *,
        agent: str | None = None,
        namespaces: frozenset[str] | None = None,
        limit: int = 10,
        mode: SearchMode | None = None,
    ) -> list[SearchHit]:
        """The tools that best match a request in plain words, best first, at most ``limit``
        (1-100): only available tools ``agent`` may call with credentials allowing
        ``namespaces`` (``None``: any; an OAuth token's scopes). Raises
        :class:`~toolgate.errors.SearchQueryError` (naming ``query`` or ``limit``) for bad
        input. ``mode``: ``lexical``, ``semantic`` or ``fused`` (default: fused when semantic
        search is on)."""
        return self.search_index.search(
            query,
            allowed=lambda entry: (
                entry.available and self.access.decide(entry.tool, agent, namespaces).allowed
            ),
            limit=limit,
            mode=mode,
            # BM25's statistics count the caller's tools only; its decisions on every tool are
            # kept for these credentials until the policies change.
            scope=((agent, namespaces), self.access.policies),
        )

    def add_search_tool(self) -> Tool:
        """Register ``toolgate:search_tools``, which agents call to search the tools they may
        call and get their definitions (over MCP, HTTP and every other surface)."""
        return self.add(
            search_tool(
                lambda query, agent, namespaces, limit: self.search_tools(
                    query, agent=agent, namespaces=namespaces, limit=limit
                )
            )
        )[0]

    def enable_progressive_disclosure(self, *, core: Iterable[str] = ()) -> None:
        """List only the ``core`` tools (ids or ``fs:*`` patterns) and ``search_tools`` in MCP
        ``tools/list``; a tool a session finds with ``search_tools`` then joins its list."""
        if self.registry.get("toolgate:search_tools") is None:
            self.add_search_tool()
        self.disclosure = ProgressiveDisclosure(core)

    def status(self, tool_id: str) -> ToolStatus:
        """Health of one tool: phase, calls and failure rate over 7 days, latency, last error."""
        entry = self.registry.get(tool_id)
        if entry is None:
            self.get_tool(tool_id)  # raises ToolNotFoundError with suggestions
            raise AssertionError("unreachable")
        return tool_status(entry.tool.id, self.stats, unavailable_reason=entry.unavailable_reason)

    def statuses(self) -> list[ToolStatus]:
        """Health of every registered tool, and ``Failed`` for declarations that do not load."""
        return [*(self.status(entry.tool.id) for entry in self.registry), *self.failed_statuses()]

    def failed_statuses(self) -> list[ToolStatus]:
        """``Failed`` for each declaration that does not load (one per path), without reading
        any tool's statistics."""
        found: list[ToolStatus] = []
        seen: set[str] = set()
        for problem in self.diagnostics():
            if problem.severity == "error" and problem.path not in seen:
                seen.add(problem.path)
                found.append(failed_status(problem.path, str(problem)))
        return found

    def entries(self) -> list[RegisteredTool]:
        """Registered tools with their availability, sorted by id."""
        return list(self.registry)

    def diagnostics(self) -> list[Diagnostic]:
        """Problems found in declarations (broken tool folders…), each naming file and field."""
        return [*self.tool_folders.diagnostics, *self.declarations.diagnostics()]

    def alerts(self) -> list[SourceAlert]:
        """Alerts the declaration sources raised on their last load (plugin alerts)."""
        return self.declarations.alerts()

    def agent_context(
        self, *, agent: str | None = None, namespaces: frozenset[str] | None = None
    ) -> str:
        """Text to give ``agent`` (with credentials allowing ``namespaces``) about the tools it
        may see: the guide of each connected capability and a "connect it in Settings" hint for
        each unconnected one (MCP server instructions, ``GET /v1/me``)."""

        def visible(tool_id: str) -> bool:
            entry = self.registry.get(tool_id)
            return entry is not None and self.access.visible(entry.tool, agent, namespaces)

        return self.declarations.agent_context(agent, visible)

    def add_source(
        self,
        source: DeclarationSource | Path | str,
        *,
        format: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> SourceLoad:
        """Load declarations in one of the formats (a path: detected unless ``format`` names
        it; ``options``: the format's settings) and register their tools. Problems are in the
        returned diagnostics and in :meth:`diagnostics`; the other tools keep loading."""
        if not isinstance(source, DeclarationSource):
            if self.sandbox is not None:  # what the gateway loads is never a sandbox's to show
                self.sandbox.guard([Path(source).expanduser()])
            source = open_source(
                Path(source).expanduser(), self.source_context, format_name=format, options=options
            )
        for kind, backend in source.backends().items():
            self._backends.setdefault(kind, backend)
        return self.declarations.add(source)

    def add_tool_folder(self, path: Path | str, *, namespace: str = "local") -> ScanReport:
        """Load every tool folder inside ``path`` (tools ``namespace:<name>``) and keep them."""
        if self.sandbox is not None:
            self.sandbox.guard([Path(path).expanduser()])
        return self.tool_folders.add_root(FolderRoot(Path(path), namespace))

    def rescan(self) -> ScanReport:
        """Reload the tool folders now (watching does this by itself while started)."""
        return self.tool_folders.scan()
