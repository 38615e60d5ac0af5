"""Attacks on the process sandbox itself (issue 22): capabilities, kernel filesystems, runtimes.

Each attack is a tool folder (``tool.md`` + script) or a resource file on disk, called through
the installed ``toolgate`` console script with a real toolgate.yaml, under real bubblewrap; each
test checks that the attack fails and that the gateway then serves a normal call. The kernel
filesystem tests go one level down, to the bubblewrap command line, because the loaders already
refuse such ``fs`` prefixes: they show the second layer holds on its own.

Run as root (CI does) these tests are the ones that matter: bubblewrap started by root keeps
every capability in the sandbox unless told otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import TOOLGATE, RunCli
from folder_tools import require_program, write_tool
from js_support import FIXTURES as JS_FIXTURES
from js_support import js_runtime
from toolgate.sandbox.bwrap import DEVICES, BwrapSpec, bwrap_argv
from toolgate.sandbox.host import probe_host

pytestmark = pytest.mark.slow

#: The attacker's tool: runs the given commands, then tries to write and to read a file. It
#: prints what happened (never an "error" key, which would make it a tool error).
ATTACK = """\
import json, subprocess, sys
data = json.load(sys.stdin)
result = {"runs": []}
for argv in data.get("run", []):
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
        result["runs"].append({"rc": done.returncode, "stderr": done.stderr[-300:]})
    except OSError as exc:
        result["runs"].append({"rc": None, "stderr": str(exc)})
if "write" in data:
    try:
        with open(data["write"], "w") as handle:
            handle.write("written from the sandbox")
        result["wrote"] = True
    except OSError as exc:
        result["wrote"] = False
        result["write_error"] = str(exc)
if "read" in data:
    try:
        with open(data["read"]) as handle:
            result["text"] = handle.read()
    except OSError as exc:
        result["text"] = None
        result["read_error"] = str(exc)
