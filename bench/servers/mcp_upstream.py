"""The upstream MCP server of the upstream bench: one trivial tool over streamable HTTP, with the
official ``mcp`` SDK.

    python bench/servers/mcp_upstream.py PORT stateless   # every request self-contained
    python bench/servers/mcp_upstream.py PORT session     # initialize first, Mcp-Session-Id after

The session mode speaks only the handshake-era revisions (a 2026-07-28 request is refused with
HTTP 400, as an older server does), so every client — toolgate too — opens a session with it.

Both answer with JSON (no SSE stream per request), the cheapest setup of the SDK's server. The
server counts the TCP connections it accepted and the sessions it started; ``GET /stats`` returns
them, so a test can see that a client reused one connection (and one session) for many calls.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.responses import JSONResponse

server = MCPServer("bench-upstream", log_level="WARNING")


@server.tool()
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Counted:
    """ASGI middleware: counts connections (distinct ``client`` address/port pairs) and the
    session ids the server handed out."""

    def __init__(self, app: Any, handshake_only: bool) -> None:
        self.app = app
        self.handshake_only = handshake_only
        self.connections: set[tuple[str, int]] = set()
        self.sessions: set[str] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("client"):
            self.connections.add(tuple(scope["client"]))  # type: ignore[arg-type]
        if scope["path"] == "/stats":
            reply = {"connections": len(self.connections), "sessions": len(self.sessions)}
            await JSONResponse(reply)(scope, receive, send)
            return

        if self.handshake_only and _modern(scope):
            await _refuse_modern(scope, receive, send)
            return

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.lower() == b"mcp-session-id":
                        self.sessions.add(value.decode())
            await send(message)

        await self.app(scope, receive, counting_send)


def app(stateless: bool) -> Counted:
    """The server's ASGI app (``/mcp``), wrapped in the counting middleware."""
    mcp = server.streamable_http_app(stateless_http=stateless, json_response=True)
    return Counted(mcp, handshake_only=not stateless)


def _modern(scope: Any) -> bool:
    """A request of the sessionless revision (2026-07-28), by its protocol version header."""
    for key, value in scope["headers"]:
        if key.lower() == b"mcp-protocol-version":
            return value.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS
    return False


async def _refuse_modern(scope: Any, receive: Any, send: Any) -> None:
    """What a server of the handshake era answers a version it does not know: HTTP 400. The
    client then falls back to ``initialize``, and so to a session."""
    error = {"code": -32600, "message": "Unsupported protocol version"}
    reply = {"jsonrpc": "2.0", "id": None, "error": error}
    await JSONResponse(reply, status_code=400)(scope, receive, send)


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode not in ("stateless", "session"):
        raise SystemExit("mode: stateless or session")
    uvicorn.run(
        app(mode == "stateless"),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )
