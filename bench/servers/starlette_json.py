"""The floor for the HTTP throughput bench: a bare Starlette JSON endpoint that adds two numbers.

python bench/servers/starlette_json.py PORT
"""

from __future__ import annotations

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def add(request: Request) -> JSONResponse:
    body = await request.json()
    arguments = body["arguments"]
    return JSONResponse({"content": arguments["a"] + arguments["b"]})


app = Starlette(routes=[Route("/add", add, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
