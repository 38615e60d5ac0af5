"""The upstream REST endpoint of the upstream bench: ``POST /add`` with ``{"a": 1, "b": 2}``
answers ``{"sum": 3}`` (Starlette on uvicorn, one process).

    python bench/servers/rest_upstream.py PORT

``GET /stats`` returns how many TCP connections it accepted (distinct client address/port
pairs), so a test can see that toolgate reused one connection for many calls.
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CONNECTIONS: set[tuple[str, int]] = set()


def _count(request: Request) -> None:
    if request.client is not None:
        CONNECTIONS.add((request.client.host, request.client.port))


async def add(request: Request) -> JSONResponse:
    _count(request)
    body = await request.json()
    return JSONResponse({"sum": body["a"] + body["b"]})


async def stats(request: Request) -> JSONResponse:
    return JSONResponse({"connections": len(CONNECTIONS)})


app = Starlette(routes=[Route("/add", add, methods=["POST"]), Route("/stats", stats)])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
