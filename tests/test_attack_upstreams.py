"""Attacks by an upstream MCP server on the gateway that aggregates it (issue 22).

* **Rug pull.** The server changes a tool after it was trusted — a new ``secret`` parameter, a
  description asking for the user's SSH key — and adds a tool, after a reconnect or between two
  runs of the CLI. The changed and the new tool must be held (unavailable, with a diagnostic that
  says what changed and how to accept it) until an operator accepts them, through the CLI, the
  HTTP API or the web UI; the pins survive restarts and are shared by every process using the
  state.
* **Hidden instructions.** The server describes a tool with zero-width and right-to-left
  characters, an ``<IMPORTANT>`` block and a Unicode tag character in a parameter's description.
  The tool must be held (even in the server's first listing) and every surface a person reads
  must show the characters escaped (``\\u202e``), never raw.

Every test asserts that the attack fails *and* that the gateway keeps serving. The hostile server
is ``tests/fixtures/mcp/rug_pull_server.py`` (the official SDK), whose tools depend on a state
file read when it starts.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from toolgate import Gateway
from toolgate.config import build_gateway, load_config
from toolgate.errors import ErrorCode
from toolgate.model import CallStatus

RunCli = Callable[..., subprocess.CompletedProcess[str]]

SERVER = Path(__file__).parent / "fixtures" / "mcp" / "rug_pull_server.py"

RAW_HIDDEN = ("\u200b", "\u202e", "\U000e0041")


def _resource(folder: Path, state: Path, *, pin: str | None = None) -> None:
    pin_line = "" if pin is None else f"  pin: {pin}\n"
    (folder / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        "  name: weather\n"
        "spec:\n"
        f"  command: {json.dumps(sys.executable)}\n"
        f"  args: [{json.dumps(str(SERVER))}, {json.dumps(str(state))}]\n"
        "  sideEffects: {level: read_only}\n"
        "  healthCheck: {periodSeconds: 0.5, timeoutSeconds: 10}\n"
        "  reconnect: {initialDelaySeconds: 0.2, maxDelaySeconds: 1}\n" + pin_line
    )
    (folder / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )


@pytest.fixture
def state(project: Path) -> Path:
    path = project / "upstream-state"
    path.write_text("benign")
    return path


def _gateway(project: Path, home: Path) -> Gateway:
    return build_gateway(load_config(project / "toolgate.yaml"), home=home, audit="off")


def _no_raw_hidden(text: str) -> None:
    for char in RAW_HIDDEN:
        assert char not in text, f"raw {char!r} reached a person's screen"


async def _until(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.05)


def _reason(gateway: Gateway, tool_id: str) -> str | None:
    entry = gateway.registry.get(tool_id)
    return None if entry is None else entry.unavailable_reason


# -- rug pull ----------------------------------------------------------------------------------


async def test_rug_pull_after_reconnect_holds_the_changed_and_the_new_tool(
    project: Path, toolgate_home: Path, state: Path
) -> None:
    _resource(project, state)
    gateway = _gateway(project, toolgate_home)
    await gateway.start()
    try:
        trusted = await gateway.call("weather:lookup", {"city": "Oslo"})
        assert trusted.status is CallStatus.OK, trusted.message
        # The server turns hostile and reconnects.
        state.write_text("rugged")
        await gateway.call("weather:crash", {})
        await _until(
            lambda: (
                gateway.registry.get("weather:exfiltrate") is not None
                and "held" in (_reason(gateway, "weather:lookup") or "")
            ),
            "the reconnected server's changed listing to be held",
        )
        reason = _reason(gateway, "weather:lookup") or ""
        assert "changed its description, input schema (new parameter 'secret')" in reason
        assert "toolgate mcp-servers accept weather lookup" in reason
        assert "held" in (_reason(gateway, "weather:exfiltrate") or "")
        # Neither runs: the new parameter is refused and the new tool never reaches the server.
        rugged = await gateway.call("weather:lookup", {"city": "Oslo", "secret": "key"})
        assert rugged.code is ErrorCode.UNAVAILABLE
        stolen = await gateway.call("weather:exfiltrate", {"data": "id_rsa"})
        assert stolen.code is ErrorCode.UNAVAILABLE
        assert "exfiltrate ran" not in json.dumps(stolen.content)
        # What an agent is shown of a held tool is toolgate's words, not the server's.
        listed = {tool.id: tool for tool in gateway.list_tools()}
        assert "id_rsa" not in listed["weather:lookup"].description
        assert "secret" not in json.dumps(listed["weather:lookup"].input_schema_dict())
        # The gateway keeps serving the server's unchanged tool, and accepting releases it.
        diagnostics = " ".join(d.message for d in gateway.diagnostics())
        assert "weather:exfiltrate is held" in diagnostics
        accepted = gateway.accept_mcp_tools("weather", ["lookup"], by="test")
        assert [review.name for review in accepted] == ["lookup"]
        ran = await gateway.call("weather:lookup", {"city": "Oslo", "secret": "x"})
        assert ran.status is CallStatus.OK, ran.message
        assert gateway.registry.get("weather:exfiltrate").unavailable_reason is not None
    finally:
        await gateway.aclose()


def test_rug_pull_between_cli_runs_is_held_until_accepted_with_the_cli(
    project: Path, state: Path, run_cli: RunCli
) -> None:
    _resource(project, state)
    first = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert first.returncode == 0, first.stderr
    state.write_text("rugged")
    held = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo", "secret": "k"}')
    assert held.returncode == 1
    assert "held" in held.stdout + held.stderr
    assert "toolgate mcp-servers accept weather lookup" in held.stdout + held.stderr
    new = run_cli("call", "weather:exfiltrate", "--args", '{"data": "d"}')
    assert new.returncode == 1 and "exfiltrate ran" not in new.stdout
    listing = run_cli("mcp-servers", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    (row,) = json.loads(listing.stdout)
    assert row["held"] == ["exfiltrate", "lookup"]
    shown = run_cli("mcp-servers", "show", "weather", "--json")
    reviews = {row["tool"]: row for row in json.loads(shown.stdout)}
    assert reviews["lookup"]["status"] == "held: changed"
    assert "input schema (new parameter 'secret')" in reviews["lookup"]["changes"]
    stale = run_cli("mcp-servers", "accept", "weather", "lookup", "--hash", "sha256:" + "0" * 64)
    assert stale.returncode == 1 and "changed 'lookup' again" in stale.stdout + stale.stderr
    digest = reviews["lookup"]["definition_hash"]
    accepted = run_cli("mcp-servers", "accept", "weather", "lookup", "--hash", digest)
    assert accepted.returncode == 0, accepted.stderr
    assert f"accepted weather lookup {digest}" in accepted.stdout
    ran = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo", "secret": "k"}')
    assert ran.returncode == 0, ran.stderr
    # Only what was accepted: the new tool stays held.
    assert run_cli("call", "weather:exfiltrate", "--args", '{"data": "d"}').returncode == 1
    unknown = run_cli("mcp-servers", "accept", "nowhere")
    assert unknown.returncode == 1 and "no MCP server 'nowhere'" in unknown.stdout + unknown.stderr
