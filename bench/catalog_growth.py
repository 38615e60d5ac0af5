"""What listing the catalog costs as it grows: 100, 1,000 and 10,000 Python-function tools.

    python bench/catalog_growth.py                    # ~1-2 min on a small machine
    python bench/catalog_growth.py --sizes 100,1000 --runs 3

For each size, one gateway holding that many ``@tool`` functions (ten namespaces, three
parameters each, a docstring with argument descriptions) and an SQLite audit log with a few
calls in it (health figures are read from it), served in-process:

* **MCP tools/list, first page** — a 2026-07-28 ``tools/list`` JSON-RPC POST to the gateway's
  streamable-HTTP MCP endpoint (what the server costs: no client parses the answer);
* **MCP tools/list, full walk** — the same POST again and again, following ``nextCursor`` until
  there is none (one request when the whole list fits one page);
* **MCP SDK client, full walk** — the official ``mcp`` SDK client (in-memory transport, the
  handshake-era protocol) doing that walk: the server's cost plus the client's, which validates
  every entry into its pydantic models;
* **GET /v1/tools, first page** — the HTTP API (``?limit=200``; a gateway without paging
  refuses the parameter, and is then asked for ``/v1/tools``: every tool);
* **web /, first page** — the web UI's catalog page.

Each figure is the median of ``--runs`` runs after one warm-up run (the first request builds
caches: the MCP entries, the search index), and the bytes of the answer (for the walk: of all
its pages). The HTTP API and web UI go through Starlette's test client (no socket). Absolute
times depend on the machine and its load; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from toolgate import AuditSettings, Gateway, GatewaySettings, tool


def _make_tool(index: int) -> Any:
    def handler(query: str, limit: int = 10, exact: bool = False) -> list[str]:
        return [query][:limit]

    handler.__name__ = f"find_{index:05d}"
    handler.__doc__ = (
        f"Find records of kind {index} matching a query.\n\n"
        "Args:\n"
        "    query: Words to look for.\n"
        "    limit: How many records to return at most.\n"
        "    exact: Match the whole query only.\n"
    )
    return tool(handler, namespace=f"area{index % 10}", effect="read_only")


@contextmanager
def _gateway(size: int) -> Iterator[Gateway]:
    with tempfile.TemporaryDirectory(prefix="toolgate-growth-") as folder:
        gateway = Gateway(GatewaySettings(audit=AuditSettings(path=Path(folder) / "audit.db")))
        gateway.add([_make_tool(index) for index in range(size)])
        for index in range(min(size, 20)):
            gateway.call_sync(f"area{index % 10}:find_{index:05d}", {"query": "x"})
        if gateway.audit is not None:
            gateway.audit.flush(5.0)
        try:
            yield gateway
        finally:
            gateway.close()


def _timed(runs: int, action: Callable[[], int]) -> tuple[float, int]:
    """Median seconds of ``runs`` runs (after a warm-up) and the bytes the last one answered."""
    size = action()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        size = action()
        times.append(time.perf_counter() - start)
    return statistics.median(times), size


async def _mcp(gateway: Gateway, runs: int) -> tuple[tuple[float, int], tuple[float, int], int]:
    from mcp import Client

    from toolgate.serve.mcp.server import build_mcp_server

    surface = build_mcp_server(gateway, agent="bench")
    pages = 0

    async with Client(surface.server, mode="legacy") as client:

        async def first() -> int:
            result = await client.list_tools()
            return len(result.model_dump_json(by_alias=True, exclude_none=True))

        async def walk() -> int:
            nonlocal pages
            total, cursor, pages = 0, None, 0
            while True:
                result = await client.list_tools(cursor=cursor)
                pages += 1
                total += len(result.model_dump_json(by_alias=True, exclude_none=True))
                cursor = result.next_cursor
                if cursor is None:
                    return total

        async def timed(action: Callable[[], Any]) -> tuple[float, int]:
            size = await action()
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                size = await action()
                times.append(time.perf_counter() - start)
            return statistics.median(times), size

        return await timed(first), await timed(walk), pages


_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
_MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/list",
}


def _mcp_http(gateway: Gateway, runs: int) -> tuple[tuple[float, int], tuple[float, int], int]:
    """``tools/list`` POSTs to the MCP endpoint: the first page, and a walk to the end."""
    from contextlib import asynccontextmanager

    from starlette.applications import Starlette

    from toolgate.serve.mcp.http import McpHttp

    mcp = McpHttp(gateway, authenticate=lambda _request: "bench")

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> Any:
        async with mcp.lifespan():
            yield

    app = Starlette(routes=[mcp.route("/mcp")], lifespan=lifespan)
    pages = 0
    # A port in the Host header: the endpoint's DNS-rebinding check wants a loopback host:port.
    with TestClient(app, base_url="http://127.0.0.1:8470") as http:

        def page(cursor: str | None) -> tuple[int, str | None]:
            params: dict[str, Any] = {"_meta": _ENVELOPE}
            if cursor is not None:
                params["cursor"] = cursor
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}
            response = http.post("/mcp", headers=_MCP_HEADERS, json=body)
            response.raise_for_status()
            result = response.json()["result"]
            return len(response.content), result.get("nextCursor")

        def first() -> int:
            return page(None)[0]

        def walk() -> int:
            nonlocal pages
            total, cursor, pages = 0, None, 0
            while True:
                size, cursor = page(cursor)
                total += size
                pages += 1
                if cursor is None:
                    return total

        return _timed(runs, first), _timed(runs, walk), pages


def _row(size: int, runs: int) -> dict[str, Any]:
    from toolgate.serve.app import build_app
    from toolgate.serve.web import build_ui

    with _gateway(size) as gateway:
        first, walk, pages = _mcp_http(gateway, runs)
        _, sdk_walk, _ = asyncio.run(_mcp(gateway, runs))
        app = build_app(
            gateway,
            authenticate=lambda _connection: "bench",
            ui=build_ui(gateway, require_operator=lambda _request: "bench", allowed_hosts=None),
            manage_gateway=False,
        )
        with TestClient(app, base_url="http://127.0.0.1") as http:

            def api() -> int:
                response = http.get("/v1/tools", params={"limit": 200})
                if response.status_code == 422:  # a gateway without paging: every tool
                    response = http.get("/v1/tools")
                response.raise_for_status()
                return len(response.content)

            def web() -> int:
                response = http.get("/")
                response.raise_for_status()
                return len(response.content)

            return {
                "tools": size,
                "mcp_first": first,
                "mcp_walk": walk,
                "mcp_pages": pages,
                "sdk_walk": sdk_walk,
                "api_first": _timed(runs, api),
                "web_first": _timed(runs, web),
            }


def _kb(size: int) -> str:
    return f"{size / 1024:,.0f} KiB" if size >= 1024 else f"{size} B"


def _render(rows: list[dict[str, Any]]) -> str:
    head = (
        "| tools | MCP first page | MCP full walk (pages) | MCP SDK client full walk "
        "| GET /v1/tools first page | web / first page |"
    )
    lines = [head, "|---:|---|---|---|---|---|"]
    for row in rows:
        cells = [f"{row['tools']:,}"]
        for key in ("mcp_first", "mcp_walk", "sdk_walk", "api_first", "web_first"):
            seconds, size = row[key]
            cell = f"{seconds * 1000:,.1f} ms, {_kb(size)}"
            if key == "mcp_walk":
                cell += f" ({row['mcp_pages']})"
            cells.append(cell)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="catalog sizes, by commas")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    options = parser.parse_args(argv)
    sizes = [int(part) for part in options.sizes.split(",") if part.strip()]
    rows = []
    for size in sizes:
        print(f"catalog of {size:,} tools…", file=sys.stderr, flush=True)
        rows.append(_row(size, options.runs))
    print(json.dumps(rows) if options.json else _render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
