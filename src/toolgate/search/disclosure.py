"""Progressive disclosure: an agent first sees a core set of tools plus ``search_tools``, and
each tool a search finds joins its list (issue 14).

The state is per conversation: a key chosen by the surface (the MCP session, else the agent).
Only tools found for that key are added; the gateway's access rules still decide every call.

At most :data:`MAX_CONVERSATIONS` are remembered. Past that, the agent with the most
conversations forgets its own least recently used one (a key ``(agent, session)`` belongs to
``agent``): any agent can open a conversation per HTTP request (``session_id``), and such a flood
must cost the flooder its own conversations, not another agent's tools in the middle of a run.
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
        self._found: dict[object, set[str]] = {}
        self._owners: dict[object, OrderedDict[object, None]] = {}
        """Each agent's conversations, least recently used first."""
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
            mine = self._owners.setdefault(_owner(key), OrderedDict())
            mine[key] = None
            mine.move_to_end(key)
            before = len(seen)
            seen.update(tool_ids)
            while len(self._found) > MAX_CONVERSATIONS:
                self._forget_one()
            return len(seen) > before

    def _forget_one(self) -> None:
        """Forget the least recently used conversation of the agent holding the most."""
        owner = max(self._owners, key=lambda name: len(self._owners[name]))
        conversations = self._owners[owner]
        oldest, _ = conversations.popitem(last=False)
        del self._found[oldest]
        if not conversations:
            del self._owners[owner]

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


def _owner(key: object) -> object:
    """The agent a conversation key belongs to (``(agent, session)``); other keys share one
    owner (so finding the largest stays a look over the agents, never over every key)."""
    return key[0] if isinstance(key, tuple) and key else None
