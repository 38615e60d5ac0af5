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
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import RunCli
from folder_tools import require_program, write_tool
from toolgate.sandbox.bwrap import DEVICES, BwrapSpec, bwrap_argv
from toolgate.sandbox.host import probe_host

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
    attack.configure(f"bwrap_path: {wrapper}\n")

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
