"""Progressive disclosure: an agent first sees a core set of tools plus ``search_tools``, and
each tool a search finds joins its list (issue 14).

The state is per conversation: a key chosen by the surface (the MCP session, else the agent).
Only tools found for that key are added; the gateway's access rules still decide every call.
"""

from __future__ import annotations

import fnmatch
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from ..model import Tool
from .tool import SEARCH_TOOL_ID

__all__ = ["MAX_CONVERSATIONS", "ProgressiveDisclosure"]

#: Conversations remembered at most (oldest forgotten first).
MAX_CONVERSATIONS = 10_000


class ProgressiveDisclosure:
    """Which tools each conversation has been shown: the core set plus what it found."""

    def __init__(self, core: Iterable[str] = ()) -> None:
        self.core: tuple[str, ...] = tuple(core)
        """Tool ids or ``fnmatch`` patterns (``fs:*``) every conversation sees."""
        self._found: OrderedDict[object, set[str]] = OrderedDict()
        self._lock = threading.Lock()

    def is_core(self, tool_id: str) -> bool:
        """Whether ``tool_id`` is always shown (the search tool is)."""
        return tool_id == SEARCH_TOOL_ID or any(
            fnmatch.fnmatchcase(tool_id, pattern) for pattern in self.core
        )

    def found(self, key: object, tool_ids: Iterable[str]) -> bool:
        """Record tools a search found for ``key``; returns whether any was new to it."""
        with self._lock:
            seen = self._found.setdefault(key, set())
            self._found.move_to_end(key)
            before = len(seen)
            seen.update(tool_ids)
            while len(self._found) > MAX_CONVERSATIONS:
                self._found.popitem(last=False)
            return len(seen) > before

    def shown(self, key: object, tool_id: str) -> bool:
        """Whether ``key`` sees ``tool_id``: core, or found by one of its searches."""
        if self.is_core(tool_id):
            return True
        with self._lock:
            return tool_id in self._found.get(key, ())

    def visible(self, key: object, tools: Sequence[Tool]) -> list[Tool]:
        """The ``tools`` (those the agent may call) that ``key`` is shown, in their order."""
        return [tool for tool in tools if self.shown(key, tool.id)]

    def found_by(self, key: object, tool_id: str, status_ok: bool, content: object) -> bool:
        """Record what a call of ``search_tools`` found for ``key`` (any other call, or one that
        failed, records nothing); returns whether any tool was new to it."""
        if tool_id != SEARCH_TOOL_ID or not status_ok or not isinstance(content, Mapping):
            return False
        found = content.get("tools")
        if not isinstance(found, list):
            return False
        ids = [item["id"] for item in found if isinstance(item, Mapping) and "id" in item]
        return self.found(key, ids)

    def revision(self, key: object) -> int:
        """Changes whenever ``key`` finds a new tool (for caching its list)."""
        with self._lock:
            return len(self._found.get(key, ()))
