"""Helpers for the web UI tests: a real uvicorn server on a free loopback port, a gateway with the
demo tools plus a few tools made for these tests, and a capability to connect."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn

from gateway_support import gateway_with
from toolgate import Gateway, tool
from toolgate.demo import TOOL_FOLDERS
from toolgate.demo import tools as demo_tools
from toolgate.secrets import MemorySecretStore

#: Where screenshots go (a person looks at them); ``TOOLGATE_SCREENSHOTS`` overrides it.
SCREENSHOTS = Path(
    os.environ.get("TOOLGATE_SCREENSHOTS")
    or Path(__file__).resolve().parent / "artifacts" / "screenshots"
)
CHROMIUM = Path("/usr/bin/chromium")

#: What a hostile tool or manifest writes; it must show as text, never run.
SCRIPT = "<script>window.__pwned = 1; alert('pwned')</script>"


def _confirm_deploy(arguments: Any) -> dict[str, Any]:
    return {
        "title": f"Deploy {arguments['service']} {arguments['version']}",
        "risk": "high",
        "facts": [
            {"label": "Service", "value": arguments["service"]},
            {"label": "Version", "value": arguments["version"]},
        ],
    }


@tool(
    namespace="ops",
    effect="external_write",
    title="Deploy a service",
    build_confirmation=_confirm_deploy,
    ui={"prefix": "Deploy", "args": {"service": {}, "version": {"prefix": "at version"}}},
)
def deploy(service: str, version: str) -> dict[str, Any]:
    """Deploy a version of a service (a test tool: it only answers)."""
    return {
        "deployed": service,
        "version": version,
        "_visualization": {
            "type": "shell-output",
            "command": f"deploy {service} {version}",
            "stdout": f"{service} is now at {version}\n",
            "exitCode": 0,
        },
    }


@tool(namespace="ops", effect="communication", title="Send a message")
def send_message(to: str, text: str) -> str:
    """Send a message to someone (a test tool: it only answers)."""
    return f"sent to {to}"


@tool(
    namespace="evil",
    effect="read_only",
    title=f"Evil {SCRIPT}",
    examples=[f"run {SCRIPT}"],
)
def inject(text: str = SCRIPT) -> dict[str, Any]:
    """A tool whose every text tries to run a script: <script>window.__pwned = 2</script>

    <img src=x onerror="window.__pwned = 3">
    """
    return {
        "echo": text,
        "_visualization": {
            "type": "markdown",
            "title": f"Report {SCRIPT}",
            "content": f'# Report\n\n{text}\n\n<img src=x onerror="window.__pwned = 4">\n\n'
            "[click](javascript:window.__pwned=5)",
            "sourceUrl": "javascript:window.__pwned=6",
        },
    }


CAPABILITY_MANIFEST = """\
aiCapability:
  id: crm
  title: Acme CRM
  description: Customer records in Acme CRM.
  requiredPreferenceNames: [apiToken]
  publicPreferenceNames: [region]
  toolNames: [lookup]
  guide: Use Acme CRM for customer questions.
main: tools.py
"""

CAPABILITY_TOOLS = """\
import hashlib


def lookup(input, ctx):
    token = ctx.secrets["apiToken"]
    return {
        "customer": input["name"],
        "token_sha256": hashlib.sha256(token.encode()).hexdigest(),
        "region": ctx.config.get("region"),
    }


tools = [
    {
        "name": "lookup",
        "description": "Look a customer up by name.",
        "inputSchema": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
        "access": "read",
        "handler": lookup,
    }
]
"""


def write_capability(folder: Path) -> Path:
    """A capability manifest (``crm``, one secret and one setting) and its tools module."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.yaml").write_text(CAPABILITY_MANIFEST, encoding="utf-8")
    (folder / "tools.py").write_text(CAPABILITY_TOOLS, encoding="utf-8")
    return folder


def make_gateway(tmp_path: Path, *, capability: bool = True) -> Gateway:
    """The demo tools (Python and tool folders, namespace ``demo``), the test tools above, a
    queue of approvals and grants, an audit log and an in-memory secret store."""
    gateway = gateway_with(
        approver="queue",
        state_path=tmp_path / "state.db",
        audit_path=tmp_path / "audit.db",
        secret_store=MemorySecretStore(),
        home=tmp_path,
        spill_dir=tmp_path / "spill",
    )
    gateway.add(demo_tools)
    gateway.add_tool_folder(TOOL_FOLDERS, namespace="demo")
    gateway.add(deploy, send_message, inject)
    if capability:
        gateway.add_source(write_capability(tmp_path / "capabilities" / "crm"))
    return gateway


class Served:
    """An ASGI app served by uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="web-ui-test-server", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # noqa: BLE001 - reported by start()
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        for _ in range(600):
            if self.server.started or self.error is not None or not self.thread.is_alive():
                break
            threading.Event().wait(0.05)
        if not self.server.started:
            self.stop()
            raise RuntimeError(f"the test server did not start: {self.error!r}")
        print(f"web UI test server at {self.url}", file=sys.stderr)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()
        if self.thread.is_alive():
            raise RuntimeError("the test server did not stop")


@contextmanager
def serve(app: Any) -> Iterator[Served]:
    """Serve ``app`` for the duration of the block; stopped (and joined) on the way out."""
    served = Served(app)
    served.start()
    try:
        yield served
    finally:
        served.stop()


#: The screenshots the docs show (``docs/assets/screenshots/NAME.png``): the browser tests take
#: them, so the pictures in the docs are of the UI as it is. Commit them when they change.
DOC_SCREENSHOTS = Path(__file__).resolve().parents[1] / "docs" / "assets" / "screenshots"
DOCUMENTED_PAGES = frozenset(
    {"catalog", "tool-page", "approvals-inbox", "audit", "audit-call-diff", "settings-grants"}
)


def screenshot_path(name: str) -> Path:
    """Where the screenshot ``name`` goes (the folder is created)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"


def publish_screenshot(path: Path) -> None:
    """Copy a screenshot the docs show into ``docs/assets/screenshots``."""
    if path.stem in DOCUMENTED_PAGES:
        DOC_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_SCREENSHOTS / path.name)
