"""The operator's review of upstream definitions: the MCP servers a gateway declares, what each
lists now (accepted or held, and why), and accepting a held tool's definition.

:class:`GatewayUpstreams` is mixed into :class:`~toolgate.gateway.Gateway`, which builds the
registry and the declaration sources these read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from .formats.declarations import DeclarationSource, SourceSet
from .registry import Registry

if TYPE_CHECKING:
    from .formats.mcp_server.pinning import ToolReview
    from .formats.mcp_server.source import McpServers

__all__ = ["GatewayUpstreams"]


class GatewayUpstreams:
    """Reviewing and accepting what upstreams declare (see the module docstring)."""

    registry: Registry
    declarations: SourceSet

    def mcp_servers(self) -> dict[str, tuple[DeclarationSource, McpServers]]:
        """Every declared MCP server by name, with its source (the first declaration of a name
        wins, as when its tools are registered)."""
        found: dict[str, tuple[DeclarationSource, McpServers]] = {}
        for source in self.declarations.sources:
            servers = source.mcp_servers()
            if servers is None:
                continue
            for name in servers.server_names():
                found.setdefault(name, (source, servers))
        return found

    def _mcp_server(self, server: str) -> tuple[DeclarationSource, McpServers]:
        from .formats.mcp_server.source import AcceptError

        found = self.mcp_servers()
        if server not in found:
            known = ", ".join(sorted(found)) or "none"
            raise AcceptError(f"no MCP server {server!r} is declared (declared: {known})")
        return found[server]

    def review_mcp_server(self, server: str) -> dict[str, ToolReview]:
        """Each tool the MCP server lists now: accepted or held, why, and what it says.
        Raises :class:`~toolgate.formats.mcp_server.source.AcceptError` (an unknown server, one that
        has not listed its tools yet)."""
        return self._mcp_server(server)[1].review(server)

    def accept_mcp_tools(
        self,
        server: str,
        tools: Iterable[str] = (),
        *,
        by: str | None,
        expected: Mapping[str, str] | None = None,
    ) -> list[ToolReview]:
        """Accept the definitions an MCP server lists now for ``tools`` (names on the server;
        none: every held tool) and apply it at once; returns what was accepted. ``expected``:
        tool → the definition hash the operator reviewed (refused if it changed since).
        Raises :class:`~toolgate.formats.mcp_server.source.AcceptError` naming what is wrong."""
        source, servers = self._mcp_server(server)
        accepted = servers.accept(server, list(tools), by=by, expected=expected)
        if accepted:
            self.declarations.reload(source)
        return accepted

    def accept_tool(self, tool_id: str, *, by: str | None, expected: str | None = None) -> str:
        """Accept a held tool at the definition its source declares now: a tool of an MCP
        server (new, changed or with hidden text; see :meth:`accept_mcp_tools`) or a plugin's
        or capability's tool held for hidden text. ``expected``: the definition hash the
        operator reviewed. Returns the accepted hash; raises
        :class:`~toolgate.formats.mcp_server.source.AcceptError` naming what is wrong."""
        from .formats.mcp_server.source import AcceptError
        from .model import McpEntry

        entry = self.registry.get(tool_id)
        if entry is None:
            raise AcceptError(f"no tool {tool_id!r} is registered")
        if isinstance(entry.tool.entry, McpEntry):
            server, remote = entry.tool.entry.server, entry.tool.entry.remote_name
            accepted = self.accept_mcp_tools(
                server, [remote], by=by, expected=None if expected is None else {remote: expected}
            )
            return accepted[0].definition_hash
        try:
            return self.declarations.accept(entry.tool.id, by=by, expected=expected).definition_hash
        except LookupError as exc:
            raise AcceptError(str(exc)) from None
