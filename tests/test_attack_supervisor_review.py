"""Attack review of the Landlock launcher's supervisor: the unconfined parent of the tool.

Each test makes real calls through the installed ``toolgate`` console script, with
``sandbox.layer: landlock`` forcing the layer: the tool's end (exit code, signal) must reach the
gateway exactly as before the supervisor, and the tool must not reach the supervisor.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from js_support import js_runtime
from toolgate.sandbox.landlock import MIN_ABI
from toolgate.sandbox.landlock_exec import abi_version

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = pytest.mark.slow


def _landlock_works() -> None:
    if abi_version() < MIN_ABI:
        pytest.skip(f"this kernel's Landlock ABI is {abi_version()} (< {MIN_ABI})")
    pytest.importorskip("pyseccomp")


def _tool(root: Path, name: str, script: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(script)
    (folder / "tool.md").write_text(
        f"---\nname: {name}\nscript: run.py\nruntime: python\nsandbox: compartment\n"
        "inputSchema:\n  type: object\n---\nA hostile test tool.\n"
    )


def _config(project: Path, sandbox: str = "") -> None:
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\nsandbox:\n  layer: landlock\n"
        + textwrap.indent(textwrap.dedent(sandbox), "  ")
    )


def _call(run_cli: RunCli, tool: str, args: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    workspace = tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    done = run_cli("call", tool, "--json", "-a", json.dumps(args), "--workspace", str(workspace))
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


#: Kills itself with the signal it is given, or spins until its CPU limit kills it.
DIE = r"""
import json, os, sys
signum = json.load(sys.stdin)["signal"]
if signum:
    os.kill(os.getpid(), signum)
while True:
    pass
"""


def test_a_tool_killed_by_sigkill_or_its_cpu_limit_is_reported_as_killed(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """SIGKILL (the CPU limit's and the kernel's OOM killer's signal) cannot be given a handler:
    the supervisor must still end by it, not by a traceback of its own."""
    _landlock_works()
    _tool(project / "tools", "die", DIE)
    _config(project, "limits:\n  cpu_seconds: 1\n")
    for signum in (9, 0):  # 0: the CPU limit (soft = hard: the kernel sends SIGKILL)
        outcome = _call(run_cli, "t:die", {"signal": signum}, tmp_path)
        assert outcome["status"] == "error", outcome
        assert "was killed by signal 9" in outcome["message"], outcome
        assert "Traceback" not in outcome["message"], outcome


#: Tries every way at the unconfined supervisor (its parent): signals, ptrace, its memory.
REACH = r"""
import ctypes, errno, json, os, signal, sys
json.load(sys.stdin)
supervisor = os.getppid()
reached = []
for signum in (signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL, signal.SIGCONT):
    try:
        os.kill(supervisor, signum)
        reached.append(f"signal {signum}")
    except PermissionError:
        pass
try:
    os.killpg(os.getsid(0), signal.SIGSTOP)
    reached.append("its process group")
except PermissionError:
    pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, supervisor, 0, 0) == 0:  # PTRACE_ATTACH
    reached.append("ptrace")
for name in ("mem", "environ"):
    try:
        open(f"/proc/{supervisor}/{name}", "rb").read(1)
        reached.append(name)
    except OSError:
        pass
print(json.dumps({"reached": reached}))
"""


def test_the_tool_cannot_reach_its_supervisor(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    _landlock_works()
    _tool(project / "tools", "reach", REACH)
    _config(project)
    outcome = _call(run_cli, "t:reach", {}, tmp_path)
    assert outcome["status"] == "ok", outcome
    assert outcome["content"] == {"reached": []}


#: Starts a grandchild that outlives its parent (adopted by the supervisor), records every pid,
#: then blocks past its timeout.
STUCK = r"""
import json, os, subprocess, sys, time
workspace = json.load(sys.stdin)["workspace"]
middle = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
    "'import time; time.sleep(120)']).pid, flush=True)"],
    stdout=subprocess.PIPE)
grandchild = int(middle.stdout.readline())
middle.wait()
with open(os.path.join(workspace, "pids.json"), "w") as out:
    json.dump([os.getppid(), os.getpid(), grandchild], out)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie is reaped by init soon; it holds nothing


