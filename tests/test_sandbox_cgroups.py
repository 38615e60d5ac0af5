"""The per-call pids cgroup: the process limit that holds when the gateway runs as root.

Real bubblewrap and real cgroups; a test that needs a usable pids cgroup skips (saying why) on a
host that has none. The policy tests (a root host without a cgroup) point ``pids_cgroup`` at a
folder that is not a cgroup and make the gateway look like root, so they run anywhere bubblewrap
works.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from folder_tools import require_program
from test_sandbox_attacks import World, call_cgroups, make_world
from toolgate import ErrorCode
from toolgate.backends.processes import run_process
from toolgate.cli.options import CliState
from toolgate.cli.sandbox import register, sandbox_report
from toolgate.model import (
    ImplementationKind,
    OsCommandEntry,
    Permissions,
    SandboxMode,
    SandboxSpec,
    SideEffect,
    Tool,
)
from toolgate.sandbox import cgroups
from toolgate.sandbox import host as host_module
from toolgate.sandbox.cgroups import (
    BWRAP_TASKS,
    CallCgroup,
    PidsHierarchy,
    probe_pids_cgroup,
    sweep_stale,
)
from toolgate.sandbox.host import HostCapabilities, forget_probes, probe_host
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig, SandboxLimitsConfig

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _needs_a_sandbox() -> Iterator[None]:
    require_program("bwrap")
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")
    yield
    forget_probes()  # tests below probe with a patched uid or a fake cgroup folder


def _cgroup_host() -> HostCapabilities:
    host = probe_host()
    if host.pids_cgroup is None:
        pytest.skip(f"no usable pids cgroup on this host: {host.cgroup_problem}")
    return host


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[CallCgroup, int]]:
    """Every per-call cgroup the sandbox makes, with the pids.max it was given."""
    made: list[tuple[CallCgroup, int]] = []
    real = CallCgroup.create

    def create(hierarchy: PidsHierarchy, max_pids: int) -> CallCgroup:
        cgroup = real(hierarchy, max_pids)
        made.append((cgroup, max_pids))
        return cgroup

    monkeypatch.setattr(CallCgroup, "create", staticmethod(create))
    return made


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = make_world(tmp_path, SandboxLimitsConfig(processes=32, memory_mb=512))
    with made.gateway:
        yield made


# -- the cgroup of a call is gone afterwards ----------------------------------------------------


def test_the_cgroup_is_gone_after_an_ok_call(
    world: World, recorded: list[tuple[CallCgroup, int]]
) -> None:
    _cgroup_host()
    tool = world.add("fine")
    world.still_serves(tool)
    assert [limit for _, limit in recorded] == [32 + BWRAP_TASKS]
    assert not recorded[0][0].path.exists()
    assert call_cgroups() == []


def test_the_cgroup_is_gone_after_a_timeout(
    world: World, recorded: list[tuple[CallCgroup, int]]
) -> None:
    _cgroup_host()
    tool = world.add("sleepy", timeout=1.0)
    outcome = world.call(tool, op="grandchild", path="/tmp/marker")
    assert outcome.code is ErrorCode.TIMEOUT
    assert len(recorded) == 1 and not recorded[0][0].path.exists()
    assert call_cgroups() == []


def test_the_cgroup_is_gone_after_a_fork_bomb(
    world: World, recorded: list[tuple[CallCgroup, int]]
) -> None:
    _cgroup_host()
    tool = world.add("bomb", timeout=20.0)
    outcome = world.call(tool, op="fork_bomb")
    assert outcome.code is None, outcome.message
    assert outcome.content["value"].startswith("stopped after "), outcome.content
    assert len(recorded) == 1 and not recorded[0][0].path.exists()
    assert call_cgroups() == []


def _sleeper(mode: SandboxMode = SandboxMode.COMPARTMENT) -> Tool:
    return Tool(
        id="cmd:sleep",
        description="d",
        input_schema={"type": "object"},
        kind=ImplementationKind.OS,
        entry=OsCommandEntry(("/bin/sleep", "30")),
        side_effect=SideEffect.READ_ONLY,
        sandbox=SandboxSpec(mode, Permissions()),
    )


def test_the_cgroup_is_gone_after_a_cancelled_call(
    tmp_path: Path, recorded: list[tuple[CallCgroup, int]]
) -> None:
    _cgroup_host()
    sandbox = Sandbox()
    started = asyncio.Event()

    async def call() -> None:
        async with sandbox.prepare(
            _sleeper(), ["/bin/sleep", "30"], env={}, workspace=tmp_path
        ) as cmd:
            started.set()
            await run_process(
                cmd.argv, stdin=b"", env=cmd.env, cwd=cmd.cwd, timeout=60, pass_fds=cmd.pass_fds
            )

    async def main() -> None:
        task = asyncio.create_task(call())
        await started.wait()
        cgroup = recorded[0][0]
        for _ in range(200):  # until the sandbox has joined (no timing assertion)
            if len(cgroup.pids()) >= 2:
                break
            await asyncio.sleep(0.01)
        assert len(cgroup.pids()) >= 2, "bubblewrap never joined the call's cgroup"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert len(recorded) == 1 and not recorded[0][0].path.exists()
    assert call_cgroups() == []


# -- the mechanism itself -----------------------------------------------------------------------


def test_a_wrapped_command_runs_inside_its_cgroup_with_the_limit(tmp_path: Path) -> None:
    hierarchy = _cgroup_host().pids_cgroup
    assert hierarchy is not None
    cgroup = CallCgroup.create(hierarchy, 5)
    try:
        assert (cgroup.path / "pids.max").read_text().strip() == "5"
        done = subprocess.run(
            cgroup.wrap(["cat", "/proc/self/cgroup"]), capture_output=True, check=True
        )
        assert cgroup.path.name in done.stdout.decode()
        # Six sleeps in a cgroup of five: the shell cannot start them all.
        bomb = "for i in 1 2 3 4 5 6; do sleep 5 & done; wait"
        done = subprocess.run(cgroup.wrap(["sh", "-c", bomb]), capture_output=True, check=False)
        assert b"fork" in done.stderr.lower() or b"resource" in done.stderr.lower(), done
    finally:
        # The killed sleeps leave the cgroup once they are reaped, which may take a moment on a
        # loaded machine (as CallCgroup.close, retry with pauses rather than in a tight loop).
        deadline = time.monotonic() + 10
        while not cgroup.remove_now() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not cgroup.path.exists()


def test_joining_fails_closed_when_the_cgroup_is_gone(tmp_path: Path) -> None:
    hierarchy = _cgroup_host().pids_cgroup
    assert hierarchy is not None
    cgroup = CallCgroup.create(hierarchy, 5)
    assert cgroup.remove_now()
    marker = tmp_path / "ran"
    done = subprocess.run(cgroup.wrap(["touch", str(marker)]), capture_output=True, check=False)
    assert done.returncode == 126 and b"cannot join" in done.stderr
    assert not marker.exists()


def test_stale_cgroups_of_dead_gateways_are_swept(monkeypatch: pytest.MonkeyPatch) -> None:
    hierarchy = _cgroup_host().pids_cgroup
    assert hierarchy is not None
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = hierarchy.parent / f"toolgate-{dead.pid}-deadbeef0000"
    ours = hierarchy.parent / f"toolgate-{os.getpid()}-feedface0000"
    alive = hierarchy.parent / "toolgate-1-cafe00000000"  # pid 1 always runs
    made = [path for path in (stale, ours, alive) if not path.exists()]
    for path in made:
        path.mkdir()
    try:
        # Just made: it may be a call of a gateway in another PID namespace, about to join.
        sweep_stale(hierarchy.parent)
        assert stale.exists()
        monkeypatch.setattr(cgroups, "STALE_AFTER", 0.0)
        sweep_stale(hierarchy.parent)
        assert not stale.exists()
        assert ours.exists() and alive.exists()
    finally:
        for path in made:
            if path.exists():
                path.rmdir()


def test_a_folder_that_is_not_a_cgroup_is_refused(tmp_path: Path) -> None:
    probe = probe_pids_cgroup(str(tmp_path))
    assert probe.hierarchy is None
    assert "not a cgroup with the pids controller" in (probe.problem or "")
    assert list(tmp_path.iterdir()) == []  # its test folder was removed again


# -- policy: root without a usable cgroup -----------------------------------------------------


@pytest.fixture
def root_without_cgroup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Look like root, and point the cgroup at a folder that is not one."""
    monkeypatch.setattr(host_module, "_runs_as_root", lambda: True)
    forget_probes()
    folder = tmp_path / "not-a-cgroup"
    folder.mkdir()
    return folder


