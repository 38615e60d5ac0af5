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
  pair) — the upstream is subscribed while any session or stream follows the URI, and its
  ``notifications/resources/updated`` is relayed to each of them.
* ``notifications/resources/list_changed`` (and ``prompts/list_changed``, see
  :mod:`.prompts`) to every live client when an upstream's listing or availability changes;
  2026-07-28 clients get them on their ``subscriptions/listen`` stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
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

#: Sessions subscribed to one URI at most (a bound when a client subscribes in a loop).
_MAX_SUBSCRIBERS = 1000
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


class McpResources:
    """The ``resources/*`` handlers of one MCP surface, and the notifications it relays."""

    LIST: Final = "mcp-resources"
    TEMPLATES: Final = "mcp-resource-templates"

    def __init__(self, surface: McpSurface) -> None:
        self.surface = surface
        self.offerings = surface.gateway.offerings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscribers: dict[str, dict[int, ServerSession]] = {}
        """URI → the handshake-era sessions subscribed to it, by connection (a session object
        is made per request; its connection lives as long as the client's)."""
        self._upstream: dict[str, int] = {}
        """URI (as shown) → subscriptions toolgate holds for it: the upstream is subscribed
        while any session or listen stream follows it."""
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

        def updated(uri: str) -> None:
            me = ref()
            if me is not None:
                me._hop(lambda: me._deliver_update(uri))

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

    async def _deliver_update(self, uri: str) -> None:
        await self.surface.changes.bus.publish(ResourceUpdated(uri))
        for session in list(self._subscribers.get(uri, {}).values()):
            try:
                await session.send_resource_updated(uri)
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

    async def _acquire(self, ctx: ServerRequestContext[Any, Any], uri: str) -> None:
        """Follow ``uri`` for this caller: subscribed upstream unless toolgate already is.
        Raises :func:`answer_failure`'s errors."""
        try:
            if self._upstream.get(uri, 0) == 0:
                await self.offerings.subscribe(
                    uri, session=self.surface.session_of(ctx), **self._caller(ctx)
                )
            else:
                # Already followed upstream: still only for a caller that may see it.
                self.offerings.check_resource(uri, **self._caller(ctx))
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None
        self._upstream[uri] = self._upstream.get(uri, 0) + 1

    async def _release(self, ctx: ServerRequestContext[Any, Any], uri: str) -> None:
        left = self._upstream.get(uri, 0) - 1
        if left > 0:
            self._upstream[uri] = left
            return
        self._upstream.pop(uri, None)
        try:
            await self.offerings.subscribe(
                uri, subscribe=False, session=self.surface.session_of(ctx), **self._caller(ctx)
            )
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        sessions = self._subscribers.setdefault(uri, {})
        connection = _connection_of(ctx.session)
        key = id(connection if connection is not None else ctx.session)
        if key in sessions:
            return {}  # subscribed already: once per connection
        if len(sessions) >= _MAX_SUBSCRIBERS:
            raise MCPError(INTERNAL_ERROR, f"too many sessions follow {uri!r}")
        await self._acquire(ctx, uri)
        sessions[key] = ctx.session
        if connection is not None:
            # The client went away without unsubscribing: forget it, and release upstream.
            connection.exit_stack.push_async_callback(self._gone, uri, key, ctx)
        return {}

    async def _gone(self, uri: str, key: int, ctx: ServerRequestContext[Any, Any]) -> None:
        sessions = self._subscribers.get(uri)
        if sessions is None or sessions.pop(key, None) is None:
            return
        if not sessions:
            self._subscribers.pop(uri, None)
        with (
            anyio.CancelScope(shield=True),
            anyio.move_on_after(_RELEASE_GRACE),
            contextlib.suppress(Exception),
        ):
            await self._release(ctx, uri)

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        sessions = self._subscribers.get(uri)
        connection = _connection_of(ctx.session)
        key = id(connection if connection is not None else ctx.session)
        if sessions is None or sessions.pop(key, None) is None:
            return {}  # not subscribed: nothing to undo
        if not sessions:
            self._subscribers.pop(uri, None)
        await self._release(ctx, uri)
        return {}

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> Any:
        """A ``subscriptions/listen`` stream: its resource URIs this caller may see are
        followed upstream while it is open (others simply never fire, as the SDK's listen
        handler does for a URI nothing publishes)."""
        wanted = list(params.notifications.resource_subscriptions or ())[:_MAX_LISTENED_URIS]
        held: list[str] = []
        try:
            for uri in wanted:
                try:
                    await self._acquire(ctx, uri)
                except MCPError:
                    continue
                held.append(uri)
            return await self.surface.changes.listen(ctx, params)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_RELEASE_GRACE):
                for uri in held:
                    with contextlib.suppress(MCPError):
                        await self._release(ctx, uri)