print(json.dumps(result))
"""

SECRET = "audit-line-with-a-secret-4f1c9e"

__all__ = ["js_runtime"]  # the fixture, used by name


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host("bwrap")
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


class Attack:
    """A project with the attack tool in a compartment, its fs folder, a read-only tool's
    workspace, and an audit file (protected by the gateway) inside the fs folder."""

    def __init__(self, run_cli: RunCli, project: Path, tmp_path: Path) -> None:
        self.run_cli = run_cli
        self.project = project
        self.data = tmp_path / "data"
        self.data.mkdir()
        self.granted = self.data / "granted.txt"
        self.granted.write_text("original data\n")
        self.audit = self.data / "audit.jsonl"
        self.audit.write_text(json.dumps({"note": SECRET}) + "\n")
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()
        self.in_workspace = self.workspace / "notes.txt"
        self.in_workspace.write_text("original notes\n")
        self.folder = write_tool(
            project / "tools",
            "attack",
            ATTACK,
            runtime="python",
            sandbox="compartment",
            permissions={"fs": [str(self.data)]},
        )
        self.script = self.folder / "script.py"
        # The same code as an `os` tool whose side-effect level is read_only: its workspace
        # is bound read-only.
        document = {
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": "reader", "namespace": "ops"},
            "spec": {
                "type": "os",
                "description": "Reads.",
                "command": ["python3", "-c", ATTACK],
                "inputSchema": {"type": "object"},
                "sideEffects": {"level": "read_only"},
            },
        }
        (project / "ops.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        self.configure()

    def configure(self, sandbox: str = "") -> None:
        unlimited = probe_host("bwrap").process_limit is None
        (self.project / "toolgate.yaml").write_text(
            "tool_folders:\n  - path: tools\n    namespace: t\n"
            "sources:\n  - path: ops.yaml\n    format: resource\n"
            f"audit:\n  jsonl: {self.audit}\n"
            "sandbox:\n"
            f"  allow_unlimited_processes: {'true' if unlimited else 'false'}\n"
            + textwrap.indent(textwrap.dedent(sandbox), "  ")
        )

    def call(self, tool: str = "t:attack", **arguments: Any) -> dict[str, Any]:
        done = self.run_cli(
            "call", tool, "--json", "-a", json.dumps(arguments),
            "--workspace", str(self.workspace),
        )  # fmt: skip
        assert done.stdout, done.stderr
        outcome: dict[str, Any] = json.loads(done.stdout)
        return outcome

    def content(self, tool: str = "t:attack", **arguments: Any) -> dict[str, Any]:
        outcome = self.call(tool, **arguments)
        assert outcome["status"] == "ok", outcome
        assert outcome["metadata"]["sandbox"]["enforced"] is True
        content: dict[str, Any] = outcome["content"]
        return content

    def still_serves(self) -> None:
        """A normal call after the attack: the granted file reads as on the host."""
        content = self.content(read=str(self.granted))
        assert content["text"] == "original data\n"
        assert self.content("ops:reader", read=str(self.in_workspace))["text"] == (
            "original notes\n"
        )


@pytest.fixture
def attack(run_cli: RunCli, project: Path, tmp_path: Path) -> Attack:
    _sandbox_works()
    return Attack(run_cli, project, tmp_path)


def _effective(status: str) -> str:
    return next(
        line.split(":", 1)[1].strip() for line in status.splitlines() if line[:7] == "CapEff:"
    )


# -- capabilities -------------------------------------------------------------------------------


def test_a_tool_run_by_root_gets_no_capabilities_in_the_sandbox(attack: Attack) -> None:
    content = attack.content(read="/proc/self/status")
    assert _effective(content["text"]) == "0000000000000000"
    bounding = next(x for x in content["text"].splitlines() if x.startswith("CapBnd:"))
    assert bounding.split()[1] == "0000000000000000"
    attack.still_serves()


def test_remounting_read_only_binds_writable_fails(attack: Attack) -> None:
    require_program("mount")
    targets = [
        (attack.data, attack.granted, "original data\n"),
        (attack.folder, attack.script, ATTACK),
    ]
    for folder, victim, before in targets:
        content = attack.content(
            run=[["mount", "-o", "remount,bind,rw", str(folder)]], write=str(victim)
        )
        assert content["runs"][0]["rc"] != 0, (folder, content)
        assert content["wrote"] is False, (folder, content)
        assert victim.read_text() == before
    # The host's /usr: only the remount is tried (it must fail), nothing is written there.
    content = attack.content(run=[["mount", "-o", "remount,bind,rw", "/usr"]])
    assert content["runs"][0]["rc"] != 0, content
    # A read_only tool's workspace stays read-only.
    content = attack.content(
        "ops:reader",
        run=[["mount", "-o", "remount,bind,rw", str(attack.workspace)]],
        write=str(attack.in_workspace),
    )
    assert content["runs"][0]["rc"] != 0, content
    assert content["wrote"] is False, content
    assert attack.in_workspace.read_text() == "original notes\n"
    attack.still_serves()


def test_unmounting_the_cover_of_a_protected_file_does_not_reveal_it(attack: Attack) -> None:
    require_program("umount")
    # The audit file lies inside the declared fs folder: the gateway covers it.
    plain = attack.content(read=str(attack.audit))
    assert SECRET not in json.dumps(plain)
    content = attack.content(
        run=[["umount", str(attack.audit)], ["umount", "-l", str(attack.audit)]],
        read=str(attack.audit),
    )
    assert all(run["rc"] != 0 for run in content["runs"]), content
    assert SECRET not in json.dumps(content)
    assert content["text"] in ("", None)
    attack.still_serves()


def test_sandbox_check_and_calls_refuse_a_bwrap_that_keeps_capabilities(
    attack: Attack, tmp_path: Path
) -> None:
    if os.getuid() != 0:
        pytest.skip("only a sandbox started by root can keep capabilities; run as root (CI)")
    real = shutil.which("bwrap")
    assert real is not None
    # A wrapper that drops '--cap-drop ALL' from the command line, as an old or broken
    # bubblewrap would ignore it.
    wrapper = tmp_path / "bin" / "bwrap"
    wrapper.parent.mkdir()
    wrapper.write_text(
        '#!/bin/bash\nargs=()\nskip=0\nfor a in "$@"; do\n'
        '  if [ "$a" = --cap-drop ]; then skip=1; continue; fi\n'
        '  if [ $skip = 1 ]; then skip=0; continue; fi\n  args+=("$a")\ndone\n'
        f'exec {real} "${{args[@]}}"\n'
    )
    wrapper.chmod(0o755)
    attack.configure(f"bwrap_path: {wrapper}\nlayer: bubblewrap\n")

    done = attack.run_cli("sandbox", "check", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["works"] is False and report["ready"] is False
    assert "keeps capabilities" in report["problem"] and "CapEff" in report["problem"]
    assert report["capabilities"].startswith("NOT dropped")
    text = attack.run_cli("sandbox", "check")
    assert "Sandbox does not work" in text.stdout and "--cap-drop ALL" in text.stdout

    # Fail closed: a compartment tool does not run in such a sandbox.
    outcome = attack.call(run=[["umount", str(attack.audit)]], read=str(attack.audit))
    assert outcome["status"] == "error" and outcome["code"] == "unavailable", outcome
    assert SECRET not in json.dumps(outcome)

    attack.configure()
    assert attack.run_cli("sandbox", "check", "--json").returncode == 0
    attack.still_serves()


# -- kernel filesystems (the second layer, under the loaders' refusal) ------------------------


def _mounted(argv: list[str]) -> list[tuple[str, str, str]]:
    """The (option, source, destination) binds of a bubblewrap command line."""
    binds = []
    for index, arg in enumerate(argv):
        if arg == "--":
            break
        if arg in ("--bind", "--ro-bind", "--dev-bind"):
            binds.append((arg, argv[index + 1], argv[index + 2]))
    return binds


def test_binds_of_kernel_filesystems_are_never_made(tmp_path: Path) -> None:
    link = tmp_path / "innocent"
    link.symlink_to("/proc")
    kept = tmp_path / "kept"
    kept.mkdir()
    spec = BwrapSpec(
        command=["true"],
        workspace=None,
        workspace_writable=False,
        ro_paths=[
            Path("/proc"),
            Path("/proc/1"),
            Path("/sys"),
            Path("/sys/class/net"),
            Path("/dev"),
            Path("/dev/kmsg"),
            Path("/"),
            link,
            kept,
        ],
        extra_binds=[(Path("/dev/shm"), Path("/run/x")), (tmp_path, Path("/proc/sneaky"))],
    )
    argv = bwrap_argv("bwrap", spec)
    binds = _mounted(argv)
    for option, source, destination in binds:
        for path in (source, destination, os.path.realpath(source)):
            if (option == "--dev-bind" and source == destination in DEVICES) or (
                source == "/dev/null" and option == "--ro-bind"
            ):
                continue  # the sandbox's own device nodes, and the covers of protected files
            assert not any(
                path == root or path.startswith(root + "/") for root in ("/proc", "/sys", "/dev")
            ), (option, source, destination)
            assert path != "/", (option, source, destination)
    assert ("--ro-bind", str(kept), str(kept)) in binds
    assert "/sys" not in argv
    # The sandbox's own /proc and /dev come after every bind, so they win whatever is bound.
    last_bind = max(i for i, arg in enumerate(argv) if arg in ("--bind", "--ro-bind"))
    assert argv.index("--proc") > last_bind
    assert min(i for i, arg in enumerate(argv) if arg == "--dev-bind") > last_bind
    # The capabilities are dropped in every sandbox.
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    # A workspace there is refused outright (a sandbox without it would run elsewhere).
    for workspace in (Path("/proc"), Path("/"), link):
        with pytest.raises(ValueError, match="kernel filesystem"):
            bwrap_argv("bwrap", BwrapSpec(["true"], workspace, workspace_writable=True))


def test_a_sandbox_with_proc_dev_and_sys_in_its_binds_sees_only_its_own(tmp_path: Path) -> None:
    _sandbox_works()
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    script = (
        "tr '\\0' ' ' < /proc/1/cmdline; echo; "
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done; echo ===; "
        "ls /dev; echo ===; ls /sys 2>&1; ls / "
    )
    spec = BwrapSpec(
        command=["/bin/sh", "-c", script],
        workspace=None,
        workspace_writable=False,
        ro_paths=[Path("/proc"), Path("/dev"), Path("/sys"), Path("/sys/class")],
    )
    done = subprocess.run(
        bwrap_argv(bwrap, spec), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    processes, devices, rest = done.stdout.split("===\n")
    pid1 = processes.splitlines()[0]
    # PID 1 is the sandbox's own (bubblewrap's init), not the host's.
    assert Path(pid1.split()[0]).name == "bwrap", pid1
    host_pid1 = Path("/proc/1/cmdline").read_bytes().replace(b"\0", b" ").decode()
    assert pid1.strip() != host_pid1.strip()
    # No process of the host is visible (this test runs under pytest).
    assert "pytest" not in processes
    assert set(devices.split()) <= {"null", "zero", "full", "random", "urandom", "fd"} | {
        "stdin",
        "stdout",
        "stderr",
    }
    assert "kmsg" not in devices
    assert "sys" not in rest.split() and "No such file" in rest


# -- runtimes outside the system folders ------------------------------------------------------

#: Says which interpreter runs it, and tries to reach what lies next to the runtime.
WHERE = """\
import json, os, sys
data = json.load(sys.stdin)
result = {"executable": sys.executable, "prefix": sys.prefix, "peeks": {}}
for path in data.get("peek", []):
    try:
        if os.path.isdir(path):
            result["peeks"][path] = sorted(os.listdir(path))
        else:
            with open(path) as handle:
                result["peeks"][path] = handle.read()
    except OSError as exc:
        result["peeks"][path] = None
