"""``notifications/tools/list_changed`` for every live MCP client, from whatever thread changed
the tools.

The registry calls its listeners synchronously from the thread that changed it (the tool-folder
watcher, a connection change, a test calling ``gateway.add_tool_folder``). This module hops onto
the server's event loop with ``call_soon_threadsafe`` and coalesces a burst of changes (a rescan
that adds ten tools) into one notification per client.

The two protocol eras are told differently, as the MCP SDK requires:

* 2026-07-28 clients open a ``subscriptions/listen`` stream and receive change events there only
  (SEP-2575); the SDK's :class:`~mcp.server.subscriptions.ListenHandler` serves those streams and
  :class:`~mcp.server.subscriptions.InMemorySubscriptionBus` fans the event out.
* Handshake-era clients (2025-11-25 and older) receive the notification on their connection's
  standalone channel (stdio, or the GET stream of a stateful streamable-HTTP session). Their
  sessions are remembered from ``notifications/initialized`` until the connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections import OrderedDict
from typing import Any

from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from ...registry import Registry

__all__ = ["MAX_TRACKED_SESSIONS", "ToolListChanges"]

logger = logging.getLogger(__name__)

#: Handshake-era sessions remembered at most (oldest forgotten first): a bound on memory even
#: when a transport never reports that a session ended.
MAX_TRACKED_SESSIONS = 10_000


class ToolListChanges:
    """Tells every live MCP client that the tool list changed."""

    def __init__(self, registry: Registry, *, max_sessions: int = MAX_TRACKED_SESSIONS) -> None:
        self.bus = InMemorySubscriptionBus()
        """Where 2026-07-28 ``subscriptions/listen`` streams receive change events."""
        self.listen = ListenHandler(self.bus)
        """The ``subscriptions/listen`` request handler (register it on the server)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._sessions: OrderedDict[int, ServerSession] = OrderedDict()
        self._max_sessions = max_sessions
        self._tasks: set[asyncio.Task[None]] = set()
        # The registry keeps its listeners for ever; a weak reference lets a discarded server
        # (tests build many) be collected, its listener then doing nothing.
        ref = weakref.ref(self)

        def listener() -> None:
            changes = ref()
            if changes is not None:
                changes.changed()

        registry.on_change(listener)

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Deliver changes on the running event loop (call from the server's loop)."""
        self._loop = asyncio.get_running_loop()

    def stop(self) -> None:
        """Stop delivering, end every listen stream gracefully and forget every session."""
        self._loop = None
        self.listen.close()
        self._sessions.clear()
        for task in list(self._tasks):
            task.cancel()

    # -- sessions of the handshake era ----------------------------------------------------------

    def track(self, session: ServerSession) -> None:
        """Remember a handshake-era session until its connection closes."""
        connection = _connection_of(session)
        key = id(connection) if connection is not None else id(session)
        if key in self._sessions:
            return
        self._sessions[key] = session
        while len(self._sessions) > self._max_sessions:
            self._sessions.popitem(last=False)
        if connection is not None:
            # The connection unwinds its exit stack when it closes: forget the session then.
            connection.exit_stack.callback(self._sessions.pop, key, None)

    def sessions(self) -> list[ServerSession]:
        """The handshake-era sessions remembered now (other list changes are sent to them)."""
        return list(self._sessions.values())

    @property
    def tracked(self) -> int:
        """How many handshake-era sessions are remembered now."""
        return len(self._sessions)

    # -- changes --------------------------------------------------------------------------------

    def changed(self) -> None:
        """The registry changed: schedule one notification per client (from any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop closed between the check and now
            loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        if self._scheduled or self._loop is None:
            return
        self._scheduled = True
        task = self._loop.create_task(self._deliver())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver(self) -> None:
        # One loop iteration of grace, so the rest of a burst made in the same callback round
        # (a folder rescan adds its tools one by one) is covered by this notification.
        await asyncio.sleep(0)
        self._scheduled = False
        await self.bus.publish(ToolsListChanged())
        for key, session in list(self._sessions.items()):
            try:
                await session.send_tool_list_changed()
            except Exception:
                logger.debug("could not notify an MCP session of a tool list change", exc_info=True)
                self._sessions.pop(key, None)


def _connection_of(session: ServerSession) -> Any:
    """The connection behind a session, when this SDK version exposes its exit stack.

    ``ServerSession`` keeps its ``Connection`` private (mcp 2.3); the connection is the only
    object that knows when the client went away. Without it, sessions are forgotten oldest
    first past :data:`MAX_TRACKED_SESSIONS` and notifying a closed one is a no-op.
    """
    connection = getattr(session, "_connection", None)
    stack = getattr(connection, "exit_stack", None)
    return connection if isinstance(stack, contextlib.AsyncExitStack) else None
