"""Attacks on the process sandbox from inside a real sandboxed script tool (issue 8).

Every test calls the probe tool (``tests/fixtures/sandbox/probe.py``) through a real gateway,
under real bubblewrap, expects the safe outcome, then checks that the gateway serves the next
call normally.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from folder_tools import clean_environ, require_program, write_tool
from gateway_support import gateway_with
from toolgate import ErrorCode, Gateway
from toolgate.backends.script import ScriptBackend
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import (
    ImplementationKind,
    Permissions,
    SandboxMode,
    SandboxSpec,
    SideEffect,
)
from toolgate.registry import RegisteredTool
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import SANDBOX_ENV, Sandbox
from toolgate.sandbox.settings import SandboxConfig, SandboxLimitsConfig

pytestmark = pytest.mark.slow

PROBE = Path(__file__).parent / "fixtures" / "sandbox" / "probe.py"
SECRET = "s3cret-value-" + uuid.uuid4().hex


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    require_program("bwrap")
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


@dataclasses.dataclass
class World:
    """A gateway with a sandboxed probe tool, and the host paths the attacks aim at."""

    gateway: Gateway
    backend: ScriptBackend
    root: Path
    tools: Path
    workspace: Path
    allowed: Path
    state: Path

    def add(
        self,
        name: str,
        *,
        side_effect: SideEffect = SideEffect.LOCAL_WRITE,
        permissions: Permissions | None = None,
        env: tuple[str, ...] = (),
        timeout: float = 20.0,
    ) -> str:
        folder = write_tool(self.tools, name, PROBE.read_text(), runtime="python")
        loaded = load_tool_folder(folder)
        assert loaded.tool is not None, loaded.diagnostics
        tool = dataclasses.replace(
            loaded.tool,
            side_effect=side_effect,
            env=env,
            timeout=timeout,
            sandbox=SandboxSpec(
                SandboxMode.COMPARTMENT,
                permissions or Permissions(fs=(str(self.allowed),), env=env),
            ),
        )
        self.gateway.registry.add(RegisteredTool(tool, None, self.backend.unavailable_reason(tool)))
        return tool.id

    def call(self, tool_id: str, **arguments: Any) -> Any:
        outcome = self.gateway.call_sync(tool_id, arguments, workspace=self.workspace)
        return outcome

    def probe(self, tool_id: str, **arguments: Any) -> dict[str, Any]:
        outcome = self.call(tool_id, **arguments)
        assert outcome.code is None, (outcome.code, outcome.message)
        assert outcome.metadata["sandbox"]["mode"] == "compartment"
        assert outcome.metadata["sandbox"]["enforced"] is True
        content: dict[str, Any] = outcome.content
        return content

    def still_serves(self, tool_id: str) -> None:
        assert self.probe(tool_id, op="hello") == {"ok": True, "value": "hello"}


def make_world(tmp_path: Path, limits: SandboxLimitsConfig | None = None) -> World:
    tools = tmp_path / "tools"
    workspace = tmp_path / "workspace"
    allowed = tmp_path / "allowed"
    state = tmp_path / "home"
    for folder in (tools, workspace, allowed, state):
        folder.mkdir()
    (allowed / "ok.txt").write_text("inside the prefix", encoding="utf-8")
    (state / "toolgate.db").write_text("the gateway database", encoding="utf-8")
    (state / ".env").write_text(f"SECRET_TOKEN={SECRET}\n", encoding="utf-8")
    gateway = gateway_with(
        environ=clean_environ(SECRET_TOKEN=SECRET, DECLARED="declared-value"),
        env_from_process=True,
    )
    backend = gateway._backends[ImplementationKind.SCRIPT]
    assert isinstance(backend, ScriptBackend)
    # These attacks are about isolation: on a root host without a pids cgroup (where the
    # process count cannot be enforced) they run with the operator's opt-in, and the fork bomb
    # test skips.
    unlimited = probe_host().process_limit is None
    config = SandboxConfig(
        limits=limits or SandboxLimitsConfig(), allow_unlimited_processes=unlimited
    )
    backend.sandbox = Sandbox(config, protected=[state / "toolgate.db", state / ".env"])
    return World(gateway, backend, tmp_path, tools, workspace, allowed, state)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = make_world(tmp_path)
    with made.gateway:
        yield made


# -- reading ----------------------------------------------------------------------------------


def test_reading_inside_the_declared_prefix_works(world: World) -> None:
    tool = world.add("reader")
    result = world.probe(tool, op="read", path=str(world.allowed / "ok.txt"))
    assert result == {"ok": True, "value": "inside the prefix"}


def test_secrets_of_the_host_are_out_of_reach_by_path_dotdot_and_symlink(world: World) -> None:
    tool = world.add("reader")
    allowed = world.allowed
    (allowed / "shadow").symlink_to("/etc/shadow")
    (allowed / "ssh").symlink_to(Path.home() / ".ssh")
    (allowed / "db").symlink_to(world.state / "toolgate.db")
    (allowed / "dotenv").symlink_to(world.state / ".env")
    targets = [
        "/etc/shadow",
        f"{allowed}/../../../../../../etc/shadow",
        str(allowed / "shadow"),
        str(Path.home() / ".ssh" / "id_rsa"),
        str(Path.home() / ".ssh" / "authorized_keys"),
        str(allowed / "ssh" / "id_rsa"),
        str(world.state / "toolgate.db"),
        str(world.state / ".env"),
        f"{allowed}/../home/.env",
        str(allowed / "db"),
        str(allowed / "dotenv"),
    ]
    for target in targets:
        result = world.probe(tool, op="read", path=target)
        assert result["ok"] is False, (target, result)
    assert (
        world.probe(tool, op="listdir", path=str(Path.home()))["value"]
        in (
            [],
            [".pyenv"],  # the interpreter's installation root, bound read-only when under $HOME
        )
        or not world.probe(tool, op="listdir", path=str(Path.home()))["ok"]
    )
    world.still_serves(tool)


def test_the_gateway_state_is_hidden_even_under_a_declared_prefix(world: World) -> None:
    # The operator's mistake: an fs prefix that contains the gateway's home.
    tool = world.add("careless", permissions=Permissions(fs=(str(world.root),)))
    assert world.probe(tool, op="read", path=str(world.allowed / "ok.txt"))["ok"] is True
    for secret in (world.state / ".env", world.state / "toolgate.db"):
        result = world.probe(tool, op="read", path=str(secret))
        assert result.get("value", "") == "", result  # /dev/null covers it
    world.still_serves(tool)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create another user's file")
def test_another_users_file_inside_the_prefix_is_denied(world: World) -> None:
    private = world.allowed / "private.txt"
    private.write_text("nobody's", encoding="utf-8")
    os.chown(private, 65534, 65534)
    private.chmod(0o600)
    tool = world.add("reader")
    result = world.probe(tool, op="read", path=str(private))
    assert result["ok"] is False and "Permission denied" in result["why"]
    world.still_serves(tool)


# -- writing ----------------------------------------------------------------------------------


def test_writes_only_inside_a_writable_workspace(world: World) -> None:
    tool = world.add("writer")
    inside = world.workspace / "out.txt"
    assert world.probe(tool, op="write", path=str(inside))["ok"] is True
    assert inside.read_text(encoding="utf-8") == "written by the probe"
    # Outside the workspace a write fails, or lands in the sandbox's private /tmp (the test's
    # folders live under /tmp): never on the host.
    for target in (world.allowed / "new.txt", Path("/etc/x"), Path("/usr/x")):
        result = world.probe(tool, op="write", path=str(target))
        assert result["ok"] is False, (target, result)
        assert not target.exists()
    outside = world.root / "outside.txt"
    world.probe(tool, op="write", path=str(outside))
    assert not outside.exists()
    world.still_serves(tool)


def test_a_read_only_tool_cannot_write_its_workspace(world: World) -> None:
    tool = world.add("looker", side_effect=SideEffect.READ_ONLY)
    target = world.workspace / "nope.txt"
    result = world.probe(tool, op="write", path=str(target))
    assert result["ok"] is False and "Read-only" in result["why"]
    assert not target.exists()
    # Its private /tmp is writable.
    assert world.probe(tool, op="write", path="/tmp/scratch")["ok"] is True
    world.still_serves(tool)


# -- environment and processes ----------------------------------------------------------------


def test_the_environment_holds_only_declared_keys(world: World) -> None:
    tool = world.add("env", env=("DECLARED",))
    env = world.probe(tool, op="env")["value"]
    # PWD is bubblewrap's (the working directory inside the sandbox).
    # PYTHONNOUSERSITE is toolgate's own setting for Python tools (no user site-packages).
    assert set(env) <= set(SANDBOX_ENV) | {"DECLARED", "PWD", "PYTHONNOUSERSITE"}
    assert env["DECLARED"] == "declared-value"
    assert SECRET not in repr(env)


def test_bash_function_values_are_refused(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.gateway = gateway_with(
        environ=clean_environ(DECLARED="() { :; }; echo pwned"), env_from_process=True
    )
    backend = world.gateway._backends[ImplementationKind.SCRIPT]
    assert isinstance(backend, ScriptBackend)
    backend.sandbox = Sandbox()
    world.backend = backend
    with world.gateway:
        tool = world.add("env", env=("DECLARED",))
        assert "DECLARED" not in world.probe(tool, op="env")["value"]


def test_the_gateways_processes_are_invisible(world: World) -> None:
    tool = world.add("ps")
    pids = world.probe(tool, op="pids")["value"]
    assert max(pids) < 100, pids  # a fresh PID namespace: only the sandbox's own few
    with open("/proc/self/cmdline", "rb") as handle:
        gateway_cmdline = handle.read(200).decode("utf-8", "replace")
    for pid in [*pids, 1]:
        cmdline = world.probe(tool, op="read", path=f"/proc/{pid}/cmdline")
        environ = world.probe(tool, op="read", path=f"/proc/{pid}/environ")
        assert gateway_cmdline not in cmdline.get("value", "")
        assert SECRET not in environ.get("value", "")
    world.still_serves(tool)


# -- network ----------------------------------------------------------------------------------


def test_without_network_permission_nothing_connects_or_resolves(world: World) -> None:
    tool = world.add("offline")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        for host, target_port in (("127.0.0.1", port), ("10.0.0.1", 80), ("1.1.1.1", 443)):
            result = world.probe(tool, op="connect", host=host, port=target_port)
            assert result["ok"] is False, (host, result)
    for name in ("localhost.example", "example.com"):
        result = world.probe(tool, op="resolve", host=name)
        assert result["ok"] is False, result
    world.still_serves(tool)


# -- resources --------------------------------------------------------------------------------


def _alive_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if token.encode() in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def call_cgroups() -> list[Path]:
    """The per-call pids cgroups this test process has now (not the probe's)."""
    host = probe_host()
    if host.pids_cgroup is None:
        return []
    made = host.pids_cgroup.parent.glob(f"toolgate-{os.getpid()}-*")
    return [path for path in made if "-probe" not in path.name]


def test_a_fork_bomb_is_stopped_by_the_process_limit(tmp_path: Path) -> None:
    world = make_world(tmp_path, SandboxLimitsConfig(processes=32, memory_mb=512))
    host = probe_host()  # make_world's sandbox has the default configuration
    if host.process_limit is None:
        pytest.skip(f"this host cannot enforce a process count: {host.process_problem()}")
    with world.gateway:
        tool = world.add("bomb", timeout=20.0)
        outcome = world.call(tool, op="fork_bomb")
        # A pids cgroup (pids.max = 32 + bubblewrap's own) or RLIMIT_NPROC in the sandbox's
        # user namespace stops it: fork fails long before the timeout.
        assert outcome.code is None, (outcome.code, outcome.message)
        value = outcome.content["value"]
        assert value.startswith("stopped after "), value
        assert int(value.split()[2]) < 32, value
        world.still_serves(tool)
    assert call_cgroups() == []


def test_a_memory_bomb_fails_alone(tmp_path: Path) -> None:
    world = make_world(tmp_path, SandboxLimitsConfig(memory_mb=512))
    with world.gateway:
        tool = world.add("hog")
        result = world.probe(tool, op="memory_bomb")
        assert result["ok"] is False and "MemoryError" in result["why"]
        world.still_serves(tool)


def test_a_disk_filler_stops_at_the_file_size_and_tmp_limits(tmp_path: Path) -> None:
    world = make_world(tmp_path, SandboxLimitsConfig(file_size_mb=4, tmp_size_mb=8))
    with world.gateway:
        tool = world.add("filler")
        for target in ("/tmp/fill", str(world.workspace / "fill")):
            result = world.probe(tool, op="fill_disk", path=target)
            assert result["ok"] is False and "File too large" in result["why"], result
        assert (world.workspace / "fill").stat().st_size <= 4 * 1024 * 1024
        world.still_serves(tool)


def test_a_setsid_grandchild_dies_with_the_call(world: World) -> None:
    token = "toolgate-grandchild-" + uuid.uuid4().hex
    tool = world.add("daemon", timeout=1.5)
    outcome = world.call(tool, op="grandchild", path=f"/tmp/{token}")
    assert outcome.code is ErrorCode.TIMEOUT
    deadline = time.monotonic() + 5
    while _alive_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _alive_with(token) == []
    world.still_serves(tool)


# -- a host that cannot sandbox ---------------------------------------------------------------


def test_without_bubblewrap_the_tool_is_unavailable_and_never_runs(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.backend.sandbox = Sandbox(
        SandboxConfig(bwrap_path=str(tmp_path / "no-bwrap"), layer="bubblewrap")
    )
    with world.gateway:
        tool = world.add("fenced")
        marker = world.workspace / "ran.txt"
        outcome = world.call(tool, op="write", path=str(marker))
        assert outcome.code is ErrorCode.UNAVAILABLE, outcome
        assert "bubblewrap was not found" in (outcome.message or "")
        assert "unsandboxed_host" in (outcome.message or "")
        assert not marker.exists()


def test_an_unsandboxed_host_runs_it_with_the_label(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.backend.sandbox = Sandbox(
        SandboxConfig(
            bwrap_path=str(tmp_path / "no-bwrap"), layer="bubblewrap", unsandboxed_host=True
        )
    )
    with world.gateway:
        tool = world.add("labelled")
        outcome = world.call(tool, op="hello")
        assert outcome.code is None
        assert outcome.metadata["sandbox"] == {
            "mode": "compartment",
            "enforced": False,
            "label": "unsandboxed-host",
        }


def test_host_mode_tools_are_untouched(world: World) -> None:
    folder = write_tool(world.tools, "plain", PROBE.read_text(), runtime="python")
    loaded = load_tool_folder(folder)
    assert loaded.tool is not None
    world.gateway.registry.add(RegisteredTool(loaded.tool, None, None))
    outcome = world.call(loaded.tool.id, op="read", path=str(world.state / ".env"))
    assert outcome.content["ok"] is True  # no sandbox: the host's view
    assert "sandbox" not in outcome.metadata


def test_bwrap_is_on_path_for_these_tests() -> None:
    assert shutil.which("bwrap")


# -- every runtime runs sandboxed -------------------------------------------------------------

ECHO = {
    "python": "import json,sys\nd=json.load(sys.stdin)\nprint(json.dumps({'echo': d['word']}))\n",
    "bash": 'read -r -d "" input\n'
    'word=$(printf %s "$input" | sed -E \'s/.*"word": *"([a-z]*)".*/\\1/\')\n'
    'printf \'{"echo": "%s"}\\n\' "$word"\n',
    "node": "let s='';process.stdin.on('data',c=>s+=c).on('end',()=>{"
    "console.log(JSON.stringify({echo: JSON.parse(s).word}))});\n",
    "bun": "const d = JSON.parse(await Bun.stdin.text());\n"
    "console.log(JSON.stringify({echo: d.word}));\n",
    "go": 'package main\nimport ("encoding/json";"os")\nfunc main(){var d map[string]any\n'
    "json.NewDecoder(os.Stdin).Decode(&d)\n"
    'json.NewEncoder(os.Stdout).Encode(map[string]any{"echo": d["word"]})}\n',
}
PROGRAMS = {"python": "python3", "bash": "bash", "node": "node", "bun": "bun", "go": "go"}


@pytest.mark.parametrize("runtime", sorted(ECHO))
def test_each_runtime_runs_in_the_sandbox_with_the_default_limits(
    world: World, runtime: str
) -> None:
    require_program(PROGRAMS[runtime])
    folder = write_tool(world.tools, f"echo-{runtime}", ECHO[runtime], runtime=runtime)
    loaded = load_tool_folder(folder)
    assert loaded.tool is not None
    tool = dataclasses.replace(
        loaded.tool, timeout=120.0, sandbox=SandboxSpec(SandboxMode.COMPARTMENT, Permissions())
    )
    world.gateway.registry.add(RegisteredTool(tool, None, world.backend.unavailable_reason(tool)))
    outcome = world.call(tool.id, word="hello")
    assert outcome.code is None, outcome.message
    assert outcome.content == {"echo": "hello"}
    assert outcome.metadata["sandbox"]["enforced"] is True


# -- the workspace the caller names ------------------------------------------------------------


@pytest.mark.parametrize("named", ["/", "/etc", "/sys/fs/cgroup/pids", "/proc/1", "/var", "home"])
def test_a_system_folder_or_one_holding_it_is_never_a_workspace(world: World, named: str) -> None:
    # The agent names the workspace; a writing tool gets it read-write. Bound, "/etc" would hand
    # the tool the host's files, and a cgroup folder would let it leave its pids cgroup.
    tool = world.add("grabby")
    workspace = Path.home() if named == "home" else Path(named)
    outcome = world.gateway.call_sync(tool, {"op": "hello"}, workspace=workspace)
    assert outcome.code == ErrorCode.TOOL_ERROR, outcome
    assert "did not run: the workspace" in (outcome.message or "")
    assert "which a sandbox never binds" in (outcome.message or "")
    world.still_serves(tool)


def test_a_link_to_a_system_folder_is_not_a_workspace_either(world: World) -> None:
    tool = world.add("linked")
    link = world.root / "looks-harmless"
    link.symlink_to("/etc")
    outcome = world.gateway.call_sync(tool, {"op": "listdir", "path": str(link)}, workspace=link)
    assert outcome.code == ErrorCode.TOOL_ERROR, outcome
    assert "the workspace /etc is a system folder" in (outcome.message or "")
    world.still_serves(tool)


def test_a_tool_cannot_leave_its_pids_cgroup_through_the_workspace(tmp_path: Path) -> None:
    # The way out a reviewer found: the cgroup folder as the workspace, then "echo 0 > tasks".
    hierarchy = probe_host().pids_cgroup
    if hierarchy is None:
        pytest.skip("this host has no usable pids cgroup")
    world = make_world(tmp_path, SandboxLimitsConfig(processes=8))
    with world.gateway:
        tool = world.add("escape")
        outcome = world.gateway.call_sync(
            tool,
            {"op": "write", "path": str(hierarchy.parent / "tasks")},
            workspace=hierarchy.parent,
        )
        assert outcome.code == ErrorCode.TOOL_ERROR, outcome
        assert "filesystem, or inside one" in (outcome.message or "")
        world.still_serves(tool)