print(json.dumps(result))
"""


def _cli(project: Path, home: Path, path: str, user_home: Path | None = None) -> RunCli:
    """``toolgate`` run in ``project`` with ``path`` as the gateway's PATH (and HOME)."""
    env = {**os.environ, "TOOLGATE_HOME": str(home), "PATH": path, "PYTHONIOENCODING": "utf-8"}
    if user_home is not None:
        env["HOME"] = str(user_home)

    # Calls get a workspace of their own: the project holds toolgate.yaml and tools/, which a
    # tool that writes may never have as its workspace.
    workspace = project.parent / "workspace"
    workspace.mkdir(exist_ok=True)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        if args and args[0] == "call":
            args = (*args, "--workspace", str(workspace))
        return subprocess.run(
            [str(TOOLGATE), *args], cwd=project, env=env, capture_output=True, text=True,
            encoding="utf-8", timeout=120, check=False,
        )  # fmt: skip

    return run


def _where_project(project: Path) -> Path:
    folder = write_tool(project / "tools", "where", WHERE, runtime="python", sandbox="compartment")
    unlimited = probe_host("bwrap").process_limit is None
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        f"sandbox:\n  allow_unlimited_processes: {'true' if unlimited else 'false'}\n"
    )
    return folder


def _outcome(cli: RunCli, **arguments: Any) -> dict[str, Any]:
    done = cli("call", "t:where", "--json", "-a", json.dumps(arguments))
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


