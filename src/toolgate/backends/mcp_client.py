"""Tools on remote MCP servers: one event loop thread owns every connection of a source.

MCP SDK sessions are bound to the event loop (and task) they were opened on, while toolgate calls
arrive on whatever loop the caller uses — the application's for ``await gateway.call``, the
gateway's private thread for ``call_sync``, none at all for the CLI's synchronous catalog. So an
:class:`McpHub` runs its own loop on a daemon thread and keeps every session there; calls cross
over with ``run_coroutine_threadsafe`` and await the result on the caller's loop (cancelling the
caller's await — the pipeline's timeout — cancels the request on the hub, and the SDK tells the
server). Synchronous code waits on a thread event with a deadline; nothing waits unbounded.

Closing a hub stops every connection (the SDK ends stdio servers: stdin closed, then SIGTERM and
SIGKILL to their process group) and then the thread. Hubs still open when the interpreter exits
are closed by an ``atexit`` hook, so a CLI run never leaves server processes behind.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .._json import thaw
from ..call_state import CallState
from ..registry import RegisteredTool
from .base import BackendUnavailableError, ToolTimeoutError
from .mcp_connection import Connection, Snapshot
from .mcp_launch import HttpLaunch, Launch, LaunchUnavailable, StdioLaunch, Timing, grant_key
from .mcp_limits import DEFAULT_MAX_MESSAGE
from .mcp_tasks import task_required

__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "HttpLaunch",
    "Launch",
    "LaunchUnavailable",
    "McpBackend",
    "McpBinding",
    "McpHub",
    "Snapshot",
    "StdioLaunch",
    "Timing",
    "grant_key",
]

log = logging.getLogger("toolgate.mcp")

#: Seconds ``close`` lets connections end gracefully before cancelling them, then in total.
_GRACEFUL_CLOSE = 8.0
_CLOSE_LIMIT = 20.0

_OPEN_HUBS: weakref.WeakSet[McpHub] = weakref.WeakSet()


def _close_open_hubs() -> None:
    for hub in list(_OPEN_HUBS):
        try:
            hub.close()
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("closing MCP connections at exit failed")


atexit.register(_close_open_hubs)


def _new_loop() -> asyncio.AbstractEventLoop:
    """The hub's loop: uvloop's where it is installed (``uvicorn[standard]`` brings it), whose
    socket I/O costs a fraction of the selector loop's — the hub's thread does every upstream
    request of the source, so its loop bounds how many proxied calls a process answers."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - not on every platform
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class McpHub:
    """Every MCP connection of one declaration source, on one private event loop thread."""

    def __init__(self, on_change: Callable[[], None], *, name: str = "toolgate-mcp") -> None:
        """``on_change`` is called on the hub's thread whenever a server's tool list or
        availability changes."""
        self._on_change = on_change
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._connections: dict[str, Connection] = {}
        self._tokens: dict[str, object] = {}
        self._tasks: list[concurrent.futures.Future[None]] = []
        self._closed = False
        self.changes = 0
        """Counts published changes, so a late listener can tell whether it missed one."""
        self.on_resource_updated: Callable[[str, str], None] | None = None
        """Told ``(server, uri)`` on the hub's thread when a server says a subscribed resource
        changed."""
        _OPEN_HUBS.add(self)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = _new_loop()
            thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return self._loop

    def on_hub_thread(self) -> bool:
        """True when called from the hub's own thread (which must never wait on itself)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def _changed(self) -> None:
        self.changes += 1
        self._on_change()

    # -- connections ----------------------------------------------------------------------------

    def ensure(
        self,
        name: str,
        token: object,
        launch: Callable[[], Launch],
        timing: Timing,
        *,
        max_message: int = DEFAULT_MAX_MESSAGE,
    ) -> None:
        """Keep a connection to server ``name``; a new ``token`` (its spec) restarts it.
        ``max_message``: the bytes of one message from the server (:mod:`.mcp_limits`)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this MCP hub is closed")
            if name in self._connections and self._tokens[name] == token:
                return
            old = self._connections.pop(name, None)
            connection = Connection(name, launch, timing, self._changed, max_message)
            connection.on_resource_updated = self._resource_updated
            self._connections[name] = connection
            self._tokens[name] = token
            loop = self._ensure_loop()
            if old is not None:
                loop.call_soon_threadsafe(old.stop)
            self._tasks = [task for task in self._tasks if not task.done()]
            self._tasks.append(asyncio.run_coroutine_threadsafe(connection.run(), loop))

    def retain(self, names: Iterable[str]) -> None:
        """Stop the connections to every server not in ``names``."""
        keep = set(names)
        with self._lock:
            gone = [self._connections.pop(n) for n in list(self._connections) if n not in keep]
            for connection in gone:
                self._tokens.pop(connection.name, None)
            loop = self._loop
        for connection in gone:
            if loop is not None:
                loop.call_soon_threadsafe(connection.stop)

    def snapshot(self, name: str) -> Snapshot | None:
        """What is known about server ``name`` now (any thread)."""
        connection = self._connections.get(name)
        return None if connection is None else connection.snapshot

    def wait_first(self, names: Iterable[str], timeout: float) -> None:
        """Block until each server's first connection attempt has finished, at most
        ``timeout`` seconds in all (they run in parallel). Not from the hub's thread."""
        if self.on_hub_thread():
            return
        deadline = time.monotonic() + timeout
        for name in names:
            connection = self._connections.get(name)
            if connection is not None:
                connection.first_attempt.wait(max(0.0, deadline - time.monotonic()))

    # -- calls ----------------------------------------------------------------------------------

    def _submit(
        self, server: str, tool: str, arguments: dict[str, Any], timeout: float
    ) -> concurrent.futures.Future[Any]:
        connection = self._connections.get(server)
        loop = self._loop
        if connection is None or loop is None or self._closed:
            raise BackendUnavailableError(f"the MCP server {server} is not connected")
        # An upstream tool that may only run as a task is called as one (see .mcp_tasks).
        required = task_required(connection.snapshot.tools, tool)
        call = connection.call_task if required else connection.call
        return asyncio.run_coroutine_threadsafe(call(tool, arguments, timeout), loop)

    async def call(self, server: str, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """Call ``tool`` on ``server`` from any event loop; cancelling this cancels the call."""
        return await asyncio.wrap_future(self._submit(server, tool, arguments, timeout))

    def call_blocking(
        self, server: str, tool: str, arguments: dict[str, Any], timeout: float
    ) -> Any:
        """:meth:`call` for a thread without an event loop (not the hub's own)."""
        if self.on_hub_thread():
            raise RuntimeError("an MCP call cannot wait on the MCP hub's own thread")
        future = self._submit(server, tool, arguments, timeout)
        try:
            return future.result(timeout + 5.0)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolTimeoutError(f"no answer within {timeout:g} s") from None

    # -- resources and prompts ------------------------------------------------------------------

    def _resource_updated(self, server: str, uri: str) -> None:
        listener = self.on_resource_updated
        if listener is not None:
            listener(server, uri)

    async def settled(self, server: str, timeout: float) -> bool:
        """:meth:`Connection.settled` of ``server`` from any event loop (``False`` for a server
        not connected)."""
        connection = self._connections.get(server)
        loop = self._loop
        if connection is None or loop is None or self._closed:
            return False
        future = asyncio.run_coroutine_threadsafe(connection.settled(timeout), loop)
        return await asyncio.wrap_future(future)

    async def offering(
        self, server: str, method: str, params: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """``resources/read``, ``prompts/get``, ``resources/subscribe`` or
        ``resources/unsubscribe`` on ``server`` from any event loop (see
        :meth:`Connection.offering`); cancelling this cancels the request."""
        connection = self._connections.get(server)
        loop = self._loop
        if connection is None or loop is None or self._closed:
            raise BackendUnavailableError(f"the MCP server {server} is not connected")
        future = asyncio.run_coroutine_threadsafe(
            connection.offering(method, params, timeout), loop
        )
        return await asyncio.wrap_future(future)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every connection (their server processes end) and the thread. Idempotent;
        bounded; not from the hub's own thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
            loop, thread, tasks = self._loop, self._thread, list(self._tasks)
        _OPEN_HUBS.discard(self)
        if loop is None or thread is None:
            return
        if self.on_hub_thread():
            raise RuntimeError("an MCP hub cannot be closed from its own thread")
        for connection in connections:
            loop.call_soon_threadsafe(connection.stop)
        _, pending = concurrent.futures.wait(tasks, timeout=_GRACEFUL_CLOSE)
        for task in pending:
            task.cancel()  # the SDK's process shutdown is shielded: it still completes
        concurrent.futures.wait(pending, timeout=_CLOSE_LIMIT - _GRACEFUL_CLOSE)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    async def aclose(self) -> None:
        """:meth:`close` for async code (waits in a worker thread, not on the caller's loop)."""
        await asyncio.to_thread(self.close)


@dataclass(frozen=True)
class McpBinding:
    """What a registered MCP tool is bound to: a server connection of a hub."""

    hub: McpHub
    server: str
    """The ``MCPServer`` name."""
    remote_name: str
    """The tool's name on that server."""
    url: str | None = None
    """The server's streamable-HTTP endpoint (``None``: a stdio server, or not declared)."""


class McpBackend:
    """Runs ``ImplementationKind.MCP`` tools: ``tools/call`` on the bound server's session.

    Stateless: the binding names the hub, so one backend serves the tools of every source.
    """

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        return False

    @staticmethod
    def _binding(state: CallState) -> McpBinding:
        binding = state.entry.binding
        if not isinstance(binding, McpBinding):
            raise BackendUnavailableError(
                f"{state.tool.id} is not bound to an MCP server connection"
            )
        return binding

    async def run(self, state: CallState) -> Any:
        binding = self._binding(state)
        arguments: dict[str, Any] = thaw(state.arguments)
        return await binding.hub.call(
            binding.server, binding.remote_name, arguments, state.tool.timeout
        )

    def run_inline(self, state: CallState) -> Any:
        binding = self._binding(state)
        arguments: dict[str, Any] = thaw(state.arguments)
        return binding.hub.call_blocking(
            binding.server, binding.remote_name, arguments, state.tool.timeout
        )
