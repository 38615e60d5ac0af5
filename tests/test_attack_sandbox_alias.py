"""The gateway's home under another name: a bind mount (issue 22, second review).

The attack: ``mount --bind $TOOLGATE_HOME /tmp/x/bm`` (in a private mount namespace, as root)
and a call with the workspace ``/tmp/x/bm``. The path rule compares text, so the alias passed,
and the covers of the protected files (made by name, under the home) missed it: a read-only
tool read ``.env`` and a writing tool got a writable ``tools`` folder the gateway runs code
from. The sandbox now also compares what each held descriptor *is* (``st_dev``, ``st_ino``,
walking up from the descriptor) with the gateway's folders and their ancestors
(:mod:`toolgate.sandbox.identity`).

Each attack runs for real: a Python process in its own mount namespace
(``unshare -m --propagation private``) makes the bind mount, builds the gateway and calls the
tools through :meth:`Gateway.call_sync` and real bubblewrap; it prints what came back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from folder_tools import require_program, write_tool
from gateway_support import gateway_with
from js_support import js_runtime, plugin_copy
from toolgate.formats.plugin.source import PluginSource
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

pytestmark = pytest.mark.slow

__all__ = ["js_runtime"]  # the fixture, used by name

SECRET = "SECRET=alias-attack-0d9f"

#: Prints the ``.env`` of its working folder (the workspace), if it can read one.
CATENV = (
    "import json, os\n"
    "text = open('.env').read() if os.path.exists('.env') else None\n"
    "print(json.dumps({'env': text, 'seen': sorted(os.listdir('.'))}))\n"
)

#: Writes a tool folder into the workspace's ``tools`` (and reads ``.env`` if it is there).
DROPPER = """\
import json, os, sys
data = json.load(sys.stdin)
workspace = data["workspacePath"]
env = os.path.join(workspace, ".env")
text = open(env).read() if os.path.exists(env) else None
target = os.path.join(workspace, "tools", "pwn")
try:
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(target, "tool.md"), "w") as handle:
        handle.write("pwned")
    wrote = True
except OSError:
    wrote = False
print(json.dumps({"env": text, "wrote": wrote}))
"""

#: Reads the file named by ``path`` (through its ``fs`` prefix).
READER = """\
import json, sys
data = json.load(sys.stdin)
try:
    text = open(data["input"]["path"]).read()
except OSError as exc:
    text = None
print(json.dumps({"env": text}))
"""

#: Run inside the private mount namespace: the bind mount, the gateway, the calls.
INSIDE = """\
import json, subprocess, sys
from pathlib import Path
from toolgate.config.build import build_gateway
from toolgate.config.files import load_config

project, home, alias = map(Path, sys.argv[1:4])
subprocess.run(["mount", "--bind", str(home), str(alias)], check=True)
# The folder above the home under another name: it contains the home.
above = alias.parent.parent / "y" / "up"
subprocess.run(["mount", "--bind", str(home.parent), str(above)], check=True)
calls = {
    "read_only": ("ops:catenv", {}, alias),
    "writing": ("t:dropper", {}, alias),
    "writing_tools": ("t:dropper", {}, alias / "tools"),
    "fs_prefix": ("t:reader", {"path": str(alias / ".env")}, None),
    "containing": ("t:dropper", {}, above),
    "normal": ("t:dropper", {}, alias.parent.parent / "work"),
}
found = {}
with build_gateway(load_config(project / "toolgate.yaml"), home=home, audit="off") as gateway:
    for name, (tool, arguments, workspace) in calls.items():
        outcome = gateway.call_sync(tool, arguments, workspace=workspace)
        found[name] = {
            "status": outcome.status,
            "code": outcome.code,
            "message": outcome.message,
            "content": outcome.content,
        }
