"""What a fresh sandboxed call reuses from earlier calls is never stale (issue 26).

A fresh sandboxed call no longer works out the path rule and the identity guard of the
gateway's folders from scratch (:mod:`toolgate.sandbox.path_checks`), sets its rlimits in the
shell that joins its pids cgroup instead of starting ``prlimit`` (:mod:`toolgate.sandbox.limits`)
and waits for its sandbox's last process through a pidfd (:mod:`toolgate.sandbox.exits`). Each
test changes what a kept answer depended on between two real calls through the gateway, under
real bubblewrap, and expects the second call to see the change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from folder_tools import clean_environ, require_program, write_tool
from gateway_support import gateway_with
from toolgate import ErrorCode, Gateway
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import ImplementationKind, Permissions, SandboxMode, SandboxSpec, SideEffect
from toolgate.registry import RegisteredTool
from toolgate.sandbox import path_checks
from toolgate.sandbox.cgroups import (
    PROBE_LIMITS,
    CallCgroup,
    PidsHierarchy,
    _shell_sets_limits,
    expected_limits,
    limits_read,
)
from toolgate.sandbox.exits import wait_exited
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.limits import ResourceLimits, shell_limit_args
from toolgate.sandbox.path_checks import PathChecks
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig, SandboxLimitsConfig

PROBE = Path(__file__).parent / "fixtures" / "sandbox" / "probe.py"


@pytest.fixture(autouse=True)
def _a_host_that_sandboxes() -> None:
    """Every test here runs real sandboxes: skip where bubblewrap cannot make one."""
    require_program("bwrap")
    if not (host := probe_host()).works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


@dataclasses.dataclass
class Scene:
    """A gateway with a sandbox service whose state folder is ``state``."""

    gateway: Gateway
    sandbox: Sandbox
    tools: Path
    state: Path
    root: Path

    def add(
        self, name: str, *, fs: tuple[str, ...] = (), checked: bool = True, script: str = ""
    ) -> str:
        """Declare (or declare again) the probe tool ``name`` (or one running ``script``);
        ``checked``: with the registration's availability check (else only the call's own
        checks run)."""
        source = script or PROBE.read_text()
        folder = write_tool(self.tools, name, source, runtime="python")
        loaded = load_tool_folder(folder)
        assert loaded.tool is not None, loaded.diagnostics
        tool = dataclasses.replace(
            loaded.tool,
            side_effect=SideEffect.LOCAL_WRITE,
            sandbox=SandboxSpec(SandboxMode.COMPARTMENT, Permissions(fs=fs)),
        )
        backend = self.gateway._backends[ImplementationKind.SCRIPT]
        reason = backend.unavailable_reason(tool) if checked else None  # type: ignore[attr-defined]
        self.gateway.registry.replace(RegisteredTool(tool, None, reason))
        return tool.id

    def call(self, tool_id: str, workspace: Path, **arguments: Any) -> Any:
        return self.gateway.call_sync(tool_id, {"op": "hello", **arguments}, workspace=workspace)


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    tools, state = tmp_path / "tools", tmp_path / "state"
    tools.mkdir()
    state.mkdir()
    unlimited = probe_host().process_limit is None
    sandbox = Sandbox(SandboxConfig(allow_unlimited_processes=unlimited), state_folders=[state])
    gateway = gateway_with(environ=clean_environ(), env_from_process=True, sandbox=sandbox)
    with gateway:
        yield Scene(gateway, sandbox, tools, state, tmp_path)


def _ran(outcome: Any) -> bool:
    return outcome.code is None and outcome.content == {"ok": True, "value": "hello"}


def _refused(outcome: Any) -> bool:
    # FORBIDDEN from the pipeline's check before anything runs, TOOL_ERROR from the sandbox's.
    refused = outcome.code in (ErrorCode.FORBIDDEN, ErrorCode.TOOL_ERROR)
    return refused and "which a sandbox never binds" in (outcome.message or "")


# -- the path checks kept between calls ---------------------------------------------------------


def test_a_workspace_replaced_by_a_link_to_the_gateways_state_is_refused(scene: Scene) -> None:
    tool = scene.add("swapped")
    workspace = scene.root / "projects" / "work"
    workspace.mkdir(parents=True)
    assert _ran(scene.call(tool, workspace))
    # Same spelling, now a link into the state folder (the gateway's own): checked again.
    shutil.rmtree(workspace)
    workspace.symlink_to(scene.state)
    assert _refused(scene.call(tool, workspace))
    # And its parent turned into a link: the same words, another folder.
    workspace.unlink()
    (scene.root / "projects").rename(scene.root / "old-projects")
    (scene.root / "projects").symlink_to(scene.state.parent)
    (scene.state / "work").mkdir()
    outcome = scene.call(tool, scene.root / "projects" / "state" / "work")
    assert _refused(outcome), outcome


def test_a_folder_guarded_after_a_call_is_refused_at_the_next(scene: Scene) -> None:
    tool = scene.add("guarded")
    workspace = scene.root / "later-guarded"
    workspace.mkdir()
    assert _ran(scene.call(tool, workspace))
    scene.sandbox.guard([workspace], state=True)
    assert _refused(scene.call(tool, workspace))


def test_a_gateway_folder_link_pointed_elsewhere_is_checked_again(scene: Scene) -> None:
    first, second = scene.root / "release-1", scene.root / "release-2"
    first.mkdir()
    second.mkdir()
    current = scene.root / "current"
    current.symlink_to(first)
    scene.sandbox.guard([current])  # a tool folder reached through a link, as deployed
    tool = scene.add("deployed")
    assert _ran(scene.call(tool, second))
    # The operator switches the release: the folder the gateway loads from is now release-2.
    current.unlink()
    current.symlink_to(second)
    assert _refused(scene.call(tool, second))


@pytest.mark.parametrize("how", ["renamed", "made-again"])
def test_a_gateway_folder_moved_under_a_workspace_is_checked_again(scene: Scene, how: str) -> None:
    # Moved with rename (same inode) or removed and made again elsewhere (ext4 often gives the
    # inode number back), the link re-pointed: the folder's identity alone is unchanged, but
    # the workspace now holds it.
    old, workspace = scene.root / "a" / "guarded", scene.root / "b"
    old.mkdir(parents=True)
    workspace.mkdir()
    link = scene.root / "current"
    link.symlink_to(old)
    scene.sandbox.guard([link], state=True)
    tool = scene.add("moved")
    for _ in range(2):
        assert _ran(scene.call(tool, workspace))
    if how == "renamed":
        old.rename(workspace / "guarded")
    else:
        old.rmdir()
        (workspace / "guarded").mkdir()
    link.unlink()
    link.symlink_to(workspace / "guarded")
    outcome = scene.call(tool, workspace)
    assert outcome.code is not None and "guarded" in (outcome.message or ""), outcome


def test_a_changed_fs_declaration_is_checked_again(scene: Scene) -> None:
    data = scene.root / "data"
    data.mkdir()
    workspace = scene.root / "ws"
    workspace.mkdir()
    tool = scene.add("reader", fs=(str(data),))
    assert _ran(scene.call(tool, workspace))
    # The same tool declared again, now asking for the gateway's state folder (registered
    # without the loader's check: the call's own preparation must refuse it).
    tool = scene.add("reader", fs=(str(scene.state),), checked=False)
    outcome = scene.call(tool, workspace)
    assert outcome.code is not None and "never shows it to a tool" in (outcome.message or "")
    assert not _ran(outcome)


def test_kept_checks_are_made_again_when_a_folder_is_replaced(tmp_path: Path) -> None:
    sandbox = Sandbox(state_folders=[tmp_path / "state"])
    (tmp_path / "state").mkdir()
    (tmp_path / "other").mkdir()
    checks = PathChecks()
    first = checks.of(sandbox.paths(), ())
    assert checks.of(sandbox.paths(), ()) is first  # nothing changed: kept
    (tmp_path / "state").rmdir()
    (tmp_path / "other").rename(tmp_path / "state")  # the same name, another folder
    assert checks.of(sandbox.paths(), ()) is not first


def test_a_path_with_a_link_is_never_answered_from_what_was_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    sandbox = Sandbox(state_folders=[state])
    checked = sandbox.checks()
    target = tmp_path / "fine"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    assert checked.workspace_problem(link, writable=True) is None
    link.unlink()
    link.symlink_to(state)  # the kept object is the same; the link's target is not
    assert checked.workspace_problem(link, writable=True) is not None


def test_a_refusal_seen_while_a_link_was_swapped_in_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state, folder, away = tmp_path / "state", tmp_path / "d", tmp_path / "d-away"
    state.mkdir()
    folder.mkdir()
    checked = Sandbox(state_folders=[state]).checks()
    original = path_checks.workspace_problem

    def swapped_while_checked(path: Path, policy: Any, *, writable: bool) -> str | None:
        folder.rename(away)  # for the length of the rule's own look, `d` is a link
        folder.symlink_to(state)
        try:
            return original(path, policy, writable=writable)
        finally:
            folder.unlink()
            away.rename(folder)

    monkeypatch.setattr(path_checks, "workspace_problem", swapped_while_checked)
    assert checked.workspace_problem(folder, writable=True) is not None
    monkeypatch.undo()
    # A folder again: answered by the rule now, not by the refusal of a moment ago.
    assert checked.workspace_problem(folder, writable=True) is None


# -- the rlimits set by the join shell ----------------------------------------------------------


def _limits_host() -> PidsHierarchy:
    hierarchy = probe_host().pids_cgroup
    if hierarchy is None:
        pytest.skip("no usable pids cgroup here: prlimit sets the limits, as before")
    return hierarchy


LIMITS = (
    "import json, sys\njson.load(sys.stdin)\n"
    "print(json.dumps({'value': open('/proc/self/limits').read()}))\n"
)


def test_the_tool_gets_its_limits_soft_and_hard(tmp_path: Path) -> None:
    _limits_host()
    tools = tmp_path / "tools"
    tools.mkdir()
    limits = SandboxLimitsConfig(cpu_seconds=17, memory_mb=1500, file_size_mb=9)
    sandbox = Sandbox(SandboxConfig(limits=limits))
    gateway = gateway_with(environ=clean_environ(), env_from_process=True, sandbox=sandbox)
    with gateway:
        scene = Scene(gateway, sandbox, tools, tmp_path, tmp_path)
        tool = scene.add("limited", script=LIMITS)
        outcome = scene.call(tool, tmp_path)
    assert outcome.code is None, outcome.message
    wanted = ResourceLimits(
        cpu_seconds=17, memory_bytes=1500 * 1024 * 1024, file_size_bytes=9 * 1024 * 1024
    )
    # Whoever set them (the join shell here when it proved it can, else prlimit), the tool
    # has exactly these, soft and hard.
    assert limits_read(outcome.content["value"]) == expected_limits(wanted)


def test_the_probe_refuses_a_shell_that_counts_in_other_units() -> None:
    hierarchy = _limits_host()
    if hierarchy.shell_limits is False:
        pytest.skip(f"{hierarchy.shell} does not set the limits here: prlimit does")
    bash = shutil.which("bash", path="/usr/bin:/bin")
    if bash is None:
        pytest.skip("no bash here")
    # Not invoked as "sh", bash counts `ulimit -f` in KiB, not in 512-byte blocks.
    as_bash = dataclasses.replace(hierarchy, shell=bash, shell_limits=False)
    assert _shell_sets_limits(as_bash) is False
    assert _shell_sets_limits(dataclasses.replace(hierarchy, shell_limits=False)) is True


def test_a_join_shell_that_was_not_proven_never_sets_limits(tmp_path: Path) -> None:
    cgroup = CallCgroup(tmp_path, 1, "/bin/sh", sets_limits=False)
    with pytest.raises(ValueError):
        cgroup.wrap(["true"], limits=PROBE_LIMITS)
    odd = ResourceLimits(memory_bytes=1000 * 1024 + 1)
    assert shell_limit_args(odd) is None
    with pytest.raises(ValueError):
        CallCgroup(tmp_path, 1, "/bin/sh", sets_limits=True).wrap(["true"], limits=odd)


# -- waiting for the sandbox's last process -----------------------------------------------------


def test_waiting_for_exits_returns_when_they_are_gone_or_at_the_timeout() -> None:
    quick = subprocess.Popen([sys.executable, "-c", "pass"])
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        asyncio.run(wait_exited([quick.pid], timeout=60))
        assert quick.poll() is not None  # woken by its exit, not by the timeout
        asyncio.run(wait_exited([slow.pid], timeout=0.05))
        assert slow.poll() is None  # the timeout ends the wait; nothing is killed
        asyncio.run(wait_exited([os.getpid() + 10_000_000], timeout=60))  # no such process
    finally:
        slow.kill()
        slow.wait()
        quick.wait()
