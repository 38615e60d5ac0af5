"""MCP ``prompts/list`` and ``prompts/get``: the upstream servers' prompts, named like tools
(``<namespace>__<name>``), and toolgate's own (a capability's guide, ``<namespace>__guide``).

Who sees which prompt, and the audit of every get: :class:`toolgate.offerings.GatewayOfferings`.
``prompts/list`` pages like ``tools/list``, sorted by name. A prompt the caller may not see, or
that does not exist, is ``-32602``; the upstream's own MCP errors keep their code; a server that
is down is ``-32603`` with the reason. List changes: :mod:`.resources` sends both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from mcp.server.context import ServerRequestContext
from mcp_types import GetPromptRequestParams, PaginatedRequestParams

from .resources import answer_failure, listed_result, page_of

if TYPE_CHECKING:
    from .server import McpSurface

__all__ = ["McpPrompts"]


class McpPrompts:
    """The ``prompts/*`` handlers of one MCP surface."""

    LIST: Final = "mcp-prompts"

    def __init__(self, surface: McpSurface) -> None:
        self.surface = surface
        self.offerings = surface.gateway.offerings
        surface.server.add_request_handler("prompts/list", PaginatedRequestParams, self._list)
        surface.server.add_request_handler("prompts/get", GetPromptRequestParams, self._get)

    async def _list(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> dict[str, Any]:
        surface = self.surface
        entries = self.offerings.prompts(
            agent=surface.agent(ctx), namespaces=surface.namespaces(ctx)
        )
        page, cursor = page_of(surface, self.LIST, entries, "name", params.cursor)
        return listed_result({}, "prompts", page, cursor)

    async def _get(
        self, ctx: ServerRequestContext[Any, Any], params: GetPromptRequestParams
    ) -> dict[str, Any]:
        surface = self.surface
        try:
            return await self.offerings.get_prompt(
                params.name,
                params.arguments,
                agent=surface.agent(ctx),
                namespaces=surface.namespaces(ctx),
                session=surface.session_of(ctx),
            )
        except Exception as exc:  # noqa: BLE001 - every failure is answered as an MCP error
            raise answer_failure(exc) from None
