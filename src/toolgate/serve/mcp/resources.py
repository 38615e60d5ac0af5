"""MCP ``resources/*``: the upstream servers' resources, served through the gateway.

What a caller sees and reads is decided by :class:`toolgate.offerings.GatewayOfferings` (the
access rules of tools, per namespace; every read audited); this module speaks the protocol:

* ``resources/list`` and ``resources/templates/list`` — in pages of the surface's page size,
  sorted by URI (by ``uriTemplate`` for templates), with a ``nextCursor``
  (:mod:`toolgate.serve.paging`); entries as the upstream lists them, URIs as shown
  (:mod:`toolgate.offerings.uris`).
* ``resources/read`` — the upstream's answer. A URI the caller may not see, or that no server
  has, is ``-32602`` (the 2026-07-28 spec's code for an unknown resource); the upstream's own
  MCP errors keep their code; a server that is down or does not answer is ``-32603`` with the
  reason.
* ``resources/subscribe`` / ``resources/unsubscribe`` (handshake-era clients) and the resource
  URIs of a ``subscriptions/listen`` stream (2026-07-28 clients, whose protocol has no such
  pair) — a subscription is kept per (server, upstream URI), whatever spelling (as shown, or
  wrapped) a client used: the upstream is subscribed while any connection or stream follows
  the resource, and its ``notifications/resources/updated`` is relayed to each of them under
  the URI each used. A listen stream carries only the URIs its caller may follow. Updates
  are coalesced (one per resource while one is being relayed) and those of resources nobody
  follows are dropped on arrival, so a flood from one upstream costs the others little.
  Bounds: :data:`MAX_PER_CONNECTION`, :data:`MAX_PER_AGENT`.
* ``notifications/resources/list_changed`` (and ``prompts/list_changed``, see
  :mod:`.prompts`) to every live client when an upstream's listing or availability changes;
  2026-07-28 clients get them on their ``subscriptions/listen`` stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged, ResourceUpdated
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)

from ...backends.mcp_offerings import OfferingRefused
from ...offerings import OfferingAmbiguous, OfferingNotFound
from ..paging import CursorError, decode_cursor, encode_cursor, page_after
from .changes import _connection_of

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from .server import McpSurface

__all__ = ["McpResources", "answer_failure", "listed_result", "page_of"]

logger = logging.getLogger(__name__)

#: Resources one client connection follows at most (``resources/subscribe``).
MAX_PER_CONNECTION = 100
#: Resources one agent follows at most, over all its connections and listen streams (a bound
#: per caller: one agent subscribing in a loop cannot lock the others out).
MAX_PER_AGENT = 1_000
#: Resource URIs one ``subscriptions/listen`` stream subscribes upstream at most.
_MAX_LISTENED_URIS = 100
#: Seconds an upstream unsubscribe may take when a listen stream ends.
_RELEASE_GRACE = 10.0


def page_of(
    surface: McpSurface, kind: str, entries: list[dict[str, Any]], key: str, cursor: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``entries`` sorted by ``key``, after ``cursor`` (``-32602`` for a cursor
    this server did not write for ``kind``)."""
    try:
        after = None if cursor is None else decode_cursor(kind, cursor)
    except CursorError as error:
        raise MCPError(INVALID_PARAMS, f"Invalid {error.message}") from None
    entries = sorted(entries, key=lambda entry: str(entry[key]))
    ids = [str(entry[key]) for entry in entries]
    start, end, last = page_after(ids, after, surface.page_size)
    return entries[start:end], None if last is None else encode_cursor(kind, last)


def answer_failure(exc: Exception) -> MCPError:
    """The protocol error for a failed read or get (see the module)."""
    if isinstance(exc, (OfferingNotFound, OfferingAmbiguous)):
        return MCPError(INVALID_PARAMS, str(exc))
    if isinstance(exc, OfferingRefused):
        return MCPError(exc.mcp_code, str(exc))
    return MCPError(INTERNAL_ERROR, str(exc))