def _still_alive(pids: list[int], within: float = 10.0) -> list[int]:
    """The processes of ``pids`` still alive after ``within`` seconds (at once when none is).

    A process killed (SIGKILL to its group) dies when the kernel next schedules it: under load
    it may still show as running for a moment after the one that killed it has exited (CI saw
    the JS host so once). That moment is not a leak; one alive after ten seconds is."""
    deadline = time.monotonic() + within
    alive = [pid for pid in pids if _alive(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if _alive(pid)]
    return alive


def test_a_timed_out_call_leaves_no_process(project: Path, run_cli: RunCli, tmp_path: Path) -> None:
    _landlock_works()
    _tool(project / "tools", "stuck", STUCK)
    (project / "tools" / "stuck" / "tool.md").write_text(
        (project / "tools" / "stuck" / "tool.md")
        .read_text()
        .replace(
            "sandbox: compartment\n", "sandbox: compartment\nside_effect: write\ntimeout: 2000\n"
        )
    )
    _config(project, "allow_unlimited_processes: true\n")
    workspace = tmp_path / "workspace"
    outcome = _call(run_cli, "t:stuck", {"workspace": str(workspace)}, tmp_path)
    assert outcome["status"] == "error" and outcome["code"] == "timeout", outcome["message"]
    pids = json.loads((workspace / "pids.json").read_text())
    # The supervisor, the tool, and the grandchild the supervisor adopted.
    assert _still_alive(pids) == []


#: Records that it ran, and that it was still running a moment later.
MARK = r"""
import json, os, sys, time
workspace = json.load(sys.stdin)["workspace"]
open(os.path.join(workspace, "ran"), "w").close()
time.sleep(3)
open(os.path.join(workspace, "still"), "w").close()
"""


def test_the_gateways_death_between_fork_and_process_group_still_stops_the_tool(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    """The gateway's death reaches the supervisor as SIGTERM (``PR_SET_PDEATHSIG``). Arriving
    after the fork but before the child made its process group, it used to kill no group
    (``killpg``: no such group) and the tool ran to its end with the gateway gone. strace widens
    that window: every ``setpgid`` waits 1.5 s before it enters the kernel."""
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time

    _landlock_works()
    strace = shutil.which("strace")
    if strace is None:
        pytest.skip("strace is not installed")
    _tool(project / "tools", "mark", MARK)
    (project / "tools" / "mark" / "tool.md").write_text(
        (project / "tools" / "mark" / "tool.md")
        .read_text()
        .replace("sandbox: compartment\n", "sandbox: compartment\nside_effect: write\n")
    )
    _config(project)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    toolgate = Path(sys.executable).parent / "toolgate"
    args = json.dumps({"workspace": str(workspace)})
    delay = [
        "-o",
        os.devnull,
        "-f",
        "-e",
        "trace=setpgid",
        "-e",
        "inject=setpgid:delay_enter=1500000",
    ]
    command = [str(toolgate), "call", "t:mark", "--json", "-a", args, "--workspace", str(workspace)]
    call = subprocess.Popen(
        [strace, *delay, *command],
        cwd=project,
        env={**os.environ, "TOOLGATE_HOME": str(toolgate_home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        launchers: list[int] = []
        for _ in range(400):  # the call's supervisor and its child, not yet the tool
            launchers = [
                int(pid)
                for pid in os.listdir("/proc")
                if pid.isdigit() and _cmdline_has(int(pid), b"landlock_exec.py", b"mark")
            ]
            if len(launchers) >= 2 or call.poll() is not None:
                break
            time.sleep(0.02)
        assert len(launchers) >= 2, "the launcher did not fork"
        os.kill(min(launchers), signal.SIGTERM)  # the supervisor: the older pid
        out, _ = call.communicate(timeout=60)
    finally:
        if call.poll() is None:
            call.kill()
            call.wait()
    assert not (workspace / "still").exists(), "the tool ran on after the gateway's death"
    outcome = json.loads(out[out.index(b"{") :])
    assert outcome["status"] == "error", outcome


def _cmdline_has(pid: int, *words: bytes) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return all(word in cmdline for word in words)


def test_the_tool_starts_with_default_signal_dispositions(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    """Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across ``execve``:
    a shell tool under the Python launcher would not die by SIGPIPE at a closed pipe nor by
    SIGXFSZ at its file-size limit, as it does under bubblewrap (started with the defaults)."""
    _landlock_works()
    folder = project / "tools" / "traps"
    folder.mkdir(parents=True)
    (folder / "run.sh").write_text(
        'cat > /dev/null\nignored="$(trap -p)"\nprintf \'{"ignored": "%s"}\\n\' "$ignored"\n'
    )
    (folder / "tool.md").write_text(
        "---\nname: traps\nscript: run.sh\nruntime: bash\nsandbox: compartment\n"
        "inputSchema:\n  type: object\n---\nLists the signals it was started ignoring.\n"
    )
    _config(project)
    outcome = _call(run_cli, "t:traps", {}, tmp_path)
    assert outcome["status"] == "ok", outcome.get("message")
    assert outcome["content"] == {"ignored": ""}


@pytest.mark.usefixtures("js_runtime")
def test_a_closed_gateway_leaves_no_js_host_nor_its_supervisor(tmp_path: Path) -> None:
    """The JS host is long-lived: the gateway stops it at close. Its supervisor (the process the
    gateway started) and the Node.js host (the supervisor's child) must both be gone then."""
    from gateway_support import gateway_with
    from js_support import plugin_copy
    from toolgate.formats.plugin.source import PluginSource
    from toolgate.sandbox.runner import Sandbox
    from toolgate.sandbox.settings import SandboxConfig

    _landlock_works()
    data = tmp_path / "data"
    data.mkdir()
    folder = plugin_copy(tmp_path, "probe", permissions={"fs": [str(data)]})
    with gateway_with(environ={}, sandbox=Sandbox(SandboxConfig(layer="landlock"))) as gateway:
        assert gateway.add_source(folder).diagnostics == []
        assert gateway.call_sync("@toolgate-test/probe:echo", {"n": 1}).ok
        [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
        started = list(source.js_hosts.pids())
        hosts = [
            int(child)
            for pid in started
            for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
        assert started and hosts
    assert _still_alive(started + hosts) == []
