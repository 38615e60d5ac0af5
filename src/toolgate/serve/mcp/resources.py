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
* ``resources/subscribe`` / ``resources/unsubscribe`` (handshake-era clients; the 2026-07-28
  protocol has no such pair) — subscribe on the upstream, and relay its
  ``notifications/resources/updated`` to every client session subscribed to that URI.
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

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ResourcesListChanged
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from ...backends.mcp_offerings import OfferingRefused
from ...offerings import OfferingAmbiguous, OfferingNotFound
from ..paging import CursorError, decode_cursor, encode_cursor, page_after

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

    from .server import McpSurface

__all__ = ["McpResources", "answer_failure", "listed_result", "page_of"]

logger = logging.getLogger(__name__)

#: Sessions subscribed to one URI at most (a bound when a client subscribes in a loop).
_MAX_SUBSCRIBERS = 1000


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
        self._subscribers: dict[str, weakref.WeakSet[ServerSession]] = {}
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
        for session in list(self._subscribers.get(uri, ())):
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

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        try:
            await self.offerings.subscribe(
                uri, session=self.surface.session_of(ctx), **self._caller(ctx)
            )
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None
        sessions = self._subscribers.setdefault(uri, weakref.WeakSet())
        if len(sessions) < _MAX_SUBSCRIBERS:
            sessions.add(ctx.session)
        return {}

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> dict[str, Any]:
        uri = str(params.uri)
        sessions = self._subscribers.get(uri)
        if sessions is not None:
            sessions.discard(ctx.session)
            if sessions:
                return {}  # other sessions still follow it upstream
            self._subscribers.pop(uri, None)
        try:
            await self.offerings.subscribe(
                uri, subscribe=False, session=self.surface.session_of(ctx), **self._caller(ctx)
            )
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None
        return {}
