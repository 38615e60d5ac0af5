"""MCP tools (``kind: MCPServer``) against real third-party MCP servers started by the tests.

* stdio: ``mcp-server-time`` (PyPI, the reference time server) and
  ``mcp-server-everything stdio`` (npm ``@modelcontextprotocol/server-everything``);
* streamable HTTP: ``mcp-server-everything streamableHttp``, a process the test starts, kills
  and restarts;
* ``tests/fixtures/mcp/changing_server.py`` (written with the official SDK) only where no
  reference server can do it: changing its tool list on demand (in both protocol eras), and
  checking a bearer token.

The HTTP servers listen on loopback, which toolgate reaches only with the operator's grant for
the server (``MCPServer:<name>`` in ``sandbox.network_grants``): those tests pass one
(:func:`loopback`). ``tests/test_mcp_client_guard.py`` covers the refusals.

Most tests give the gateway the servers through :class:`McpServers` behind a small
``DeclarationSource``; the last ones go through a resource file, ``toolgate.yaml`` and the CLI.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from doc_blocks import doc_block
from gateway_support import gateway_with
from toolgate import Gateway
from toolgate.backends.mcp_client import grant_key
from toolgate.errors import ErrorCode
from toolgate.formats._common.diagnostics import Severity
from toolgate.formats._common.safe_yaml import load_yaml_documents
from toolgate.formats.declarations import DeclarationSource, SourceContext, SourceLoad
from toolgate.formats.mcp_server.source import McpServers, McpServerSpec, parse_mcp_server
from toolgate.formats.mcp_server.tools import MAX_DESCRIPTION, tool_from_listing
from toolgate.model import (
    CallStatus,
    ImplementationKind,
    McpEntry,
    SideEffect,
    SourceFormat,
    Tool,
    ToolSource,
)
from toolgate.sandbox.runner import Sandbox

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).parent / "fixtures" / "mcp"
CHANGING_SERVER = FIXTURES / "changing_server.py"
LOCATION = str(FIXTURES / "servers.yaml")


# -- the third-party servers ------------------------------------------------------------------


@pytest.fixture(scope="session")
def time_server() -> str:
    path = BIN / "mcp-server-time"
    if not path.exists():
        pytest.fail(f"{path} is missing: pip install mcp-server-time (into this virtualenv)")
    return str(path)


@pytest.fixture(scope="session")
def everything() -> str:
    path = shutil.which("mcp-server-everything")
    if path is None:
        pytest.fail(
            "mcp-server-everything is not on PATH: "
            "npm install -g @modelcontextprotocol/server-everything"
        )
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after 60 s")


class HttpServer:
    """A server process listening on a fixed port, which a test can kill and restart."""

    def __init__(self, argv: list[str], port: int, path: str = "/mcp") -> None:
        self.argv = argv
        self.port = port
        self.url = f"http://127.0.0.1:{port}{path}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": os.environ.get("HOME", "/"),
            "PORT": str(self.port),
        }
        self.process = subprocess.Popen(
            self.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for_port(self.port, self.process)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None


@pytest.fixture
def everything_http(everything: str) -> Iterator[HttpServer]:
    server = HttpServer([everything, "streamableHttp"], _free_port())
    server.start()
    yield server
    server.stop()


# -- processes ---------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), fields[0]


def _descendants(root: int) -> set[int]:
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents.setdefault(stat[0], []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _server_pids(marker: str) -> set[int]:
    """Live descendants of this test process whose command line contains ``marker``."""
    pids = set()
    for pid in _descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in command and _alive(pid):
            pids.add(pid)
    return pids


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"


# -- the gateway side --------------------------------------------------------------------------


class McpSource(DeclarationSource):
    """The smallest declaration source around :class:`McpServers` (the resource source's job)."""

    format = SourceFormat.RESOURCE

    def __init__(
        self, context: SourceContext, servers: list[McpServerSpec], refs: list[Tool] | None = None
    ) -> None:
        super().__init__(LOCATION)
        self.mcp = McpServers(context)
        self.mcp.configure(servers, refs or [])

    @classmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> McpSource:
        raise TypeError("this test source is built directly from specs, not opened from a path")

    @classmethod
    def validate(cls, path: Path) -> list[Any]:
        return []

    def load(self) -> SourceLoad:
        entries, diagnostics = self.mcp.entries()
        return SourceLoad(entries, diagnostics)

    def backends(self) -> Mapping[ImplementationKind, Any]:
        return {ImplementationKind.MCP: self.mcp.backend()}

    async def start(self, changed: Callable[[], None]) -> None:
        await self.mcp.start(changed)

    async def aclose(self) -> None:
        await self.mcp.aclose()


def spec(name: str, **fields: Any) -> McpServerSpec:
    """A server spec with quick health checks and reconnects, for tests."""
    defaults: dict[str, Any] = {
        "namespace": name,
        "location": LOCATION,
        "probe_period": 0.5,
        "probe_timeout": 10.0,
        "reconnect_initial": 0.2,
        "reconnect_max": 1.0,
    }
    return McpServerSpec(name=name, **{**defaults, **fields})


def ref(tool_id: str, server: str, remote: str, **fields: Any) -> Tool:
    """A ``kind: Tool, type: mcp`` resource as the resource loader builds it."""
    values: dict[str, Any] = {
        "description": "",
        "input_schema": {"type": "object"},
        "kind": ImplementationKind.MCP,
        "entry": McpEntry(server=server, remote_name=remote),
        "source": ToolSource(SourceFormat.RESOURCE, str(FIXTURES / "tools.yaml")),
    }
    return Tool(id=tool_id, **{**values, **fields})


def loopback(*servers: str) -> Sandbox:
    """The operator's grants that let toolgate reach the named servers on loopback."""
    return Sandbox(cidr_grants={grant_key(name): ("127.0.0.0/8",) for name in servers})


def open_gateway(
    servers: list[McpServerSpec], refs: list[Tool] | None = None, **options: Any
) -> tuple[Gateway, McpSource]:
    gateway = gateway_with(**options)
    source = McpSource(gateway.source_context, servers, refs)
    gateway.add_source(source)
    return gateway, source


def close(gateway: Gateway, source: McpSource) -> None:
    source.mcp.close()
    gateway.close()


async def until(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Let the loop run (reloads happen on it) until ``condition`` holds."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.05)


def available(gateway: Gateway, tool_id: str) -> bool:
    entry = gateway.registry.get(tool_id)
    return entry is not None and entry.available


# -- listing -----------------------------------------------------------------------------------


def test_a_stdio_servers_tools_are_listed_in_its_namespace_with_hints_but_a_cautious_level(
    time_server: str,
) -> None:
    gateway, source = open_gateway([spec("time", namespace="clock", command=time_server)])
    try:
        tools = {tool.id: tool for tool in gateway.list_tools()}
        assert set(tools) == {"clock:get_current_time", "clock:convert_time"}
        now = tools["clock:get_current_time"]
        assert now.kind is ImplementationKind.MCP
        assert now.entry == McpEntry(server="time", remote_name="get_current_time")
        assert now.source == ToolSource(SourceFormat.RESOURCE, LOCATION)
        assert "timezone" in now.input_schema["properties"]
        assert now.output_schema is not None
        # The server says read-only; that is kept as a hint, not trusted as the level.
        assert now.hints.read_only is True
        assert now.side_effect is SideEffect.EXTERNAL_WRITE
        assert now.requires_approval
        assert gateway.diagnostics() == []
    finally:
        close(gateway, source)


def test_the_operators_level_wins_over_the_servers_annotations(everything: str) -> None:
    gateway, source = open_gateway(
        [
            spec("calm", command=everything, args=("stdio",), level=SideEffect.READ_ONLY),
            spec("strict", command=everything, args=("stdio",), level=SideEffect.PRIVILEGED),
            spec("trusted", command=everything, args=("stdio",), trust_annotations=True),
        ]
    )
    try:
        calm = gateway.get_tool("calm:toggle-simulated-logging")
        assert calm.hints.read_only is False  # the server's word, kept as a hint
        assert calm.side_effect is SideEffect.READ_ONLY  # the operator's
        strict = gateway.get_tool("strict:get-sum")
        assert strict.hints.read_only is True
        assert strict.side_effect is SideEffect.PRIVILEGED
        # Trusted: readOnlyHint / openWorldHint decide.
        assert gateway.get_tool("trusted:get-sum").side_effect is SideEffect.READ_ONLY
        logging_tool = gateway.get_tool("trusted:toggle-simulated-logging")
        assert logging_tool.side_effect is SideEffect.LOCAL_WRITE
        assert (
            gateway.get_tool("trusted:gzip-file-as-resource").side_effect
            is SideEffect.EXTERNAL_WRITE
        )
    finally:
        close(gateway, source)


# -- calls -------------------------------------------------------------------------------------


def test_call_sync_runs_a_stdio_tool_through_the_pipeline(
    time_server: str, everything: str
) -> None:
    gateway, source = open_gateway(
        [
            spec("time", namespace="clock", command=time_server, level=SideEffect.READ_ONLY),
            spec("everything", command=everything, args=("stdio",), level=SideEffect.READ_ONLY),
        ]
    )
    try:
        now = gateway.call_sync("clock:get_current_time", {"timezone": "Asia/Tokyo"})
        assert now.status is CallStatus.OK, now.message
        assert now.to_dict()["content"]["timezone"] == "Asia/Tokyo"  # the structured result
        echo = gateway.call_sync("everything:echo", {"message": "hello there"})
        assert echo.content == "Echo: hello there"  # text blocks become text
        weather = gateway.call_sync("everything:get-structured-content", {"location": "Chicago"})
        assert set(weather.to_dict()["content"]) == {"temperature", "conditions", "humidity"}
        image = gateway.call_sync("everything:get-tiny-image", {})
        # Rich content stays typed blocks (issue 27), not one JSON value with base64 inside.
        kinds = [block.type for block in image.content.blocks]
        assert "image" in kinds and "text" in kinds
        data = next(block.data for block in image.content.blocks if block.type == "image")
        assert data not in image.text and "[image: image/png" in image.text
    finally:
        close(gateway, source)


async def test_await_call_runs_a_stdio_tool_from_the_callers_own_loop(time_server: str) -> None:
    gateway, _ = open_gateway(
        [spec("time", namespace="clock", command=time_server, level=SideEffect.READ_ONLY)]
    )
    await gateway.start()
    try:
        outcomes = await asyncio.gather(
            *(
                gateway.call(
                    "clock:convert_time",
                    {"source_timezone": "UTC", "time": "12:00", "target_timezone": zone},
                )
                for zone in ("Europe/Paris", "America/New_York", "Asia/Kolkata")
            )
        )
        assert [o.status for o in outcomes] == [CallStatus.OK] * 3
        assert outcomes[0].to_dict()["content"]["target"]["timezone"] == "Europe/Paris"
    finally:
        await gateway.aclose()


def test_a_servers_tool_error_becomes_tool_error_with_its_text(time_server: str) -> None:
    gateway, source = open_gateway(
        [spec("time", namespace="clock", command=time_server, level=SideEffect.READ_ONLY)]
    )
    try:
        outcome = gateway.call_sync("clock:get_current_time", {"timezone": "Mars/Olympus_Mons"})
        assert outcome.status is CallStatus.ERROR
        assert outcome.code is ErrorCode.TOOL_ERROR
        assert "Invalid timezone" in (outcome.message or "")
        assert "Mars/Olympus_Mons" in (outcome.message or "")
    finally:
        close(gateway, source)


def test_bad_arguments_are_refused_by_toolgate_before_the_server_sees_them(everything: str) -> None:
    loose = ref(
        "ops:loose-sum",
        "everything",
        "get-sum",
        input_schema={"type": "object", "properties": {"a": {}, "b": {}}},
        side_effect=SideEffect.READ_ONLY,
    )
    gateway, source = open_gateway(
        [spec("everything", command=everything, args=("stdio",), level=SideEffect.READ_ONLY)]
    )
    loose_gateway, loose_source = open_gateway(
        [spec("everything", command=everything, args=("stdio",))], [loose]
    )
    try:
        refused = gateway.call_sync("everything:get-sum", {"a": "two", "b": 3})
        assert refused.code is ErrorCode.INVALID_ARGUMENTS
        assert "/a" in (refused.message or "")
        # The same arguments through a schema that lets them pass: the server itself rejects
        # them, which is a tool_error — so the refusal above came from toolgate.
        reached = loose_gateway.call_sync("ops:loose-sum", {"a": "two", "b": 3})
        assert reached.code is ErrorCode.TOOL_ERROR
        assert "expected number" in (reached.message or "")
        assert gateway.call_sync("everything:get-sum", {"a": 2, "b": 3}).content == (
            "The sum of 2 and 3 is 5."
        )
    finally:
        close(gateway, source)
        close(loose_gateway, loose_source)


def test_a_call_past_the_tools_timeout_is_cancelled_and_the_session_stays_usable(
    everything: str,
) -> None:
    gateway, source = open_gateway(
        [
            spec(
                "everything",
                command=everything,
                args=("stdio",),
                level=SideEffect.READ_ONLY,
                timeout=1.0,
            )
        ]
    )
    try:
        slow = gateway.call_sync(
            "everything:trigger-long-running-operation", {"duration": 30, "steps": 3}
        )
        assert slow.code is ErrorCode.TIMEOUT
        assert gateway.call_sync("everything:echo", {"message": "still here"}).content == (
            "Echo: still here"
        )
    finally:
        close(gateway, source)


def test_the_server_gets_only_its_declared_environment(
    everything: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_ONLY_SECRET", "must-not-leak")
    gateway, source = open_gateway(
        [
            spec(
                "everything",
                command=everything,
                args=("stdio",),
                level=SideEffect.READ_ONLY,
                env={"GREETING": "hello"},
                env_secrets={"API_TOKEN": "api-token"},
            )
        ],
        secrets={"api-token": "t0ken"},
    )
    try:
        env = json.loads(gateway.call_sync("everything:get-env", {}).content)
        assert env["GREETING"] == "hello"
        assert env["API_TOKEN"] == "t0ken"
        assert env["PATH"] == os.environ["PATH"]
        assert "GATEWAY_ONLY_SECRET" not in env
        assert set(env) <= {
            "GREETING",
            "API_TOKEN",
            "PATH",
            "HOME",
            "LOGNAME",
            "SHELL",
            "TERM",
            "USER",
        }
    finally:
        close(gateway, source)


# -- Tool resources that name a server's tools -------------------------------------------------


def test_tool_resources_pick_which_tools_of_a_server_are_registered(time_server: str) -> None:
    now = ref(
        "ops:now",
        "time",
        "get_current_time",
        description="The current time, for the on-call dashboard.",
        side_effect=SideEffect.READ_ONLY,
    )
    missing = ref("ops:missing", "time", "no_such_tool", side_effect=SideEffect.READ_ONLY)
    stray = ref("ops:stray", "github", "create_issue")
    gateway, source = open_gateway(
        [spec("time", namespace="clock", command=time_server)], [now, missing, stray]
    )
    try:
        assert {entry.tool.id for entry in gateway.entries()} == {
            "ops:now",
            "ops:missing",
            "ops:stray",
        }
        tool = gateway.get_tool("ops:now")
        assert tool.description == "The current time, for the on-call dashboard."
        assert "timezone" in tool.input_schema["properties"]  # completed from the server
        assert tool.side_effect is SideEffect.READ_ONLY  # the resource's level
        now = gateway.call_sync("ops:now", {"timezone": "UTC"})
        assert now.to_dict()["content"]["timezone"] == "UTC"
        gone = gateway.call_sync("ops:missing", {})
        assert gone.code is ErrorCode.UNAVAILABLE
        assert "does not list a tool named 'no_such_tool'" in (gone.message or "")
        stray_outcome = gateway.call_sync("ops:stray", {})
        assert stray_outcome.code is ErrorCode.UNAVAILABLE
        assert "github" in (stray_outcome.message or "")
        problems = {d.field: d for d in gateway.diagnostics()}
        assert problems["ops:missing"].severity is Severity.WARNING
        assert problems["ops:stray"].severity is Severity.ERROR
    finally:
        close(gateway, source)


# -- servers that are down ---------------------------------------------------------------------


def test_a_server_that_cannot_start_gives_a_diagnostic_and_unavailable_refs(tmp_path: Path) -> None:
    ghost = ref("ops:ghost", "ghost", "anything")
    offline_url = f"http://127.0.0.1:{_free_port()}/mcp"  # nothing listens there
    gateway, source = open_gateway(
        [spec("ghost", command=str(tmp_path / "no-such-server")), spec("offline", url=offline_url)],
        [ghost],
        sandbox=loopback("offline"),
    )
    try:
        (problem,) = gateway.diagnostics()  # the ghost has a Tool resource: no diagnostic
        assert (problem.field, problem.severity) == ("/spec", Severity.ERROR)
        assert "MCP server offline is not connected" in problem.message
        assert offline_url in problem.message
        outcome = gateway.call_sync("ops:ghost", {})
        assert outcome.code is ErrorCode.UNAVAILABLE
        message = outcome.message or ""
        assert "cannot start" in message and "no-such-server" in message
    finally:
        close(gateway, source)


def test_a_failing_servers_stderr_is_quoted_for_the_operator_only_and_redacted() -> None:
    crash = (
        "import os, sys; sys.stderr.write('no config for key ' + os.environ['KEY']); sys.exit(2)"
    )
    broken = ref("ops:broken", "broken", "anything")
    gateway, source = open_gateway(
        [spec("broken", command=sys.executable, args=("-c", crash), env_secrets={"KEY": "k"})],
        [broken],
        secrets={"k": "hunter2-value"},
    )
    plain, plain_source = open_gateway(
        [spec("broken", command=sys.executable, args=("-c", crash), env_secrets={"KEY": "k"})],
        secrets={"k": "hunter2-value"},
    )
    try:
        (problem,) = plain.diagnostics()
        assert "no config for key ***" in problem.message
        assert "hunter2-value" not in problem.message
        outcome = gateway.call_sync("ops:broken", {})
        assert outcome.code is ErrorCode.UNAVAILABLE
        assert "not connected" in (outcome.message or "")
        assert "no config" not in (outcome.message or "")  # agents never read the server's output
    finally:
        close(gateway, source)
        close(plain, plain_source)


def test_a_server_that_never_answers_times_out_and_is_stopped() -> None:
    sleeper = shutil.which("sleep")
    assert sleeper is not None
    gateway, source = open_gateway(
        [spec("mute", command=sleeper, args=("300",), connect_timeout=1.0)]
    )
    try:
        (problem,) = gateway.diagnostics()
        assert "no answer within 1 s" in problem.message
        assert problem.field == "/spec"
    finally:
        close(gateway, source)
    assert _server_pids("sleep 300") == set()


async def test_an_http_server_going_down_makes_its_tools_unavailable_until_it_is_back(
    everything_http: HttpServer,
) -> None:
    gateway, _ = open_gateway(
        [spec("everything", url=everything_http.url, level=SideEffect.READ_ONLY)],
        sandbox=loopback("everything"),
    )
    await gateway.start()
    try:
        ok = await gateway.call("everything:get-sum", {"a": 2, "b": 3})
        assert ok.content == "The sum of 2 and 3 is 5."
        everything_http.stop()
        down = await gateway.call("everything:get-sum", {"a": 2, "b": 3})
        assert down.code is ErrorCode.UNAVAILABLE
        assert "everything" in (down.message or "")
        await until(
            lambda: not available(gateway, "everything:get-sum"), "the tool to be unavailable"
        )
        entry = gateway.registry.get("everything:get-sum")
        assert entry is not None and "not connected" in (entry.unavailable_reason or "")
        assert available(gateway, "everything:echo") is False  # the last known list is kept
        refused = gateway.call_sync("everything:echo", {"message": "anyone?"})
        assert refused.code is ErrorCode.UNAVAILABLE
        everything_http.start()
        await until(lambda: available(gateway, "everything:get-sum"), "the tool to come back")
        again = await gateway.call("everything:get-sum", {"a": 4, "b": 5})
        assert again.content == "The sum of 4 and 5 is 9."
        assert gateway.call_sync("everything:echo", {"message": "back"}).content == "Echo: back"
    finally:
        await gateway.aclose()


async def test_a_crashed_stdio_server_is_started_again(everything: str) -> None:
    gateway, _ = open_gateway(
        [spec("everything", command=everything, args=("stdio",), level=SideEffect.READ_ONLY)]
    )
    await gateway.start()
    try:
        (first,) = _server_pids("mcp-server-everything")
        os.kill(first, signal.SIGKILL)
        await until(
            lambda: not available(gateway, "everything:echo"), "the tools to be unavailable"
        )
        await until(lambda: available(gateway, "everything:echo"), "the server to be restarted")
        (second,) = _server_pids("mcp-server-everything")
        assert second != first
        outcome = await gateway.call("everything:echo", {"message": "again"})
        assert outcome.content == "Echo: again"
    finally:
        await gateway.aclose()
    assert _server_pids("mcp-server-everything") == set()


# -- tool list changes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "era",
    [
        pytest.param((), id="2026-07-28: a subscriptions/listen stream"),
        pytest.param(("--legacy",), id="2025-11-25: notifications/tools/list_changed"),
    ],
)
async def test_a_changed_tool_list_updates_the_registry(era: tuple[str, ...]) -> None:
    gateway, _ = open_gateway(
        [
            spec(
                "changing",
                command=sys.executable,
                args=(str(CHANGING_SERVER), *era),
                level=SideEffect.LOCAL_WRITE,
                probe_period=0,  # only the server's announcement can make the change visible
                pin="off",  # adopt changes as listed (by default a new tool is held)
            )
        ]
    )
    await gateway.start()
    try:
        assert {t.id for t in gateway.list_tools()} == {"changing:add_tool", "changing:remove_tool"}
        added = await gateway.call("changing:add_tool", {"name": "fresh"})
        assert added.status is CallStatus.OK, added.message
        await until(lambda: available(gateway, "changing:fresh"), "the new tool to be registered")
        ran = await gateway.call("changing:fresh", {})
        assert ran.to_dict()["content"] == {"result": "fresh ran"}
        await gateway.call("changing:remove_tool", {"name": "fresh"})
        await until(lambda: gateway.registry.get("changing:fresh") is None, "the tool to go away")
    finally:
        await gateway.aclose()


# -- bearer tokens -----------------------------------------------------------------------------


@pytest.fixture
def guarded_server() -> Iterator[HttpServer]:
    port = _free_port()
    server = HttpServer(
        [sys.executable, str(CHANGING_SERVER), "http", str(port), "s3cr3t-t0ken"], port
    )
    server.start()
    yield server
    server.stop()


def test_the_bearer_token_comes_from_the_secret_store_and_is_never_shown(
    guarded_server: HttpServer,
) -> None:
    server = spec(
        "guarded", url=guarded_server.url, bearer_secret="guard-token", level=SideEffect.LOCAL_WRITE
    )
    listed = ref("ops:add", "guarded", "add_tool", side_effect=SideEffect.LOCAL_WRITE)
    grant = loopback("guarded")
    right, right_source = open_gateway(
        [server], secrets={"guard-token": "s3cr3t-t0ken"}, sandbox=grant
    )
    wrong, wrong_source = open_gateway(
        [server], secrets={"guard-token": "wrong-t0ken"}, sandbox=grant
    )
    unset, unset_source = open_gateway([server], [listed], sandbox=grant)
    try:
        added = right.call_sync("guarded:add_tool", {"name": "x"})
        assert added.to_dict()["content"] == {"result": "added x"}
        (problem,) = wrong.diagnostics()
        assert "401" in problem.message
        assert "wrong-t0ken" not in problem.message
        outcome = unset.call_sync("ops:add", {"name": "x"})
        assert outcome.code is ErrorCode.UNAVAILABLE
        assert "'guard-token'" in (outcome.message or "")
    finally:
        close(right, right_source)
        close(wrong, wrong_source)
        close(unset, unset_source)


# -- no server process outlives its gateway ------------------------------------------------------


def test_closing_ends_every_server_process(time_server: str, everything: str) -> None:
    gateway, source = open_gateway(
        [
            spec("time", command=time_server, level=SideEffect.READ_ONLY),
            spec("everything", command=everything, args=("stdio",), level=SideEffect.READ_ONLY),
        ]
    )
    assert gateway.call_sync("time:get_current_time", {"timezone": "UTC"}).status is CallStatus.OK
    servers = _server_pids("mcp-server-time") | _server_pids("mcp-server-everything")
    assert len(servers) == 2
    close(gateway, source)
    assert [pid for pid in servers if _alive(pid)] == []


def test_a_process_that_exits_without_closing_leaves_no_server_behind(
    time_server: str, tmp_path: Path
) -> None:
    # What the CLI does: build a gateway, call a tool, exit — no close() anywhere. The server
    # command lingers after its stdin closes (as wrappers such as `docker run` do), so only
    # toolgate ending its process group at exit can stop it.
    script = tmp_path / "one_call.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from test_mcp_tools import open_gateway, spec, _descendants
            from toolgate.model import SideEffect
            server = spec(
                "time",
                command="/bin/sh",
                args=("-c", {time_server!r} + "; exec sleep 300"),
                level=SideEffect.READ_ONLY,
            )
            gateway, _ = open_gateway([server])
            outcome = gateway.call_sync("time:get_current_time", {{"timezone": "UTC"}})
            print(outcome.status.value, *(os.getpgid(pid) for pid in _descendants(os.getpid())))
            """
        )
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    status, *groups = result.stdout.split()
    assert status == "ok"
    server_groups = {int(group) for group in groups} - {os.getpgid(0)}
    assert server_groups, "the server's process group was not found"

    def group_alive(group: int) -> bool:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 10  # the exit hook has already waited; allow for reaping
    while any(group_alive(g) for g in server_groups) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [g for g in server_groups if group_alive(g)] == []


# -- the MCPServer resource --------------------------------------------------------------------


def _documents() -> list[Any]:
    text = (FIXTURES / "servers.yaml").read_text()
    return [doc for _, doc in load_yaml_documents(text, source=LOCATION)]


def test_mcp_server_resources_parse_into_specs() -> None:
    stdio_doc, http_doc = _documents()
    stdio, problems = parse_mcp_server(stdio_doc, path=LOCATION, pointer="")
    assert problems == [] and stdio is not None
    assert (stdio.name, stdio.namespace, stdio.transport) == ("time", "clock", "stdio")
    assert stdio.args == ("--local-timezone", "UTC")
    assert dict(stdio.env) == {"TZ": "UTC"}
    assert stdio.level is SideEffect.READ_ONLY
    http, problems = parse_mcp_server(http_doc, path=LOCATION, pointer="/1")
    assert problems == [] and http is not None
    assert (http.name, http.namespace, http.transport) == (
        "everything",
        "everything",
        "streamable-http",
    )
    assert http.bearer_secret == "everything-token"
    assert http.trust_annotations and http.level is None
    assert (http.timeout, http.probe_period, http.reconnect_initial) == (20.0, 5.0, 0.5)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda d: d["spec"].update(url="http://x/mcp"), "/3/spec", "not both"),
        (lambda d: d["spec"].pop("command"), "/3/spec", "missing: command"),
        (lambda d: d["spec"].update(comand="x"), "/3/spec/comand", "did you mean 'command'"),
        (lambda d: d["metadata"].pop("name"), "/3/metadata/name", "missing"),
        (lambda d: d["metadata"].update(name="has space"), "/3/metadata/name", "letters, digits"),
        (
            lambda d: d["spec"]["sideEffects"].update(level="harmless"),
            "/3/spec/sideEffects/level",
            "read_only",
        ),
        (lambda d: d["spec"]["env"].append({"name": "X"}), "/3/spec/env/1", "value or valueFrom"),
        (
            lambda d: d["spec"]["env"].append({"name": "TZ", "value": "x"}),
            "/3/spec/env/1/name",
            "twice",
        ),
        (lambda d: d["spec"].update(args="--flag"), "/3/spec/args", "list of strings"),
        (lambda d: d["spec"].update(auth={"type": "bearer"}), "/3/spec/auth", "url"),
        (lambda d: d["spec"].update(timeoutSeconds=0), "/3/spec/timeoutSeconds", "more than 0"),
        (
            lambda d: d["spec"].update(transport="sse"),
            "/3/spec/transport",
            "stdio, streamable-http",
        ),
        (lambda d: d.update(apiVersion="v1"), "/3/apiVersion", "joch.dev/v1alpha1"),
    ],
)
def test_a_broken_mcp_server_resource_gets_a_precise_diagnostic(
    change: Callable[[dict[str, Any]], None], field: str, words: str
) -> None:
    document = json.loads(json.dumps(_documents()[0]))
    change(document)
    parsed, problems = parse_mcp_server(document, path=LOCATION, pointer="/3")
    assert parsed is None
    assert [(p.path, p.field) for p in problems if words in p.message] == [(LOCATION, field)], (
        problems
    )


def test_bearer_auth_over_plain_http_to_another_host_is_warned_about() -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "MCPServer",
        "metadata": {"name": "remote"},
        "spec": {
            "url": "http://mcp.example.com/mcp",
            "auth": {"type": "bearer", "secretRef": {"name": "t"}},
        },
    }
    parsed, problems = parse_mcp_server(document, path=LOCATION, pointer="")
    assert parsed is not None and parsed.bearer_secret == "t"
    assert [(p.severity, p.field) for p in problems] == [(Severity.WARNING, "/spec/url")]


# -- what a server lists is checked before it becomes a tool ------------------------------------


@pytest.mark.parametrize(
    ("listed", "words"),
    [
        (
            {"name": "has space", "inputSchema": {"type": "object"}},
            "cannot be a toolgate tool name",
        ),
        ({"name": "ns:tool", "inputSchema": {"type": "object"}}, "cannot be a toolgate tool name"),
        (
            {"name": "t", "inputSchema": {"type": "object", "properties": {"x": {"type": "nope"}}}},
            "input schema",
        ),
        ({"name": "t", "inputSchema": {"$ref": "https://example.com/s.json"}}, "remote references"),
        ({"name": "t", "inputSchema": {"type": "array"}}, "not an object schema"),
        ({"name": "t"}, "no input schema"),
        (
            {"name": "t", "inputSchema": {"type": "object"}, "outputSchema": {"type": 5}},
            "output schema",
        ),
        (
            {"name": "t", "inputSchema": {"type": "object", "description": "x" * 200_000}},
            "characters of JSON",
        ),
    ],
)
def test_a_listed_tool_that_cannot_be_used_is_skipped_with_a_warning(
    listed: dict[str, Any], words: str
) -> None:
    tool, problem = tool_from_listing(spec("srv"), listed)
    assert tool is None and problem is not None
    assert problem.severity is Severity.WARNING
    assert words in problem.message


def test_a_listed_tools_texts_are_bounded() -> None:
    tool, problem = tool_from_listing(
        spec("srv"),
        {
            "name": "t",
            "title": "T" * 1000,
            "description": "d" * 50_000,
            "inputSchema": {"type": "object"},
        },
    )
    assert problem is None and tool is not None
    assert len(tool.description) < MAX_DESCRIPTION + 100
    assert tool.title is not None and len(tool.title) < 300


# -- through the resource format, the configuration and the CLI ----------------------------------

_NOW_TOOL = """
---
apiVersion: joch.dev/v1alpha1
kind: Tool
metadata:
  name: now
  namespace: ops
spec:
  type: mcp
  mcpServerRef:
    name: time
    toolName: get_current_time
  description: The current time, for the on-call dashboard.
  sideEffects:
    level: read_only
"""


def _resources(folder: Path, port: int, extra: str = "") -> Path:
    text = (FIXTURES / "servers.yaml").read_text().replace("{bin}", str(BIN))
    path = folder / "mcp.yaml"
    path.write_text(text.replace("{port}", str(port)) + extra)
    return path


async def test_mcp_servers_load_from_a_resource_file(
    time_server: str, everything_http: HttpServer, tmp_path: Path
) -> None:
    path = _resources(tmp_path, everything_http.port, _NOW_TOOL)
    gateway = gateway_with(
        secrets={"everything-token": "not-checked-by-this-server"}, sandbox=loopback("everything")
    )
    load = gateway.add_source(path)
    await gateway.start()
    try:
        assert [d for d in load.diagnostics if d.severity is Severity.ERROR] == []
        ids = {entry.tool.id for entry in gateway.entries()}
        # The Tool resource picks the time server's tools; the everything server lists all of
        # its own, in its name as namespace (no metadata.namespace).
        assert "ops:now" in ids and "clock:get_current_time" not in ids
        assert {"everything:echo", "everything:get-sum"} <= ids
        now = await gateway.call("ops:now", {"timezone": "UTC"})
        assert now.to_dict()["content"]["timezone"] == "UTC"
        # trustAnnotations: the server's readOnlyHint makes get-sum read_only, so no approval.
        assert gateway.get_tool("everything:get-sum").side_effect is SideEffect.READ_ONLY
        total = gateway.call_sync("everything:get-sum", {"a": 1, "b": 2})
        assert total.content == "The sum of 1 and 2 is 3."
    finally:
        await gateway.aclose()


def test_the_cli_lists_validates_and_calls_mcp_tools(
    time_server: str, project: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    stdio_only = (FIXTURES / "servers.yaml").read_text().split("\n---\n")[0]
    (project / "mcp.yaml").write_text(stdio_only.replace("{bin}", str(BIN)))
    (project / "toolgate.yaml").write_text("sources:\n  - path: mcp.yaml\n    format: resource\n")
    listed = run_cli("tools", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    tools = {tool["id"]: tool for tool in json.loads(listed.stdout)}
    assert {"clock:get_current_time", "clock:convert_time"} <= set(tools)
    called = run_cli("call", "clock:get_current_time", "--args", '{"timezone": "Europe/Berlin"}')
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["timezone"] == "Europe/Berlin"
    valid = run_cli("validate", "mcp.yaml")
    assert valid.returncode == 0, valid.stdout + valid.stderr
    (project / "broken.yaml").write_text(stdio_only.replace("command:", "comand:"))
    broken = run_cli("validate", "broken.yaml")
    assert broken.returncode == 1
    assert "/spec/comand" in broken.stdout + broken.stderr
    assert "did you mean 'command'" in broken.stdout + broken.stderr


def _doc_block(marker: str) -> str:
    return doc_block(f"mcp:{marker}")


def test_the_documented_example_works_as_written(
    time_server: str,
    everything_http: HttpServer,
    project: Path,
    run_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    resources = _doc_block("mcp.yaml")
    assert "command: mcp-server-time" in resources and "127.0.0.1:3001" in resources
    resources = resources.replace("command: mcp-server-time", f"command: {time_server}")
    (project / "mcp.yaml").write_text(resources.replace("3001", str(everything_http.port)))
    (project / "toolgate.yaml").write_text(_doc_block("toolgate.yaml"))
    commands = [shlex.split(line) for line in _doc_block("commands").splitlines() if line.strip()]
    assert [command[:2] for command in commands] == [
        ["toolgate", "validate"],
        ["toolgate", "secrets"],
        ["toolgate", "tools"],
        ["toolgate", "call"],
        ["toolgate", "call"],
    ]
    validate, secret, listing, now, add = commands
    assert run_cli(*validate[1:]).returncode == 0
    stored = run_cli(*secret[1:], input="any-token\n")
    assert stored.returncode == 0, stored.stderr
    listed = run_cli(*listing[1:], "--json")
    assert listed.returncode == 0, listed.stderr
    ids = {tool["id"] for tool in json.loads(listed.stdout)}
    assert {"clock:get_current_time", "clock:convert_time", "math:add"} == ids
    called = run_cli(*now[1:])
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["timezone"] == "Europe/Paris"
    added = run_cli(*add[1:])
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "The sum of 2 and 3 is 5."
    # What the gateway enforces for each: the HTTP server's grant, nothing for the stdio one.
    shown = json.loads(run_cli("tools", "show", "math:add", "--json").stdout)
    network = shown["sandbox"]["enforced"]["network"]
    assert "MCP server everything at public addresses only" in network
    assert "granted (MCPServer:everything): 127.0.0.1/32" in network
    shown = json.loads(run_cli("tools", "show", "clock:get_current_time", "--json").stdout)
    assert "network" not in shown["sandbox"]["enforced"]