def _os_tool() -> Tool:
    return dataclasses.replace(
        _sleeper(), id="cmd:touch", entry=OsCommandEntry(("/usr/bin/touch", "/tmp/x"))
    )


def test_root_without_a_cgroup_makes_compartment_tools_unavailable(
    tmp_path: Path, root_without_cgroup: Path
) -> None:
    config = SandboxConfig(pids_cgroup=str(root_without_cgroup))
    sandbox = Sandbox(config)
    assert sandbox.host().process_limit is None
    reason = sandbox.unavailable_reason(_os_tool())
    assert reason is not None
    for words in (
        "cannot be enforced",
        "ordinary user",
        "pids cgroup",
        "allow_unlimited_processes",
    ):
        assert words in reason, reason
    assert sandbox.unavailable_reason(_sleeper(SandboxMode.HOST)) is None
    report = sandbox_report(config)
    assert report["works"] is True and report["ready"] is False
    assert report["compartment_tools"].startswith("are unavailable")
    assert report["process_limit"].startswith("not enforced")

    world = make_world(tmp_path)
    world.backend.sandbox = sandbox
    with world.gateway:
        tool = world.add("fenced")
        marker = world.workspace / "ran.txt"
        outcome = world.call(tool, op="write", path=str(marker))
        assert outcome.code is ErrorCode.UNAVAILABLE, outcome
        assert "allow_unlimited_processes" in (outcome.message or "")
        assert not marker.exists()


