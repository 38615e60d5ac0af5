"""Shared pieces of the MCP server tests (no tests here): the tools served, the toolgate.yaml,
a real uvicorn server on a free loopback port, and bearer-key authentication."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import mcp_types as types
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request

from toolgate import Gateway
from toolgate.config import load_gateway
from toolgate.serve.mcp.http import McpHttp

T = TypeVar("T")

#: The tools every MCP test serves (namespace ``t``), written to a file toolgate.yaml names.
TOOLS_SOURCE = textwrap.dedent(
    '''\
    """Tools for the MCP server tests."""

    import os
    import sys
    from pathlib import Path

    from pydantic import BaseModel

    from toolgate import tool


    class Sum(BaseModel):
        total: int


    @tool(namespace="t", title="Add two integers", effect="read_only")
    def add(a: int, b: int) -> Sum:
        """Add two integers.

        Args:
            a: The first addend.
            b: The second addend.
        """
        return Sum(total=a + b)


    @tool(namespace="t", title="Send a message", effect="communication")
    def send(to: str, text: str) -> str:
        """Send a message to someone (needs a person's approval)."""
        with Path(os.environ["MCP_TEST_RUNS"]).open("a", encoding="utf-8") as runs:
            runs.write(f"{to}:{text}\\n")
        return f"sent to {to}"


    @tool(namespace="t", title="Bob's secret", effect="read_only", allowed_agents=["bob"])
    def secret() -> str:
        """Only bob may call this."""
        return "only bob sees this"


    @tool(namespace="t", title="Count words", effect="read_only")
    def words(text: str) -> dict:
        """Count words, with a visualization for people."""
        return {
            "words": len(text.split()),
            "_visualization": {"type": "none", "message": "VISUALIZATION-FOR-PEOPLE"},
        }


    @tool(namespace="t", title="Noisy", effect="read_only")
    def noisy() -> str:
        """Prints to stdout, as careless tools do."""
        print("stray print on stdout")
        sys.stdout.flush()
        os.write(1, b"stray bytes on file descriptor 1\\n")
        return "still fine"
    '''
)


def write_config(
    folder: Path, *, demo: bool = False, extra: str = "", tools: str = TOOLS_SOURCE
) -> Path:
    """Write the tools file and a toolgate.yaml serving it into ``folder``; return the yaml."""
    (folder / "mcp_test_tools.py").write_text(tools, encoding="utf-8")
    config = folder / "toolgate.yaml"
    config.write_text(
        "python:\n  - module: ./mcp_test_tools.py\n"
        + ("demo: true\n" if demo else "")
        + "agents:\n  alice: {}\n  bob: {}\n"
        + extra,
        encoding="utf-8",
    )
    return config


def runs(path: Path) -> list[str]:
    """The lines ``t:send`` wrote: one per time it really ran."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


KEYS = {"alice-key": "alice", "bob-key": "bob"}


def authenticate(request: Request) -> str:
    """The test's identity helper: ``Authorization: Bearer <key>`` names the agent, else 401."""
    header = request.headers.get("authorization", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or key not in KEYS:
        raise HTTPException(401, "unknown API key", headers={"WWW-Authenticate": "Bearer"})
    return KEYS[key]


def bearer(key: str) -> httpx2.AsyncClient:
    """An HTTP client that presents ``key``."""
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)


class McpHttpServer:
    """``McpHttp`` at ``/mcp`` under a real uvicorn on 127.0.0.1, in a thread of its own."""

    def __init__(self, gateway: Gateway, **options: Any) -> None:
        self.gateway = gateway
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.mcp = McpHttp(
            gateway,
            authenticate=options.pop("authenticate", authenticate),
            approvals_url=f"http://127.0.0.1:{self.port}",
            **options,
        )
        self.loop: asyncio.AbstractEventLoop | None = None

        @contextlib.asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            self.loop = asyncio.get_running_loop()
            await gateway.start()  # watch the tool folders, as `toolgate serve` does
            async with self.mcp.lifespan():
                yield

        app = Starlette(routes=[self.mcp.route("/mcp")], lifespan=lifespan)
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                timeout_graceful_shutdown=5,
            )
        )
        self.thread = threading.Thread(target=self.server.run, name="mcp-test-server")

    def __enter__(self) -> McpHttpServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the test server did not stop"

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's event loop (where the gateway serves) and await it."""
        assert self.loop is not None
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wrap_future(future)


@contextlib.contextmanager
def configured_server(
    tmp_path: Path, monkeypatch: Any, *, demo: bool = False, **options: Any
) -> Iterator[McpHttpServer]:
    """The configured gateway (toolgate.yaml + $TOOLGATE_HOME, as ``toolgate serve`` builds it)
    behind a test server."""
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True, exist_ok=True)
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    config = write_config(project, demo=demo)
    monkeypatch.setenv("MCP_TEST_RUNS", str(tmp_path / "runs.txt"))
    gateway = load_gateway(config, environ={"TOOLGATE_HOME": str(home)})
    try:
        with McpHttpServer(gateway, **options) as server:
            yield server
    finally:
        gateway.close()


def answer_with(
    choice: str | None, seen: list[types.ElicitRequestParams] | None = None
) -> Callable[[Any, types.ElicitRequestParams], Awaitable[types.ElicitResult]]:
    """An elicitation callback: the user picks ``choice`` (a decision value), or ``"decline"`` /
    ``"cancel"``; every form shown is appended to ``seen``."""

    async def callback(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        if seen is not None:
            seen.append(params)
        if choice in ("decline", "cancel"):
            return types.ElicitResult(action=choice)
        return types.ElicitResult(action="accept", content={"decision": choice})

    return callback


def approval_meta(result: types.CallToolResult) -> Mapping[str, Any]:
    """The ``toolgate/approval`` entry of a pending result's ``_meta``."""
    meta = result.meta or {}
    entry = meta.get("toolgate/approval")
    assert isinstance(entry, dict), f"no approval in {result}"
    return entry


def text_of(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))
