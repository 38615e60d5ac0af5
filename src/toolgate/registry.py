"""The registry: every known tool by namespaced id, with its binding and availability."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .errors import DuplicateToolError
from .model import Tool
from .model.names import from_provider_name, to_provider_name

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


def _describe_source(tool: Tool) -> str:
    where = tool.source.location or "an unnamed source"
    return f"{tool.source.format} declaration at {where}"


class Registry:
    """Tools by id. Lookups accept the id or its provider-safe name (``demo__add``)."""

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}
        self._by_provider_name: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []
        self._sorted: list[RegisteredTool] | None = None
        self.version = 0
        """Increases on every change; surfaces use it to notice list changes."""

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[RegisteredTool]:
        # Sorted once per change, not on every listing (a catalog of 10,000 tools is listed
        # by every tools/list, catalog page and search); a change makes a new list, so an
        # iteration in progress goes on over the tools as they were.
        if self._sorted is None:
            self._sorted = sorted(self._tools.values(), key=lambda e: e.tool.id)
        return iter(self._sorted)

    def __contains__(self, tool_id: object) -> bool:
        return tool_id in self._tools

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every add, replace or remove."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self._sorted = None
        self.version += 1
        for listener in self._listeners:
            listener()

    def add(self, entry: RegisteredTool) -> None:
        """Register a new tool. Raises :class:`DuplicateToolError` naming both declarations."""
        tool_id = entry.tool.id
        existing = self._tools.get(tool_id)
        if existing is not None:
            raise DuplicateToolError(
                f"tool {tool_id!r} is declared twice: by the {_describe_source(existing.tool)} "
                f"and by the {_describe_source(entry.tool)}"
            )
        provider_name = to_provider_name(tool_id)
        clash = self._by_provider_name.get(provider_name)
        if clash is not None:
            raise DuplicateToolError(
                f"tools {clash!r} and {tool_id!r} map to the same provider name "
                f"{provider_name!r}; rename one of them"
            )
        self._tools[tool_id] = entry
        self._by_provider_name[provider_name] = tool_id
        self._changed()

    def replace(self, entry: RegisteredTool) -> None:
        """Add or update a tool in place (hot reload, availability changes)."""
        tool_id = entry.tool.id
        if tool_id in self._tools:
            self._tools[tool_id] = entry
            self._changed()
        else:
            self.add(entry)

    def remove(self, tool_id: str) -> bool:
        """Remove a tool; returns whether it was there."""
        if self._tools.pop(tool_id, None) is None:
            return False
        self._by_provider_name.pop(to_provider_name(tool_id), None)
        self._changed()
        return True

    def get(self, name: str) -> RegisteredTool | None:
        """The tool for an id or a provider-safe name, or ``None``."""
        entry = self._tools.get(name)
        if entry is not None:
            return entry
        tool_id = self._by_provider_name.get(name) or from_provider_name(name)
        return None if tool_id is None else self._tools.get(tool_id)

    def suggestions(
        self, name: str, *, limit: int = 3, among: Callable[[Tool], bool] | None = None
    ) -> tuple[str, ...]:
        """The closest known ids, for "did you mean" messages; with ``among``, only ids of tools
        it accepts (what the caller may see: a suggestion must never reveal a hidden tool)."""
        ids = [
            tool_id for tool_id, entry in self._tools.items() if among is None or among(entry.tool)
        ]
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