def test_the_opt_in_runs_them_sandboxed_and_labelled(
    tmp_path: Path, root_without_cgroup: Path
) -> None:
    config = SandboxConfig(pids_cgroup=str(root_without_cgroup), allow_unlimited_processes=True)
    sandbox = Sandbox(config)
    assert sandbox.unavailable_reason(_os_tool()) is None
    enforced = sandbox.enforced(_os_tool())
    assert enforced["processes"].startswith("not enforced")
    assert "allow_unlimited_processes" in enforced["processes"]
    report = sandbox_report(config)
    assert report["ready"] is True
    assert "WITHOUT a process limit" in report["compartment_tools"]
    assert report["limits"]["processes"].startswith("not enforced")

    world = make_world(tmp_path)
    world.backend.sandbox = sandbox
    with world.gateway:
        tool = world.add("labelled")
        outcome = world.call(tool, op="hello")
        assert outcome.code is None, outcome.message
        assert outcome.metadata["sandbox"]["enforced"] is True
        assert outcome.metadata["sandbox"]["not_enforced"] == ["processes"]


def test_an_ordinary_user_without_a_cgroup_keeps_rlimit_nproc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host_module, "_runs_as_root", lambda: False)
    forget_probes()
    folder = tmp_path / "not-a-cgroup"
    folder.mkdir()
    sandbox = Sandbox(SandboxConfig(pids_cgroup=str(folder)))
    host = sandbox.host()
    assert host.pids_cgroup is None and host.nproc_enforced
    assert host.process_limit == "RLIMIT_NPROC in the sandbox's user namespace"
    assert sandbox.unavailable_reason(_os_tool()) is None
    assert sandbox.enforced(_os_tool())["processes"] == (
        "enforced: RLIMIT_NPROC in the sandbox's user namespace"
    )


# -- sandbox check ------------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main(ctx: typer.Context) -> None:
        ctx.obj = CliState()

    register(app)
    return app


def test_sandbox_check_names_the_mechanism(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = _cgroup_host()
    assert host.pids_cgroup is not None
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(_app(), ["sandbox", "check", "--json"])
    assert result.exit_code == 0, result.stdout
    report = json.loads(result.stdout)
    version = host.pids_cgroup.version
    assert report["process_limit"].startswith(f"pids cgroup v{version} (pids.max 256 per call")
    assert report["limits"]["processes"] == f"enforced: {report['process_limit']}"
    text = CliRunner().invoke(_app(), ["sandbox", "check"])
    assert f"processes: enforced: pids cgroup v{version}" in text.stdout
