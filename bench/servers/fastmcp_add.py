"""The FastMCP peer for the HTTP throughput bench: one trivial tool over stateless streamable HTTP.

python bench/servers/fastmcp_add.py PORT
"""

from __future__ import annotations

import sys

from fastmcp import FastMCP

mcp = FastMCP("bench-peer")


@mcp.tool
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    # Stateless with JSON responses: every tools/call is one self-contained POST, the cheapest
    # streamable-HTTP setup the peer offers (the same one toolgate is measured in).
    mcp.run(
        transport="http",
        host="127.0.0.1",
        port=int(sys.argv[1]),
        stateless_http=True,
        json_response=True,
        show_banner=False,
        log_level="warning",
    )
