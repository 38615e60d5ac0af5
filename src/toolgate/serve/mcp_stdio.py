"""MCP over stdio: what ``toolgate mcp`` runs for desktop and IDE agents.

Nothing but protocol reaches stdout: the SDK's stdio transport serves the wire from a private
duplicate of the original stdout and points file descriptor 1 at stderr while it runs, so a
Python tool that prints, or a child process that writes to its inherited stdout, lands on stderr
instead of corrupting the stream. Logging goes to stderr.
"""

from __future__ import annotations

import uuid

from mcp.server.stdio import stdio_server

from ..gateway import Gateway
from .mcp_server import build_mcp_server

__all__ = ["serve_stdio"]


async def serve_stdio(
    gateway: Gateway,
    *,
    agent: str | None = None,
    approvals_url: str | None = None,
    elicitation: bool = True,
) -> None:
    """Serve ``gateway`` over this process's stdin and stdout until the client closes stdin.

    Watches the tool folders (hot reload) while serving, and tells the client when the tool list
    changes. Every call is made as ``agent`` (``None``: the default agent).
    """
    surface = build_mcp_server(
        gateway,
        agent=agent,
        approvals_url=approvals_url,
        elicitation=elicitation,
        # One client per process: its calls share one session (overflow files, scripts' sessionId).
        session_id=f"mcp-{uuid.uuid4().hex[:12]}",
    )
    server = surface.server
    await gateway.start()
    surface.start()
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        surface.stop()
