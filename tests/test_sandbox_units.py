"""The sandbox's command line, environment and the ``os`` command seam."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from folder_tools import clean_environ, require_program
from gateway_support import gateway_with
from toolgate import Gateway
from toolgate.backends.environment import ScriptEnvironment
from toolgate.backends.os_command import OsCommandBackend, OsCommandBinding
from toolgate.model import (
    ImplementationKind,
    OsCommandEntry,
    Permissions,
    SandboxMode,
    SandboxSpec,
    SideEffect,
    Tool,
)
from toolgate.registry import RegisteredTool
from toolgate.sandbox.bwrap import BwrapSpec, bwrap_argv, install_root
from toolgate.sandbox.cgroups import BWRAP_TASKS, PidsHierarchy, own_cgroup_folders
from toolgate.sandbox.host import HostCapabilities, probe_host
from toolgate.sandbox.limits import ResourceLimits, prlimit_argv
from toolgate.sandbox.runner import SANDBOX_ENV, Sandbox, sandbox_environment
from toolgate.sandbox.settings import SandboxConfig
from toolgate.sandbox.workspaces import workspace_problem


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_the_workspace_is_writable_only_when_the_level_writes(tmp_path: Path) -> None:
    writable = bwrap_argv("bwrap", BwrapSpec(["true"], tmp_path, workspace_writable=True))
    read_only = bwrap_argv("bwrap", BwrapSpec(["true"], tmp_path, workspace_writable=False))
    assert (str(tmp_path), str(tmp_path)) in _pairs(writable, "--bind")
    assert (str(tmp_path), str(tmp_path)) in _pairs(read_only, "--ro-bind")
    assert (str(tmp_path), str(tmp_path)) not in _pairs(read_only, "--bind")


def test_namespaces_session_and_a_read_only_root() -> None:
    argv = bwrap_argv("bwrap", BwrapSpec(["tool"], None, workspace_writable=True))
    for flag in ("--unshare-all", "--die-with-parent", "--new-session"):
        assert flag in argv
    assert argv[-2:] == ["--", "tool"]
    assert argv[argv.index("--remount-ro") : argv.index("--remount-ro") + 2] == [
        "--remount-ro",
        "/",
    ]
    # No workspace: the tool works in its private /tmp.
    assert argv[argv.index("--chdir") + 1] == "/tmp"


def test_etc_is_a_short_list_and_certificates_only_with_network() -> None:
    offline = bwrap_argv("bwrap", BwrapSpec(["t"], None, workspace_writable=False))
    online = bwrap_argv("bwrap", BwrapSpec(["t"], None, workspace_writable=False, network=True))
    bound = {src for src, _ in _pairs(offline, "--ro-bind")}
    assert not any(p in bound for p in ("/etc/passwd", "/etc/shadow", "/etc/hosts", "/etc"))
    assert not any(p.startswith("/etc/ssl") for p in bound)
    if os.path.exists("/etc/ssl"):
        assert ("/etc/ssl", "/etc/ssl") in _pairs(online, "--ro-bind")


def test_protected_paths_under_a_bind_are_covered(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".env").write_text("X=1")
    (home / "secrets").mkdir()
    spec = BwrapSpec(
        ["t"],
        None,
        workspace_writable=False,
        ro_paths=[tmp_path],
        protected=[home / ".env", home / "secrets", Path("/elsewhere/not-bound")],
    )
    argv = bwrap_argv("bwrap", spec)
    assert ("/dev/null", str(home / ".env")) in _pairs(argv, "--ro-bind")
    assert str(home / "secrets") in [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert "/elsewhere/not-bound" not in argv


def test_nested_read_only_paths_are_bound_once(tmp_path: Path) -> None:
    inner = tmp_path / "a" / "b"
    inner.mkdir(parents=True)
    argv = bwrap_argv(
        "bwrap", BwrapSpec(["t"], None, workspace_writable=False, ro_paths=[inner, tmp_path])
    )
    sources = [src for src, _ in _pairs(argv, "--ro-bind")]
    assert str(tmp_path) in sources and str(inner) not in sources


def test_install_roots() -> None:
    assert install_root("/usr/bin/python3") == []
    assert install_root("/opt/node/bin/node") == [Path("/opt/node")]
    assert install_root("/opt/tool/run") == [Path("/opt/tool")]


def test_the_environment_is_fixed_plus_declared() -> None:
    env = sandbox_environment(
        ("A", "B", "MISSING"), {"A": "1", "B": "() { :; }", "PATH": "/host/bin", "C": "no"}
    )
    assert env == {**SANDBOX_ENV, "A": "1"}


def test_prlimit_sets_equal_soft_and_hard_limits() -> None:
    argv = prlimit_argv("/usr/bin/prlimit", ResourceLimits(cpu_seconds=5, processes=7))
    assert "--cpu=5" in argv and "--nproc=7" in argv and "--core=0" in argv
    assert argv[-1] == "--"


# -- the os command seam --------------------------------------------------------------------------


SCRIPT = (
    "cat >/dev/null; "
    "if [ -e /etc/shadow ]; then s=true; else s=false; fi; "
    'printf \'{"shadow": %s, "host": "%s", "pwd": "%s"}\' "$s" "$(cat /proc/sys/kernel/hostname)" '
    '"$PWD"'
)


def _os_tool(mode: SandboxMode) -> Tool:
    return Tool(
        id="cmd:check",
        description="d",
        input_schema={"type": "object"},
        kind=ImplementationKind.OS,
        entry=OsCommandEntry(("sh", "-c", SCRIPT)),
        side_effect=SideEffect.READ_ONLY,
        sandbox=SandboxSpec(mode, Permissions()),
    )


@pytest.mark.parametrize("mode", [SandboxMode.COMPARTMENT, SandboxMode.HOST])
def test_an_os_command_runs_sandboxed_when_its_mode_is_compartment(
    tmp_path: Path, mode: SandboxMode
) -> None:
    require_program("bwrap")
    if not probe_host().works:
        pytest.skip("bubblewrap cannot sandbox here")
    environ = clean_environ()
    binding = OsCommandBinding(ScriptEnvironment(process_env=environ), sandbox=Sandbox())
    tool = _os_tool(mode)
    with gateway_with(environ=environ) as gateway:
        _add_os(gateway, RegisteredTool(tool, binding, None))
        outcome = gateway.call_sync(tool.id, {}, workspace=tmp_path)
    assert outcome.code is None, outcome.message
    if mode is SandboxMode.COMPARTMENT:
        assert outcome.content == {"shadow": False, "host": "toolgate", "pwd": str(tmp_path)}
        assert outcome.metadata["sandbox"]["enforced"] is True
    else:
        assert outcome.content["shadow"] is os.path.exists("/etc/shadow")
        assert "sandbox" not in outcome.metadata


def test_an_os_command_is_unavailable_without_bwrap(tmp_path: Path) -> None:
    environ = clean_environ()
    sandbox = Sandbox(_config(tmp_path))
    binding = OsCommandBinding(ScriptEnvironment(process_env=environ), sandbox=sandbox)
    tool = _os_tool(SandboxMode.COMPARTMENT)
    reason = sandbox.unavailable_reason(tool)
    assert reason is not None and "bubblewrap was not found" in reason
    with gateway_with(environ=environ) as gateway:
        # Even if a source forgot to mark it unavailable, the seam refuses to run it.
        _add_os(gateway, RegisteredTool(tool, binding, None))
        outcome = gateway.call_sync(tool.id, {}, workspace=tmp_path)
    assert outcome.code is not None and outcome.code.value == "unavailable"


def _config(tmp_path: Path) -> SandboxConfig:
    return SandboxConfig(bwrap_path=str(tmp_path / "missing-bwrap"), layer="bubblewrap")


def _add_os(gateway: Gateway, entry: RegisteredTool) -> None:
    # What a resource source does: it brings the os backend, and binds its tools.
    gateway._backends.setdefault(ImplementationKind.OS, OsCommandBackend())
    gateway.registry.add(entry)


def test_the_process_limit_holds_for_an_ordinary_user(tmp_path: Path) -> None:
    """RLIMIT_NPROC set inside the sandbox's user namespace stops a fork bomb (as any non-root
    gateway; run here through setpriv when the tests run as root)."""
    require_program("bwrap")
    host = probe_host()
    if not host.works or host.prlimit is None or host.bwrap is None:
        pytest.skip("bubblewrap cannot sandbox here")
    prefix: list[str] = []
    if os.geteuid() == 0:
        prefix = [require_program("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups"]
    bomb = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    for _ in range(500):\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(5)\n"
        "            os._exit(0)\n"
        "        n += 1\n"
        "except OSError:\n"
        "    print('stopped', n)\n"
    )
    command = [*prlimit_argv(host.prlimit, ResourceLimits(processes=16)), "/usr/bin/python3"]
    argv = [*prefix, *bwrap_argv(host.bwrap, BwrapSpec([*command, "-c", bomb], None, False))]
    done = subprocess.run(argv, capture_output=True, timeout=30, check=False, cwd="/")
    if b"setting up uid map" in done.stderr or b"No permissions" in done.stderr:
        pytest.skip("unprivileged user namespaces are off: bwrap cannot run as a plain user")
    words = done.stdout.decode().split()
    assert words[:1] == ["stopped"] and int(words[1]) < 16, (done.stdout, done.stderr)


def test_enforced_lists_what_applies_to_a_tool(tmp_path: Path) -> None:
    tool = _os_tool(SandboxMode.COMPARTMENT)
    host_tool = _os_tool(SandboxMode.HOST)
    assert Sandbox().enforced(host_tool)["sandbox"].startswith("host")
    missing = Sandbox(_config(tmp_path)).enforced(tool)
    assert missing == {"sandbox": "none"}
    if probe_host().works:
        lines = Sandbox().enforced(tool)
        assert lines["network"] == "none"
        assert "workspace read-only" in lines["filesystem"]


# -- how the process count is enforced ------------------------------------------------------------

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_the_gateways_own_cgroups_are_found_v2_first() -> None:
    own = "8:pids:/docker/abc/gw\n4:memory:/x\n0::/user.slice/gw.service\n"
    assert own_cgroup_folders(MOUNTINFO, own) == [
        (2, Path("/sys/fs/cgroup/unified/user.slice/gw.service")),
        (1, Path("/sys/fs/cgroup/pids/gw")),
    ]
    # A cgroup outside what the mount shows is not a candidate; a pure v2 host at its root is.
    assert own_cgroup_folders(MOUNTINFO, "8:pids:/elsewhere\n") == []
    pure = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    assert own_cgroup_folders(pure, "0::/\n") == [(2, Path("/sys/fs/cgroup"))]


def _caps(*, cgroup: bool, root: bool) -> HostCapabilities:
    hierarchy = PidsHierarchy(1, Path("/sys/fs/cgroup/pids"), "/bin/sh") if cgroup else None
    return HostCapabilities(
        "bwrap", "prlimit", True, None, not root, pids_cgroup=hierarchy, cgroup_problem="none"
    )


def test_the_process_note_names_the_mechanism() -> None:
    with_cgroup = _caps(cgroup=True, root=True)
    assert with_cgroup.process_limit == "pids cgroup v1"
    assert with_cgroup.process_note(64).startswith("pids cgroup v1 (pids.max 64 per call")
    assert f"plus {BWRAP_TASKS} for bubblewrap" in with_cgroup.process_note(64)
    assert with_cgroup.process_problem() is None
    rlimit = _caps(cgroup=False, root=False)
    assert rlimit.limit_notes(64)["processes"] == (
        "enforced: RLIMIT_NPROC in the sandbox's user namespace"
    )
    neither = _caps(cgroup=False, root=True)
    assert neither.process_limit is None
    assert "ordinary user" in (neither.process_problem() or "")
    assert neither.limit_notes(64)["processes"].startswith("not enforced")
    assert "unavailable" in neither.process_note(64)
    assert "allow_unlimited_processes" in neither.process_note(64, unlimited_accepted=True)


def test_the_cgroup_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        SandboxConfig.model_validate({"pids_cgroup": "sys/fs/cgroup"})
    config = SandboxConfig.model_validate(
        {"pids_cgroup": "/sys/fs/cgroup/pids/gw", "allow_unlimited_processes": True}
    )
    assert config.allow_unlimited_processes and config.pids_cgroup == "/sys/fs/cgroup/pids/gw"


def test_workspace_rules(tmp_path: Path) -> None:
    home = tmp_path / "home" / "alice"
    project = home / "project"
    project.mkdir(parents=True)
    assert workspace_problem(project, home=home) is None
    assert workspace_problem(tmp_path / "elsewhere", home=home) is None
    assert "is the home folder" in (workspace_problem(home, home=home) or "")
    assert "contains the home folder" in (workspace_problem(home.parent, home=home) or "")
    assert "/var contains a system folder" in (workspace_problem(Path("/var"), home=home) or "")
    assert "contains a system folder" in (workspace_problem(Path("/"), home=home) or "")
    for inside in ("/etc", "/etc/ssh", "/usr/local/src", "/proc/self", "/sys/fs/cgroup"):
        assert "folder, or inside one" in (
            workspace_problem(Path(inside)) or ""
        ) or "filesystem, or inside one" in (workspace_problem(Path(inside)) or "")
    link = tmp_path / "link"
    link.symlink_to("/etc")
    assert "(the real path of" in (workspace_problem(link, home=home) or "")