def test_a_pyenv_shim_runs_its_real_interpreter_in_the_sandbox(
    project: Path, toolgate_home: Path
) -> None:
    _sandbox_works()
    pyenv = shutil.which("pyenv") or str(Path.home() / ".pyenv" / "bin" / "pyenv")
    shim = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "shims" / "python3"
    if not shim.is_file() or not os.access(pyenv, os.X_OK):
        pytest.skip("pyenv is not installed here (no pyenv with a python3 shim)")
    real = subprocess.run(
        [pyenv, "which", "python3"], capture_output=True, text=True, cwd="/", check=False
    )
    if real.returncode != 0:
        pytest.skip(f"pyenv has no python3 selected here: {real.stderr.strip()}")
    _where_project(project)
    cli = _cli(project, toolgate_home, f"{shim.parent}:/usr/bin:/bin")
    pyenv_root = shim.parent.parent
    outcome = _outcome(cli, peek=[str(pyenv_root / "libexec"), str(Path.home())])
    assert outcome["status"] == "ok", outcome  # not "exited with code 127"
    assert outcome["metadata"]["sandbox"]["enforced"] is True
    content = outcome["content"]
    assert os.path.realpath(content["executable"]) == os.path.realpath(real.stdout.strip())
    # Only the selected version's folder is bound: not pyenv itself, not the home folder.
    assert content["peeks"][str(pyenv_root / "libexec")] is None
    home_seen = content["peeks"][str(Path.home())]
    assert home_seen is None or set(home_seen) <= {pyenv_root.name}, home_seen
    report = json.loads(cli("sandbox", "check", "--json").stdout)
    assert f"found as {shim}" in report["runtimes"]["python"]
    assert "CANNOT" not in report["runtimes"]["python"]
    assert _outcome(cli)["status"] == "ok"


