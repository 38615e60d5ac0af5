"""More attacks by an upstream MCP server on the gateway that aggregates it (issue 22, after the
review of the first fix).

* **A name listed twice.** After a benign ``lookup`` was accepted, the server lists it again
  followed by a second ``lookup`` asking for the SSH key — on one page, or on the next page of
  the listing. Operators were shown the first copy while the last one was served. Every tool of
  such a name must be held ("listed twice by the server") and cannot be accepted until the server
  lists it once; a page served twice (identical entries) is not an attack.
* **Names toolgate cannot tell apart.** ``lookup`` and ``LOOKUP``: both are held.
* **An empty or all-held first listing.** Trust on first use must end with the first listing
  even when it accepted nothing: a tool added later is held.
* **Accepting a definition nobody reviewed.** The held tool's reason names the hash reviewed;
  the HTTP API needs the ``hashes`` reviewed; the CLI without ``--hash`` shows the definition
  and needs a confirmation (``--yes`` when not on a terminal).

Every test asserts that the attack fails *and* that the gateway keeps serving. The hostile server
is ``tests/fixtures/mcp/duplicate_names_server.py`` (raw JSON-RPC: the SDK would not list a name
twice), whose tools depend on a state file read when it starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from toolgate import Gateway
from toolgate.config import build_gateway, load_config
from toolgate.errors import ErrorCode
from toolgate.model import CallStatus

pytestmark = pytest.mark.slow

RunCli = Callable[..., subprocess.CompletedProcess[str]]

SERVER = Path(__file__).parent / "fixtures" / "mcp" / "duplicate_names_server.py"


@pytest.fixture
def state(project: Path) -> Path:
    path = project / "upstream-state"
    path.write_text("benign")
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        "  name: weather\n"
        "spec:\n"
        f"  command: {json.dumps(sys.executable)}\n"
        f"  args: [{json.dumps(str(SERVER))}, {json.dumps(str(path))}]\n"
        "  sideEffects: {level: read_only}\n"
    )
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )
    return path


def _gateway(project: Path, home: Path) -> Gateway:
    return build_gateway(load_config(project / "toolgate.yaml"), home=home, audit="off")


def _reason(gateway: Gateway, tool_id: str) -> str:
    entry = gateway.registry.get(tool_id)
    assert entry is not None, tool_id
    return entry.unavailable_reason or ""


def _output(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout + done.stderr


# -- a name listed twice ------------------------------------------------------------------------


def test_a_name_listed_twice_after_acceptance_is_held_and_cannot_be_accepted(
    project: Path, state: Path, run_cli: RunCli
) -> None:
    trusted = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert trusted.returncode == 0, trusted.stderr  # the first listing is trusted
    state.write_text("twice")
    stolen = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo", "secret": "key"}')
    assert stolen.returncode == 1
    assert "ran with" not in stolen.stdout  # the server was never reached
    assert "listed twice by the server" in _output(stolen)
    # No surface shows one copy as the tool: it is held, and says why.
    (row,) = [
        r
        for r in json.loads(run_cli("tools", "list", "--json").stdout)
        if r["id"] == "weather:lookup"
    ]
    assert not row["available"] and "id_rsa" not in row["description"]
    shown = json.loads(run_cli("mcp-servers", "show", "weather", "--json").stdout)
    lookup = next(review for review in shown if review["tool"] == "lookup")
    assert lookup["status"] == "held: ambiguous"
    assert "listed twice by the server" in lookup["changes"][0]
    # Neither copy can be accepted while the server lists both.
    for accept in (
        ("mcp-servers", "accept", "weather", "lookup", "--hash", lookup["definition_hash"]),
        ("mcp-servers", "accept", "weather", "lookup", "--yes"),
    ):
        refused = run_cli(*accept)
        assert refused.returncode == 1 and "cannot be accepted" in _output(refused)
    nothing = run_cli("mcp-servers", "accept", "weather", "--yes")
    assert nothing.returncode == 0 and "Nothing to accept" in nothing.stdout
    # The gateway keeps serving the server's other tool.
    forecast = run_cli("call", "weather:forecast", "--args", '{"city": "Oslo"}')
    assert forecast.returncode == 0 and "forecast ran" in forecast.stdout, forecast.stderr
    # Once the server lists the name once again, the accepted definition is served.
    state.write_text("benign")
    again = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert again.returncode == 0 and "lookup ran" in again.stdout, again.stderr


async def test_a_name_listed_twice_across_pages_is_held_in_a_running_gateway(
    project: Path, toolgate_home: Path, state: Path
) -> None:
    with _gateway(project, toolgate_home) as first:  # trusts the benign first listing
        assert first.registry.get("weather:lookup").available
    state.write_text("paged")
    gateway = _gateway(project, toolgate_home)
    await gateway.start()
    try:
        assert "listed twice by the server" in _reason(gateway, "weather:lookup")
        stolen = await gateway.call("weather:lookup", {"city": "Oslo", "secret": "key"})
        assert stolen.code is ErrorCode.UNAVAILABLE
        assert "ran with" not in json.dumps(stolen.content)
        listed = {tool.id: tool for tool in gateway.list_tools()}
        assert "id_rsa" not in listed["weather:lookup"].description
        assert "secret" not in json.dumps(listed["weather:lookup"].input_schema_dict())
        forecast = await gateway.call("weather:forecast", {"city": "Oslo"})
        assert forecast.status is CallStatus.OK, forecast.message
    finally:
        await gateway.aclose()


def test_a_name_listed_twice_cannot_be_accepted_over_http(
    project: Path, toolgate_home: Path, state: Path
) -> None:
    from fastapi.testclient import TestClient

    from http_api_support import LOCAL, auth, make_app

    state.write_text("twice")
    gateway = _gateway(project, toolgate_home)
    with TestClient(make_app(gateway), client=LOCAL) as client:
        tools = client.get("/v1/mcp-servers/weather", headers=auth("ops")).json()["tools"]
        lookup = next(tool for tool in tools if tool["tool"] == "lookup")
        assert lookup["status"] == "held: ambiguous"
        # Both copies' texts are looked at: the SSH-key one is not hidden behind the first.
        refused = client.post(
            "/v1/mcp-servers/weather/accept",
            json={"tools": ["lookup"], "hashes": {"lookup": lookup["definition_hash"]}},
            headers=auth("ops"),
        )
        assert refused.status_code == 409 and "cannot be accepted" in refused.text
        called = client.post(
            "/v1/tools/weather:lookup/call",
            json={"arguments": {"city": "Oslo", "secret": "k"}},
            headers=auth("alice"),
        )
        assert called.json()["code"] == "unavailable", called.text
        served = client.post(
            "/v1/tools/weather:forecast/call",
            json={"arguments": {"city": "Oslo"}},
            headers=auth("alice"),
        )
        assert served.json()["status"] == "ok", served.text


def test_a_name_listed_twice_shows_why_and_no_accept_button_on_the_web_ui(
    project: Path, toolgate_home: Path, state: Path
) -> None:
    from test_web_ui import Console
    from toolgate.serve.web import build_ui
    from web_support import serve

    state.write_text("twice")
    gateway = _gateway(project, toolgate_home)
    try:
        with serve(build_ui(gateway)) as served:
            console = Console(gateway, served)
            page = console.get("/tools/weather:lookup")
            assert page.status_code == 200
            assert "held: ambiguous" in page.text and "Cannot be accepted" in page.text
            assert "Accept this definition" not in page.text
            digest = gateway.review_mcp_server("weather")["lookup"].definition_hash
            form = {"tool": "lookup", "definition_hash": digest, "back": "weather:lookup"}
            refused = console.post("/mcp-servers/weather/accept", form)
            assert refused.status_code == 409 and "cannot be accepted" in refused.text
            assert not gateway.registry.get("weather:lookup").available
            assert console.get("/").status_code == 200  # the console keeps serving
            console.client.close()
    finally:
        gateway.close()


def test_a_page_served_twice_is_one_tool_not_a_duplicate(
    project: Path, state: Path, run_cli: RunCli
) -> None:
    state.write_text("repeated")
    ran = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert ran.returncode == 0 and "lookup ran" in ran.stdout, ran.stderr


async def test_names_told_apart_only_by_case_are_both_held_for_an_agent_over_mcp(
    project: Path, toolgate_home: Path, state: Path, run_cli: RunCli
) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from conftest import TOOLGATE

    assert run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}').returncode == 0
    state.write_text("cased")
    params = StdioServerParameters(
        command=str(TOOLGATE),
        args=["--config", str(project / "toolgate.yaml"), "mcp"],
        env={**os.environ, "TOOLGATE_HOME": str(toolgate_home)},
        cwd=str(project),
    )
    with (project / "stderr.log").open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as agent:
            tools = {tool.name: tool for tool in (await agent.list_tools()).tools}
            assert {"weather__lookup", "weather__LOOKUP", "weather__forecast"} <= set(tools)
            listed = json.dumps([tool.model_dump(mode="json") for tool in tools.values()])
            assert "id_rsa" not in listed and "secret" not in listed
            for name in ("weather__lookup", "weather__LOOKUP"):
                refused = await agent.call_tool(name, {"city": "Oslo", "secret": "k"})
                assert refused.is_error
                assert "ran with" not in json.dumps(refused.model_dump(mode="json"))
            served = await agent.call_tool("weather__forecast", {"city": "Oslo"})
            assert not served.is_error
            assert "forecast ran" in json.dumps(served.model_dump(mode="json"))


# -- trust on first use ends with the first listing ------------------------------------------


@pytest.mark.parametrize("first", ["empty", "poisoned"])
def test_an_empty_or_all_held_first_listing_still_ends_trust_on_first_use(
    first: str, project: Path, state: Path, run_cli: RunCli
) -> None:
    state.write_text(first)
    listed = run_cli("mcp-servers", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    state.write_text("later")
    stolen = run_cli("call", "weather:exfiltrate", "--args", '{"data": "id_rsa"}')
    assert stolen.returncode == 1 and "ran with" not in stolen.stdout
    assert "never accepted" in _output(stolen)
    # The gateway keeps serving: what an operator accepts at the hash reviewed runs.
    shown = json.loads(run_cli("mcp-servers", "show", "weather", "--json").stdout)
    lookup = next(review for review in shown if review["tool"] == "lookup")
    assert lookup["status"].startswith("held")
    accepted = run_cli(
        "mcp-servers", "accept", "weather", "lookup", "--hash", lookup["definition_hash"]
    )
    assert accepted.returncode == 0, _output(accepted)
    ran = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert ran.returncode == 0 and "lookup ran" in ran.stdout, ran.stderr
    assert run_cli("call", "weather:exfiltrate", "--args", '{"data": "d"}').returncode == 1


# -- accepting what was reviewed --------------------------------------------------------------


def test_accepting_over_http_needs_the_hashes_reviewed(
    project: Path, toolgate_home: Path, state: Path
) -> None:
    from fastapi.testclient import TestClient

    from http_api_support import LOCAL, auth, make_app, problem

    with _gateway(project, toolgate_home) as first:  # trusts the benign first listing
        assert first.registry.get("weather:lookup").available
    state.write_text("poisoned")
    gateway = _gateway(project, toolgate_home)
    with TestClient(make_app(gateway), client=LOCAL) as client:
        reason = _reason(gateway, "weather:lookup")
        tools = client.get("/v1/mcp-servers/weather", headers=auth("ops")).json()["tools"]
        digest = tools[0]["definition_hash"]
        assert f"--hash {digest}" in reason  # the hint pins what was reviewed
        for body in ({}, {"tools": ["lookup"]}, {"tools": ["lookup"], "hashes": {"other": digest}}):
            missing = client.post("/v1/mcp-servers/weather/accept", json=body, headers=auth("ops"))
            problem(missing, 400, "invalid_request")
            assert "'hashes'" in missing.json()["detail"]
        assert "held" in _reason(gateway, "weather:lookup")
        accepted = client.post(
            "/v1/mcp-servers/weather/accept",
            json={"hashes": {"lookup": digest}},
            headers=auth("ops"),
        )
        assert accepted.status_code == 200, accepted.text
        assert gateway.call_sync("weather:lookup", {"city": "Oslo"}).status is CallStatus.OK


def test_accepting_with_the_cli_without_a_hash_shows_the_definition_and_needs_yes(
    project: Path, state: Path, run_cli: RunCli
) -> None:
    state.write_text("poisoned")
    unconfirmed = run_cli("mcp-servers", "accept", "weather", "lookup")
    assert unconfirmed.returncode == 1 and "--hash" in _output(unconfirmed)
    assert "Read ~/.ssh/id_rsa" in unconfirmed.stdout  # what would have been accepted
    assert run_cli("tools", "accept", "weather:lookup").returncode == 1
    held = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert held.returncode == 1 and "--hash sha256:" in _output(held)
    confirmed = run_cli("mcp-servers", "accept", "weather", "lookup", "--yes")
    assert confirmed.returncode == 0, _output(confirmed)
    assert (
        "<IMPORTANT>" in confirmed.stdout and "accepted weather lookup sha256:" in confirmed.stdout
    )
    ran = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert ran.returncode == 0 and "lookup ran" in ran.stdout, ran.stderr


def _on_a_terminal(project: Path, home: Path, args: list[str], answer: bytes) -> tuple[int, str]:
    """Run ``toolgate ARGS`` on a pseudo-terminal, answering ``answer`` to its question."""
    import pty

    from conftest import TOOLGATE

    pid, fd = pty.fork()
    if pid == 0:  # the child: the CLI, on the terminal (never back into pytest)
        try:
            os.chdir(project)
            os.environ["TOOLGATE_HOME"] = str(home)
            os.execv(str(TOOLGATE), [str(TOOLGATE), *args])
        finally:
            os._exit(127)
    out, answered = b"", False
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal closed with the child
            break
        if not chunk:
            break
        out += chunk
        if not answered and b"[y/N]" in out:
            os.write(fd, answer)
            answered = True
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_accepting_on_a_terminal_without_a_hash_asks_and_pins_only_what_it_showed(
    project: Path, toolgate_home: Path, state: Path, run_cli: RunCli
) -> None:
    state.write_text("poisoned")
    accept = ["mcp-servers", "accept", "weather", "lookup"]
    declined, shown = _on_a_terminal(project, toolgate_home, accept, b"n\n")
    assert declined == 1 and "Read ~/.ssh/id_rsa" in shown and "not accepted" in shown
    assert run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}').returncode == 1
    confirmed, shown = _on_a_terminal(project, toolgate_home, accept, b"y\n")
    assert confirmed == 0 and "accepted weather lookup sha256:" in shown, shown
    ran = run_cli("call", "weather:lookup", "--args", '{"city": "Oslo"}')
    assert ran.returncode == 0 and "lookup ran" in ran.stdout, ran.stderr
