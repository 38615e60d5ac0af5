"""The registry: every known tool by namespaced id, with its binding and availability."""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import DuplicateToolError
from .model import Tool
from .model.names import from_name, legacy_shortened_name, to_mcp_name, to_provider_name

__all__ = ["RegisteredTool", "Registry"]


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    """A tool as the gateway holds it: definition, implementation, availability."""

    tool: Tool
    binding: Any
    """What the backend for ``tool.kind`` needs to run it (e.g. a ``PythonBinding``)."""
    unavailable_reason: str | None = None
    """Why the tool cannot run now (missing runtime, connection…); ``None`` when it can."""

    @property
    def available(self) -> bool:
        """True when the tool can run."""
        return self.unavailable_reason is None


def _surface_names(tool_id: str) -> tuple[str, ...]:
    """The tool's MCP and provider names (one when they are the same)."""
    mcp_name, provider_name = to_mcp_name(tool_id), to_provider_name(tool_id)
    return (mcp_name,) if mcp_name == provider_name else (mcp_name, provider_name)


def _describe_source(tool: Tool) -> str:
    where = tool.source.location or "an unnamed source"
    return f"{tool.source.format} declaration at {where}"


class Registry:
    """Tools by id. Lookups accept the id, its MCP or provider name (``demo__add``,
    ``demo__file.diff``, ``demo__file-2ediff``) or the older spelling that escaped every ``-``
    (:mod:`toolgate.model.names`)."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        # Every surface's name of every tool (shortened ones can only be found here).
        self._by_name: dict[str, str] = {}
        # Older shortened names (``…-h`` and a hash), which no longer decode.
        self._by_legacy_name: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []
        self._sorted: list[RegisteredTool] | None = None
        # Changes and the sorted listing are made under this lock: two threads adding one id
        # both passed the check, and a listing sorted before an add was stored after it, so
        # the search index took it with the new version and never saw the tool.
        self._lock = threading.RLock()
        self.version = 0
        """Increases on every change; surfaces use it to notice list changes."""

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[RegisteredTool]:
        # Sorted once per change, not on every listing (a catalog of 10,000 tools is listed
        # by every tools/list, catalog page and search); a change makes a new list, so an
        # iteration in progress goes on over the tools as they were.
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted(self._tools.values(), key=lambda e: e.tool.id)
            return iter(self._sorted)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._tools

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every add, replace or remove."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        # Under the lock; the listeners are told after it is released (one may list the tools).
        self._sorted = None
        self.version += 1

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    def add(self, entry: RegisteredTool) -> None:
        """Register a new tool. Raises :class:`DuplicateToolError` naming both declarations."""
        with self._lock:
            self._add(entry)
        self._notify()

    def _add(self, entry: RegisteredTool) -> None:
        tool_id = entry.tool.id
        existing = self._tools.get(tool_id)
        if existing is not None:
            raise DuplicateToolError(
                f"tool {tool_id!r} is declared twice: by the {_describe_source(existing.tool)} "
                f"and by the {_describe_source(entry.tool)}"
            )
        names = _surface_names(tool_id)
        for name in names:
            clash = self._by_name.get(name)
            if clash is not None:
                raise DuplicateToolError(
                    f"tools {clash!r} and {tool_id!r} map to the same name {name!r}; "
                    "rename one of them"
                )
            # A current name equal to another tool's older shortened name would take the calls
            # that older configurations still make to that tool.
            clash = self._by_legacy_name.get(name)
            if clash is not None:
                raise DuplicateToolError(
                    f"the name {name!r} of tool {tool_id!r} is the older shortened name of "
                    f"tool {clash!r}, which older configurations still call; rename one of them"
                )
        legacy = legacy_shortened_name(tool_id)
        if legacy is not None:
            clash = self._by_name.get(legacy) or self._by_legacy_name.get(legacy)
            if clash is not None:
                raise DuplicateToolError(
                    f"the older shortened name {legacy!r} of tool {tool_id!r}, which older "
                    f"configurations still call, is a name of tool {clash!r}; rename one of them"
                )
        self._tools[tool_id] = entry
        for name in names:
            self._by_name[name] = tool_id
        if legacy is not None:
            self._by_legacy_name[legacy] = tool_id
        self._changed()

    def replace(self, entry: RegisteredTool) -> None:
        """Add or update a tool in place (hot reload, availability changes)."""
        tool_id = entry.tool.id
        with self._lock:
            if tool_id in self._tools:
                self._tools[tool_id] = entry
                self._changed()
            else:
                self._add(entry)
        self._notify()

    def remove(self, tool_id: str) -> bool:
        """Remove a tool; returns whether it was there."""
        with self._lock:
            if self._tools.pop(tool_id, None) is None:
                return False
            for name in _surface_names(tool_id):
                self._by_name.pop(name, None)
            legacy = legacy_shortened_name(tool_id)
            if legacy is not None and self._by_legacy_name.get(legacy) == tool_id:
                del self._by_legacy_name[legacy]
            self._changed()
        self._notify()
        return True

    def get(self, name: str) -> RegisteredTool | None:
        """The tool for an id, a surface's name or an older spelling of one, or ``None``."""
        entry = self._tools.get(name)
        if entry is not None:
            return entry
        # Exact names first: a name one surface gives a tool is never an older spelling of
        # another's (:func:`~toolgate.model.names.from_name` inverts every mapped name, and
        # :meth:`add` refuses a name that is another tool's older shortened name).
        tool_id = self._by_name.get(name) or self._by_legacy_name.get(name) or from_name(name)
        return None if tool_id is None else self._tools.get(tool_id)

    def suggestions(
        self, name: str, *, limit: int = 3, among: Callable[[Tool], bool] | None = None
    ) -> tuple[str, ...]:
        """The closest known ids, for "did you mean" messages; with ``among``, only ids of tools
        it accepts (what the caller may see: a suggestion must never reveal a hidden tool)."""
        # A snapshot, taken under the lock: a hot reload adding a tool from its thread while
        # ``among`` decides made the walk over the dict fail ("changed size during iteration").
        with self._lock:
            known = list(self._tools.items())
        ids = [tool_id for tool_id, entry in known if among is None or among(entry.tool)]
        candidates = difflib.get_close_matches(name, ids, n=limit, cutoff=0.5)
        if len(candidates) < limit:
            # "add" should find "demo:add": also match on the part after the namespace.
            by_name: dict[str, str] = {}
            for tool_id in ids:
                by_name.setdefault(tool_id.rpartition(":")[2], tool_id)
            for match in difflib.get_close_matches(
                name.rpartition(":")[2], list(by_name), cutoff=0.6
            ):
                if by_name[match] not in candidates:
                    candidates.append(by_name[match])
        return tuple(candidates[:limit])
