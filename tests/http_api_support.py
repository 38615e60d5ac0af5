"""What the HTTP API tests share: tools, agents and their keys, a configured gateway, and a real
uvicorn server on 127.0.0.1 (a free port) running in a thread."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi.testclient import TestClient

from gateway_support import gateway_with
from toolgate import Gateway, ToolError, tool
from toolgate.secrets import MemorySecretStore
from toolgate.serve.app import ServeApp, build_app
from toolgate.serve.auth.identity import AgentIdentity, key_sha256

FIXTURES = Path(__file__).parent / "fixtures"
GITHUB = FIXTURES / "capabilities" / "github"
SEARCH_PLUGIN = FIXTURES / "plugins" / "search"

#: Every call that actually ran (so tests can tell a pending call did not).
RUNS: list[dict[str, Any]] = []

# Keys of the test agents: ops is an operator, alice and bob are agents.
OPS_KEY = "tg_ops-key-0123456789abcdefghijklmnopqrstuvwxyz"
ALICE_KEY = "tg_alice-key-0123456789abcdefghijklmnopqrstuvwxyz"
BOB_KEY = "tg_bob-key-0123456789abcdefghijklmnopqrstuvwxyz"
KEYS = {"ops": OPS_KEY, "alice": ALICE_KEY, "bob": BOB_KEY}


#: The client address TestClient reports (a loopback one, as for a local agent).
LOCAL = ("127.0.0.1", 50000)
PROBLEM = "application/problem+json"


def auth(agent: str) -> dict[str, str]:
    """The Authorization header of a test agent."""
    return {"Authorization": f"Bearer {KEYS[agent]}"}


def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """Check ``response`` is an RFC 9457 problem with this status and code; return it."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["type"] == f"urn:toolgate:problem:{code}"
    assert body["title"] and body["detail"]
    return body


def call(client: TestClient, agent: str, tool_id: str, **arguments: Any) -> Any:
    return client.post(
        f"/v1/tools/{tool_id}/call", json={"arguments": arguments}, headers=auth(agent)
    )


@tool(namespace="t", effect="read_only", title="Add two numbers")
def add(a: int, b: int) -> int:
    """Add two integers."""
    RUNS.append({"tool": "add", "a": a, "b": b})
    return a + b


@tool(namespace="t", effect="external_write", title="Send a message", examples=["tell Ada hi"])
def send(to: str, text: str) -> dict[str, Any]:
    """Send a message (needs a person's approval)."""
    RUNS.append({"tool": "send", "to": to, "text": text})
    return {"sent": True, "to": to}


@tool(namespace="t", effect="read_only")
def fail() -> str:
    """Always fails."""
    raise ToolError("the backend is down; try again later")


@tool(namespace="t", effect="read_only", allowed_agents=["alice", "ops"])
def payroll() -> dict[str, int]:
    """Only alice and ops may call this."""
    return {"total": 42}


@tool(namespace="t", effect="read_only", timeout=0.5)
async def sleepy(seconds: float = 30.0) -> str:
    """Sleeps (longer than its timeout by default)."""
    await asyncio.sleep(seconds)
    return "awake"


@tool(namespace="t", effect="external_write", title="Slow deploy")
async def deploy(seconds: float = 30.0) -> str:
    """Needs approval, then takes its time."""
    await asyncio.sleep(seconds)
    return "deployed"


@tool(namespace="t", effect="read_only")
def odd_numbers() -> dict[str, Any]:
    """Returns values JSON cannot carry as they are."""
    return {
        "nan": float("nan"),
        "inf": float("inf"),
        "text": "<script>alert(1)</script>",
        "half": "a lone surrogate: \ud800",  # no UTF-8 text can hold it
    }


TOOLS = [add, send, fail, payroll, sleepy, deploy, odd_numbers]


def make_identity(**options: Any) -> AgentIdentity:
    """ops (operator), alice and bob, with keys from toolgate.yaml."""
    return AgentIdentity(
        labels={"ops": {"role": "operator"}, "alice": {"team": "core"}},
        config_keys={name: key_sha256(key) for name, key in KEYS.items()},
        **options,
    )


def make_gateway(tmp_path: Path, **options: Any) -> Gateway:
    """The test tools, a broken tool folder (a diagnostic and a Failed status), the GitHub
    capability (not connected; secrets in memory) and the search plugin (a warning alert)."""
    tools = tmp_path / "tool-folders"
    (tools / "broken").mkdir(parents=True, exist_ok=True)
    (tools / "broken" / "tool.md").write_text("---\nname: [unclosed\n---\nBroken.\n")
    environ = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    options.setdefault("approver", "queue")
    gateway = gateway_with(
        state_path=tmp_path / "state.db",
        audit_path=tmp_path / "audit.db",
        tool_folders=[tools],
        secret_store=MemorySecretStore(),
        environ=environ,
        **options,
    )
    gateway.add(TOOLS)
    gateway.add_source(GITHUB)
    gateway.add_source(SEARCH_PLUGIN, options={"config": {"searchBackend": "brave"}})
    return gateway


def make_app(gateway: Gateway, identity: AgentIdentity | None = None, **options: Any) -> ServeApp:
    identity = identity or make_identity()
    return build_app(
        gateway, authenticate=identity.authenticate, is_operator=identity.is_operator, **options
    )


class LiveServer:
    """An ASGI app served by uvicorn on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(
            uvicorn.Config(
                app,
                interface="asgi3",
                lifespan="on",
                log_level="warning",
                proxy_headers=False,
                timeout_graceful_shutdown=5,
            )
        )
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])),
            name="uvicorn-test",
            daemon=True,
        )

    def start(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 60  # a hang guard, not a performance bound
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()
        assert not self.thread.is_alive(), "uvicorn did not stop"


@contextmanager
def live_server(app: Any) -> Iterator[LiveServer]:
    """Serve ``app`` for the duration of the block; it is stopped (and joined) afterwards."""
    server = LiveServer(app).start()
    try:
        yield server
    finally:
        server.stop()
