"""Which layer ``sandbox.layer`` picks: ``auto`` falls back to Landlock when bubblewrap fails
the way it does under Docker's default seccomp profile; a forced layer never falls back."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import RunCli
from gateway_support import gateway_with
from test_sandbox_wiring_plugins import _plugin
from toolgate.sandbox.host import forget_probes
from toolgate.sandbox.landlock import MIN_ABI, forget_landlock_probes
from toolgate.sandbox.landlock_exec import abi_version
from toolgate.sandbox.layers import choose_layer
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

#: What bubblewrap prints when clone(CLONE_NEWUSER) is refused (Docker's default profile).
DOCKER_BWRAP = """#!/bin/sh
case "$1" in
  --help) echo "usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]"
          echo "    --bind-fd FD DEST  Bind open directory or path fd on DEST"
          echo "    --ro-bind-fd FD DEST  Bind open directory or path fd read-only on DEST"
          exit 0 ;;
  --version) echo "bubblewrap 0.8.0"; exit 0 ;;
esac
echo "bwrap: No permissions to create new namespace, likely because the kernel does not \
allow non-privileged user namespaces." >&2
exit 1
"""


@pytest.fixture
def docker_bwrap(tmp_path: Path) -> Iterator[Path]:
    """A ``bwrap`` that fails like bubblewrap in a container without user namespaces."""
    program = tmp_path / "bwrap"
    program.write_text(DOCKER_BWRAP)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    forget_probes()
    forget_landlock_probes()
    yield program
    forget_probes()
    forget_landlock_probes()


def _landlock_works() -> None:
    if abi_version() < MIN_ABI:
        pytest.skip(f"this kernel's Landlock ABI is {abi_version()} (< {MIN_ABI})")
    pytest.importorskip("pyseccomp")


def test_auto_picks_landlock_when_bubblewrap_cannot_create_namespaces(docker_bwrap: Path) -> None:
    _landlock_works()
    choice = choose_layer(SandboxConfig(bwrap_path=str(docker_bwrap)))
    assert choice.name == "landlock"
    assert choice.problem is None
    assert choice.why_not_bubblewrap is not None
    assert "No permissions to create new namespace" in choice.why_not_bubblewrap
    assert choice.landlock is not None and choice.landlock.abi >= MIN_ABI


def test_a_forced_layer_that_does_not_work_leaves_no_layer(docker_bwrap: Path) -> None:
    choice = choose_layer(SandboxConfig(bwrap_path=str(docker_bwrap), layer="bubblewrap"))
    assert choice.name is None
    assert choice.problem is not None
    assert "No permissions to create new namespace" in choice.problem


def test_sandbox_check_reports_the_fallback_and_why(
    run_cli: RunCli, project: Path, docker_bwrap: Path
) -> None:
    _landlock_works()
    (project / "toolgate.yaml").write_text(f"sandbox:\n  bwrap_path: {docker_bwrap}\n")
    done = run_cli("sandbox", "check", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["layer"] == "landlock"
    assert report["works"] is False  # bubblewrap's own probe
    assert "No permissions to create new namespace" in report["why_not_bubblewrap"]

    (project / "toolgate.yaml").write_text(
        f"sandbox:\n  bwrap_path: {docker_bwrap}\n  layer: bubblewrap\n"
    )
    done = run_cli("sandbox", "check", "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["layer"] is None
    assert report["ready"] is False


def test_compartment_tools_run_under_landlock_when_bubblewrap_cannot_start(
    run_cli: RunCli, project: Path, tmp_path: Path, docker_bwrap: Path
) -> None:
    _landlock_works()
    # A folder tool, through the CLI.
    folder = project / "tools" / "peek"
    folder.mkdir(parents=True)
    (folder / "peek.py").write_text(
        "import json, sys\njson.load(sys.stdin)\n"
        "try:\n    open('/proc/self/status').close()\n    print(json.dumps({'proc': True}))\n"
        "except OSError:\n    print(json.dumps({'proc': False}))\n"
    )
    (folder / "tool.md").write_text(
        "---\nname: peek\nscript: peek.py\nruntime: python\nsandbox: compartment\n"
        "inputSchema: {type: object}\n---\nPeek.\n"
    )
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        f"sandbox:\n  bwrap_path: {docker_bwrap}\n"
    )
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    done = run_cli("call", "t:peek", "--json", "-a", "{}", "--workspace", str(workspace))
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "ok", outcome
    assert outcome["metadata"]["sandbox"]["layer"] == "landlock"
    assert outcome["content"] == {"proc": False}

    # A compartment Python plugin, through the Gateway API: its worker runs under Landlock.
    marker = tmp_path / "marker"
    plugin = _plugin(project, marker)
    environ = {"API_TOKEN": "granted", "PATH": "/usr/bin:/bin"}
    sandbox = Sandbox(SandboxConfig(bwrap_path=str(docker_bwrap)))
    with gateway_with(environ=environ, sandbox=sandbox) as gateway:
        gateway.add_source(plugin)
        called = gateway.call_sync("@t/peek:peek", {"path": str(plugin / "index.py")})
    assert called.status == "ok", called.message
    assert called.metadata["sandbox"]["layer"] == "landlock"
    assert called.content["env"] == {"API_TOKEN": "granted"}
    assert not marker.exists()  # the entry's top-level code never ran on the host