print(json.dumps(found, default=str))
"""


def _requirements() -> None:
    require_program("bwrap")
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        pytest.skip("unshare and mount are needed to make a bind mount in a private namespace")
    if os.geteuid() != 0:
        pytest.skip("a bind mount needs root (in a private mount namespace)")
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")
    if host.process_limit is None:
        pytest.skip("this host cannot limit a sandbox's processes (root without a pids cgroup)")


def _project(project: Path, alias: Path) -> None:
    tools = project / "tools"
    write_tool(tools, "dropper", DROPPER, runtime="python", sandbox="compartment")
    write_tool(
        tools,
        "reader",
        READER,
        runtime="python",
        sandbox="compartment",
        permissions={"fs": [str(alias)]},
    )
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "catenv", "namespace": "ops"},
        "spec": {
            "type": "os",
            "description": "Print the workspace's .env.",
            "command": ["python3", "-c", CATENV],
            "inputSchema": {"type": "object"},
            "sideEffects": {"level": "read_only"},
        },
    }
    (project / "ops.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        "sources:\n  - path: ops.yaml\n    format: resource\n"
        "sandbox:\n  namespaces:\n    ops: compartment\n",
        encoding="utf-8",
    )


def _attack(project: Path, home: Path, alias: Path) -> dict[str, Any]:
    namespace = ["unshare", "-m", "--propagation", "private"]
    done = subprocess.run(
        [*namespace, sys.executable, "-c", INSIDE, str(project), str(home), str(alias)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


@pytest.fixture
def attacked(project: Path, toolgate_home: Path, tmp_path: Path) -> dict[str, Any]:
    _requirements()
    home = toolgate_home
    (home / "tools").mkdir()
    (home / ".env").write_text(SECRET + "\n")
    alias = tmp_path / "x" / "bm"
    alias.mkdir(parents=True)
    (tmp_path / "y" / "up").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    _project(project, alias)
    found = _attack(project, home, alias)
    # Whatever came back, nothing of the home was read or written through the alias.
    assert SECRET not in json.dumps(found)
    assert not (home / "tools" / "pwn").exists()
    return found


def test_the_home_under_another_name_is_refused_as_a_read_only_workspace(
    attacked: dict[str, Any],
) -> None:
    outcome = attacked["read_only"]
    assert outcome["status"] == "error", outcome
    assert "under another name" in outcome["message"], outcome


def test_the_home_under_another_name_is_refused_as_a_writable_workspace(
    attacked: dict[str, Any],
) -> None:
    for name in ("writing", "writing_tools"):
        outcome = attacked[name]
        assert outcome["status"] == "error", (name, outcome)
        assert "under another name" in outcome["message"], (name, outcome)


def test_a_folder_holding_the_home_under_another_name_is_refused_as_a_workspace(
    attacked: dict[str, Any],
) -> None:
    outcome = attacked["containing"]
    assert outcome["status"] == "error", outcome
    # Refused as the folder above the home under another name (it holds the home's .env).
    assert "under another name" in outcome["message"], outcome


def test_the_home_under_another_name_is_refused_as_an_fs_prefix(
    attacked: dict[str, Any],
) -> None:
    outcome = attacked["fs_prefix"]
    assert outcome["status"] == "error", outcome
    assert "permissions.fs[0]" in outcome["message"], outcome
    assert "under another name" in outcome["message"], outcome


def test_a_normal_call_still_works_next_to_the_alias(
    attacked: dict[str, Any], tmp_path: Path
) -> None:
    outcome = attacked["normal"]
    assert outcome["status"] == "ok", outcome
    assert outcome["content"] == {"env": None, "wrote": True}
    assert (tmp_path / "work" / "tools" / "pwn" / "tool.md").is_file()


PLUGIN = "@toolgate-test/probe"


def _bwrap_works() -> None:
    require_program("bwrap")
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


@pytest.mark.usefixtures("js_runtime")
def test_a_js_host_whose_fs_prefix_became_the_gateway_home_does_not_start(
    tmp_path: Path,
) -> None:
    # At load the granted folder is a plain folder (the load-time rule passes it); before the
    # first call its name leads to the gateway's home. The JavaScript host's bubblewrap would
    # bind the prefix: it is opened and checked against the running gateway's folders when
    # the host process's command line is made, and the host does not start.
    _bwrap_works()
    home = tmp_path / "gateway-home"
    home.mkdir()
    (home / ".env").write_text(SECRET + "\n")
    data = tmp_path / "data"
    data.mkdir()
    folder = plugin_copy(tmp_path, "probe", permissions={"fs": [str(data)]})
    with gateway_with(environ={}, sandbox=Sandbox(SandboxConfig()), home=home) as gateway:
        loaded = gateway.add_source(folder)
        assert loaded.diagnostics == [], loaded.diagnostics
        data.rmdir()
        data.symlink_to(home)
        outcome = gateway.call_sync(f"{PLUGIN}:read", {"path": str(data / ".env")})
        assert outcome.status == "error", (outcome.status, outcome.content)
        message = outcome.message or ""
        assert "pandora.json: permissions.fs[0]" in message, message
        assert "one of the gateway's own folders" in message, message
        assert SECRET not in json.dumps(outcome.content, default=str) + message


@pytest.mark.usefixtures("js_runtime")
def test_a_js_host_with_a_clean_fs_prefix_still_starts(tmp_path: Path) -> None:
    _bwrap_works()
    home = tmp_path / "gateway-home"
    home.mkdir()
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("hello from data\n")
    folder = plugin_copy(tmp_path, "probe", permissions={"fs": [str(data)]})
    with gateway_with(environ={}, sandbox=Sandbox(SandboxConfig()), home=home) as gateway:
        loaded = gateway.add_source(folder)
        assert loaded.diagnostics == [], loaded.diagnostics
        outcome = gateway.call_sync(f"{PLUGIN}:read", {"path": str(data / "note.txt")})
        assert outcome.status == "ok", (outcome.code, outcome.message)
        assert "hello from data" in json.dumps(outcome.content)
        # The prefix is bound from the descriptor that was checked, not by name again.
        [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
        [pid] = source.js_hosts.pids()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    at = argv.index(str(data.resolve()).encode())
    assert argv[at - 2] == b"--ro-bind-fd", argv