def _venv(tmp_path: Path) -> Path:
    """A virtual environment outside /usr (no pip: quick)."""
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv


def _shim(folder: Path, manager: Path, target: str) -> Path:
    """A pyenv-like shim: reads its manager's settings (outside any bind), then execs."""
    manager.mkdir(parents=True, exist_ok=True)
    (manager / "settings.sh").write_text(f"REAL='{target}'\n")
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "python3"
    shim.write_text(f'#!/bin/bash\nset -e\n. "{manager}/settings.sh"\nexec "$REAL" "$@"\n')
    shim.chmod(0o755)
    return shim


def test_a_shim_outside_usr_is_resolved_to_its_venv_and_only_that_is_bound(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    venv = _venv(tmp_path)
    # Laid out like pyenv: the shims' folder and their manager in one root, which the gateway
    # guards as a whole (the shims run it on the host), beside the project and workspace.
    manager = tmp_path / "pyenv" / "manager"
    shim = _shim(tmp_path / "pyenv" / "shims", manager, str(venv / "bin" / "python3"))
    _where_project(project)
    cli = _cli(project, toolgate_home, f"{shim.parent}:/usr/bin:/bin")
    outcome = _outcome(cli, peek=[str(manager / "settings.sh"), str(tmp_path)])
    assert outcome["status"] == "ok", outcome
    content = outcome["content"]
    assert content["executable"] == str(venv / "bin" / "python3")
    assert content["prefix"] == str(venv)  # the venv's pyvenv.cfg was found: it is bound
    # The shim's manager is not in the sandbox; of tmp_path only the bound folders appear.
    assert content["peeks"][str(manager / "settings.sh")] is None
    assert set(content["peeks"][str(tmp_path)]) <= {"venv", "project", "workspace"}
    report = json.loads(cli("sandbox", "check", "--json").stdout)
    assert report["runtimes"]["python"].startswith(str(venv / "bin" / "python3"))
    assert f"found as {shim}" in report["runtimes"]["python"]
    assert f"binds {venv}" in report["runtimes"]["python"]
    assert _outcome(cli)["status"] == "ok"


def test_a_runtime_installed_in_the_home_folder_is_refused_with_its_reason(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    user_home = tmp_path / "user"
    (user_home / "bin").mkdir(parents=True)
    (user_home / ".ssh").mkdir()
    (user_home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    real = os.path.realpath(sys.executable)
    (user_home / "bin" / "python3").symlink_to(real)
    shim = _shim(tmp_path / "shims", tmp_path / "manager", str(user_home / "bin" / "python3"))
    _where_project(project)
    cli = _cli(project, toolgate_home, f"{shim.parent}:/usr/bin:/bin", user_home=user_home)
    outcome = _outcome(cli, peek=[str(user_home / ".ssh" / "id_rsa")])
    assert outcome["status"] == "error" and outcome["code"] == "unavailable", outcome
    message = outcome["message"]
    assert "runtime 'python'" in message and str(shim) in message
    assert "home folder" in message and str(user_home) in message
    assert "PRIVATE KEY" not in json.dumps(outcome)
    listed = cli("tools", "list", "--json")
    assert "home folder" in listed.stdout, listed.stdout
    report = json.loads(cli("sandbox", "check", "--json").stdout)
    assert report["runtimes"]["python"].startswith("CANNOT be contained")
    # A broken shim (its manager gone) is said at load too, never an exit 127 at the call.
    (tmp_path / "manager" / "settings.sh").unlink()
    broken = _outcome(cli)
    assert broken["code"] == "unavailable", broken
    assert "did not say which program it runs" in broken["message"]
    # With a runtime that can be contained first on PATH, the gateway serves the tool.
    fixed = _cli(project, toolgate_home, os.environ["PATH"])
    assert _outcome(fixed)["status"] == "ok"


def test_the_js_host_behind_a_node_shim_runs_the_real_node_in_its_sandbox(
    js_runtime: Path,
    project: Path,
    toolgate_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _sandbox_works()
    node = os.path.realpath(require_program("node"))
    shims, manager = tmp_path / "shims", tmp_path / "manager"
    manager.mkdir()
    (manager / "settings.sh").write_text(f"REAL='{node}'\n")
    shims.mkdir()
    shim = shims / "node"
    shim.write_text(f'#!/bin/bash\nset -e\n. "{manager}/settings.sh"\nexec "$REAL" "$@"\n')
    shim.chmod(0o755)
    monkeypatch.setenv("BRAVE_API_KEY", "b")
    (project / "toolgate.yaml").write_text(
        f"sources:\n  - path: {JS_FIXTURES / 'search'}\n"
        "    options: {config: {searchBackend: brave}}\n"
    )
    cli = _cli(project, toolgate_home, f"{shims}:/usr/bin:/bin")
    called = cli("call", "@pandorakit/search:search", "--args", '{"query": "q"}')
    assert called.returncode == 0, called.stdout + called.stderr
    assert json.loads(called.stdout) == {"backend": "brave", "query": "q"}
    again = cli("call", "@pandorakit/search:search", "--args", '{"query": "r"}')
    assert json.loads(again.stdout) == {"backend": "brave", "query": "r"}


def test_a_tool_program_named_like_a_runtime_is_never_run_on_the_host_to_resolve_it(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    marker = tmp_path / "ran-on-the-host"
    # A tool whose own program is called python3, in a folder that is even on the gateway's
    # PATH: finding the real interpreter behind a runtime must not start it outside the sandbox.
    script = f"#!/bin/sh\ntouch {marker} 2>/dev/null\necho '{{\"inside\": true}}'\n"
    folder = write_tool(
        project / "tools",
        "fake",
        script,
        runtime="binary",
        script_name="python3",
        executable=True,
        sandbox="compartment",
    )
    unlimited = probe_host("bwrap").process_limit is None
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        f"sandbox:\n  allow_unlimited_processes: {'true' if unlimited else 'false'}\n"
    )
    cli = _cli(project, toolgate_home, f"{folder}:{os.environ['PATH']}")
    assert "t:fake" in cli("tools", "list", "--json").stdout
    for _ in range(2):  # the attack, then the gateway still serving the same tool
        outcome = json.loads(cli("call", "t:fake", "--json", "-a", "{}").stdout)
        assert outcome["status"] == "ok", outcome
        assert outcome["content"] == {"inside": True}
        assert outcome["metadata"]["sandbox"]["enforced"] is True
    assert not marker.exists()