def listed_result(
    result: dict[str, Any], field: str, entries: list[dict[str, Any]], cursor: Any
) -> dict[str, Any]:
    result[field] = entries
    # The list depends on the caller and may change at any moment (2026-07-28 result fields).
    result.update({"ttlMs": 0, "cacheScope": "private", "resultType": "complete"})
    if cursor is not None:
        result["nextCursor"] = cursor
    return result


Key = tuple[str, str]
"""``(server, upstream URI)``: what a subscription is kept by."""


class McpResources:
    """The ``resources/*`` handlers of one MCP surface, and the notifications it relays."""

    LIST: Final = "mcp-resources"
    TEMPLATES: Final = "mcp-resource-templates"

    def __init__(self, surface: McpSurface) -> None:
        self.surface = surface
        self.offerings = surface.gateway.offerings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._upstream: dict[Key, int] = {}
        """Holds on each resource (connections' subscriptions and listen streams' URIs): the
        upstream is subscribed while there is one."""
        self._subscribers: dict[Key, dict[tuple[int, str], ServerSession]] = {}
        """Resource → the handshake-era sessions following it, by (connection, the URI as the
        client spelled it): an update is sent under each spelling (a session object is made
        per request; its connection lives as long as the client's)."""
        self._connections: dict[int, dict[str, tuple[Key, str | None] | None]] = {}
        """Connection → the URIs it subscribed (as spelled) → (resource, agent); ``None``
        while the subscribe is under way (a concurrent one is then a no-op)."""
        self._listened: dict[Key, dict[str, int]] = {}
        """Resource → the spellings listen streams follow it under, with their counts."""
        self._by_agent: dict[str | None, int] = {}
        """Holds per agent (:data:`MAX_PER_AGENT`)."""
        self._pending: set[Key] = set()
        self._pending_lock = threading.Lock()
        self._draining = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._unlisten: list[Callable[[], None]] = []
        server = surface.server
        server.add_request_handler("resources/list", PaginatedRequestParams, self._list)
        server.add_request_handler(
            "resources/templates/list", PaginatedRequestParams, self._templates
        )
        server.add_request_handler("resources/read", ReadResourceRequestParams, self._read)
        server.add_request_handler("resources/subscribe", SubscribeRequestParams, self._subscribe)
        server.add_request_handler(
            "resources/unsubscribe", UnsubscribeRequestParams, self._unsubscribe
        )
        # 2026-07-28 clients follow resources on their listen stream: subscribe upstream for
        # the stream's URIs, then serve it as the tool list changes do.
        server.add_request_handler(
            "subscriptions/listen", SubscriptionsListenRequestParams, self._listen
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Relay changes and updates on the running event loop."""
        self._loop = asyncio.get_running_loop()
        ref = weakref.ref(self)

        def changed() -> None:
            me = ref()
            if me is not None:
                me._hop(me._deliver_changes)

        def updated(server: str, uri: str) -> None:
            me = ref()
            if me is not None:
                me._updated((server, uri))

        self._unlisten = [
            self.offerings.on_change(changed),
            self.offerings.on_resource_updated(updated),
        ]

    def stop(self) -> None:
        """Stop relaying."""
        self._loop = None
        for unlisten in self._unlisten:
            unlisten()
        self._unlisten = []
        for task in list(self._tasks):
            task.cancel()

    def _hop(self, deliver: Callable[[], Any]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def schedule() -> None:
            task = loop.create_task(deliver())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(schedule)

    async def _deliver_changes(self) -> None:
        changes = self.surface.changes
        await changes.bus.publish(ResourcesListChanged())
        await changes.bus.publish(PromptsListChanged())
        for session in changes.sessions():
            try:
                await session.send_resource_list_changed()
                await session.send_prompt_list_changed()
            except Exception:
                logger.debug("could not notify an MCP session of a list change", exc_info=True)

    def _updated(self, key: Key) -> None:
        """An upstream's update (on the hub's thread): O(1), whatever the upstream sends."""
        if key not in self._upstream:
            return  # nobody follows it here (a flood of unasked updates stops at this check)
        with self._pending_lock:
            if key in self._pending:
                return  # one relay of it is due already
            self._pending.add(key)
            if self._draining:
                return
            self._draining = True
        self._hop(self._drain)

    async def _drain(self) -> None:
        while True:
            with self._pending_lock:
                keys = list(self._pending)
                self._pending.clear()
                if not keys:
                    self._draining = False
                    return
            for key in keys:
                await self._deliver_update(key)

    async def _deliver_update(self, key: Key) -> None:
        for spelling in list(self._listened.get(key, {})):
            await self.surface.changes.bus.publish(ResourceUpdated(spelling))
        for (_connection, spelling), session in list(self._subscribers.get(key, {}).items()):
            try:
                await session.send_resource_updated(spelling)
            except Exception:
                logger.debug("could not relay a resource update", exc_info=True)

    # -- handlers -------------------------------------------------------------------------------

    def _caller(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        surface = self.surface
        return {
            "agent": surface.agent(ctx),
            "namespaces": surface.namespaces(ctx),
        }

    async def _list(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> dict[str, Any]:
        entries = self.offerings.resources(**self._caller(ctx))
        page, cursor = page_of(self.surface, self.LIST, entries, "uri", params.cursor)
        return listed_result({}, "resources", page, cursor)

    async def _templates(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> dict[str, Any]:
        entries = self.offerings.templates(**self._caller(ctx))
        page, cursor = page_of(self.surface, self.TEMPLATES, entries, "uriTemplate", params.cursor)
        return listed_result({}, "resourceTemplates", page, cursor)

    async def _read(
        self, ctx: ServerRequestContext[Any, Any], params: ReadResourceRequestParams
    ) -> dict[str, Any]:
        try:
            return await self.offerings.read_resource(
                str(params.uri), session=self.surface.session_of(ctx), **self._caller(ctx)
            )
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None

    # -- following resources --------------------------------------------------------------------

    async def _acquire(self, ctx: ServerRequestContext[Any, Any], uri: str) -> Key:
        """Follow ``uri`` for this caller: checked against what it may see, subscribed
        upstream unless toolgate already is; the resource it names. Raises
        :func:`answer_failure`'s errors (``-32603`` past :data:`MAX_PER_AGENT`)."""
        caller = self._caller(ctx)
        agent: str | None = caller["agent"]
        session = self.surface.session_of(ctx)
        if self._by_agent.get(agent, 0) >= MAX_PER_AGENT:
            raise MCPError(
                INTERNAL_ERROR,
                f"this agent follows {MAX_PER_AGENT} resources already; unsubscribe from one",
            )
        try:
            key = self.offerings.locate_subscription(uri, session=session, **caller)
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None
        # Counted before the upstream answers, so a concurrent follower does not subscribe twice.
        self._by_agent[agent] = self._by_agent.get(agent, 0) + 1
        first = key not in self._upstream
        self._upstream[key] = self._upstream.get(key, 0) + 1
        if first:
            try:
                await self.offerings.subscribe_upstream(key, uri=uri, agent=agent, session=session)
            except BaseException as exc:
                self._drop(key, agent)
                if isinstance(exc, Exception):
                    raise answer_failure(exc) from None
                raise
        return key

    def _drop(self, key: Key, agent: str | None) -> bool:
        """Forget one hold on ``key``; whether it was the last."""
        held = self._by_agent.get(agent, 0) - 1
        if held > 0:
            self._by_agent[agent] = held
        else:
            self._by_agent.pop(agent, None)
        left = self._upstream.get(key, 0) - 1
        if left > 0:
            self._upstream[key] = left
            return False
        self._upstream.pop(key, None)
        return True

    async def _release(
        self, ctx: ServerRequestContext[Any, Any], key: Key, agent: str | None, uri: str
    ) -> None:
        """Undo one :meth:`_acquire` (no access check: the caller held it)."""
        if not self._drop(key, agent):
            return
        try:
            await self.offerings.subscribe_upstream(
                key, subscribe=False, uri=uri, agent=agent, session=self.surface.session_of(ctx)
            )
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        connection = _connection_of(ctx.session)
        conn = id(connection if connection is not None else ctx.session)
        mine = self._connections.get(conn)
        if mine is not None and uri in mine:
            return {}  # subscribed already (or being subscribed): once per connection
        if mine is not None and len(mine) >= MAX_PER_CONNECTION:
            raise MCPError(
                INTERNAL_ERROR,
                f"this connection follows {MAX_PER_CONNECTION} resources already; "
                "unsubscribe from one",
            )
        fresh = mine is None
        mine = self._connections.setdefault(conn, {})
        mine[uri] = None  # under way
        try:
            key = await self._acquire(ctx, uri)
        except BaseException:
            mine.pop(uri, None)
            if not mine and self._connections.get(conn) is mine:
                self._connections.pop(conn, None)
            raise
        agent = self._caller(ctx)["agent"]
        mine[uri] = (key, agent)
        self._subscribers.setdefault(key, {})[(conn, uri)] = ctx.session
        if fresh and connection is not None:
            # The client went away without unsubscribing: forget it, and release upstream.
            connection.exit_stack.push_async_callback(self._gone, conn, mine, ctx)
        return {}

    def _forget(self, conn: int, uri: str, key: Key) -> None:
        sessions = self._subscribers.get(key)
        if sessions is not None:
            sessions.pop((conn, uri), None)
            if not sessions:
                self._subscribers.pop(key, None)

    async def _gone(
        self,
        conn: int,
        mine: dict[str, tuple[Key, str | None] | None],
        ctx: ServerRequestContext[Any, Any],
    ) -> None:
        if self._connections.get(conn) is mine:
            self._connections.pop(conn, None)
        for uri, held in list(mine.items()):
            mine.pop(uri, None)
            if held is None:
                continue
            key, agent = held
            self._forget(conn, uri, key)
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(_RELEASE_GRACE),
                contextlib.suppress(Exception),
            ):
                await self._release(ctx, key, agent, uri)

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        connection = _connection_of(ctx.session)
        conn = id(connection if connection is not None else ctx.session)
        mine = self._connections.get(conn)
        held = None if mine is None else mine.get(uri)
        if mine is None or held is None:
            return {}  # not subscribed (or still subscribing): nothing to undo
        del mine[uri]
        if not mine and connection is None:
            self._connections.pop(conn, None)  # (with a connection, its close forgets it)
        key, agent = held
        self._forget(conn, uri, key)
        await self._release(ctx, key, agent, uri)
        return {}

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> Any:
        """A ``subscriptions/listen`` stream: its resource URIs this caller may see are
        followed upstream while it is open; the stream is served with those URIs only (one it
        may not see never fires, as the SDK's listen handler does for a URI nothing
        publishes)."""
        requested = params.notifications.resource_subscriptions or ()
        wanted = list(dict.fromkeys(requested))[:_MAX_LISTENED_URIS]
        agent = self._caller(ctx)["agent"]
        held: list[tuple[str, Key]] = []
        try:
            for uri in wanted:
                try:
                    key = await self._acquire(ctx, uri)
                except MCPError:
                    continue
                held.append((uri, key))
                spellings = self._listened.setdefault(key, {})
                spellings[uri] = spellings.get(uri, 0) + 1
            notifications = params.notifications.model_copy(
                update={"resource_subscriptions": [uri for uri, _key in held] or None}
            )
            served = params.model_copy(update={"notifications": notifications})
            return await self.surface.changes.listen(ctx, served)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_GRACE):
                for uri, key in held:
                    spellings = self._listened.get(key, {})
                    spellings[uri] = spellings.get(uri, 1) - 1
                    if spellings[uri] <= 0:
                        spellings.pop(uri, None)
                    if not spellings:
                        self._listened.pop(key, None)
                    with contextlib.suppress(MCPError):
                        await self._release(ctx, key, agent, uri)
