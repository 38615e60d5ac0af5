"""More attacks through paths (issue 22, the review of the merged fix): a workspace where the
gateway finds the programs it runs on the host (a ``PATH`` folder) or the Python files it
imports (a ``python:`` source outside the project), the temporary folder that holds other calls'
egress sockets, the spill folder of long outputs, and the gateway's home as a read-only
workspace (its state changes while a call runs).

Every attack goes through what an attacker controls — the ``workspace`` of a call (``toolgate
call --workspace``) or a declaration — and each test checks that the gateway keeps serving.
The rule is :mod:`toolgate.path_policy` (its code and state tiers).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import TOOLGATE, RunCli
from folder_tools import require_program, write_tool
from toolgate.backends.mcp_launch import stderr_file
from toolgate.model import Permissions
from toolgate.path_policy import (
    PathPolicy,
    run_folder_path,
    spill_root,
    workspace_problem,
)
from toolgate.pipeline.overflow import OverflowSpiller
from toolgate.sandbox.egress import EgressProxy
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

pytestmark = pytest.mark.slow

#: Writes an executable ``python3`` into its workspace: on a PATH folder it would be the
#: gateway's Python the next time a runtime is looked up (it touches ``marker`` when run).
PATHDROP = """\
import json, os, sys
data = json.load(sys.stdin)
target = os.path.join(data["workspacePath"], data.get("name", "python3"))
try:
    with open(target, "w") as handle:
        handle.write("#!/bin/sh\\ntouch " + data["marker"] + "\\nexec /usr/bin/python3 \\"$@\\"\\n")
    os.chmod(target, 0o755)
    print(json.dumps({"wrote": target}))
except OSError as exc:
    print(json.dumps({"failed": str(exc)}))
"""

#: A read-only tool: what it sees of a path (exists, its entries).
LOOK = """\
import json, os, sys
data = json.load(sys.stdin)
path = data["path"]
found = {"exists": os.path.exists(path), "cwd": os.getcwd()}
if os.path.isdir(path):
    found["entries"] = sorted(os.listdir(path))
print(json.dumps(found))
"""


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")
    if host.process_limit is None:
        pytest.skip("this host cannot limit a sandbox's processes (root without a pids cgroup)")


def _project(project: Path, extra: str = "") -> None:
    """``t:pathdrop`` (a writing compartment tool) and ``ops:look`` (a read-only ``os`` tool)."""
    write_tool(project / "tools", "pathdrop", PATHDROP, runtime="python", sandbox="compartment")
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "look", "namespace": "ops"},
        "spec": {
            "type": "os",
            "description": "Look at a path.",
            "command": ["python3", "-c", LOOK],
            "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
            "sideEffects": {"level": "read_only"},
        },
    }
    (project / "ops.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        "sources:\n  - path: ops.yaml\n    format: resource\n" + extra,
        encoding="utf-8",
    )


def _cli(
    project: Path, home: Path, *, path: str | None = None
) -> RunCli:  # a RunCli with the gateway's PATH of our choosing
    env = {**os.environ, "TOOLGATE_HOME": str(home), "PYTHONIOENCODING": "utf-8"}
    if path is not None:
        env["PATH"] = path

    def run(
        *args: str, input: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TOOLGATE), *args], cwd=cwd or project, env=env, input=input,
            capture_output=True, text=True, encoding="utf-8", timeout=120, check=False,
        )  # fmt: skip

    return run


def _call(cli: RunCli, tool: str, workspace: Path | None, **arguments: Any) -> dict[str, Any]:
    args = ["call", tool, "--json", "-a", json.dumps(arguments)]
    if workspace is not None:
        args += ["--workspace", str(workspace)]
    done = cli(*args)
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


def _refused(outcome: dict[str, Any], says: str = "one of the gateway's own folders") -> None:
    assert outcome["status"] == "error", outcome
    assert outcome["code"] == "forbidden", outcome
    assert says in outcome["message"], outcome


# -- programs the gateway runs on the host ------------------------------------------------------


def test_a_folder_on_the_gateways_path_is_refused_as_a_writable_workspace(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    pbin = tmp_path / "opt-tools" / "bin"
    pbin.mkdir(parents=True)
    cli = _cli(project, toolgate_home, path=f"{pbin}:{os.environ['PATH']}")
    marker = tmp_path / "the-planted-python-ran"
    # The PATH entry, a folder inside it and its install root (the folder holding bin/).
    (pbin / "sub").mkdir()
    for workspace in (pbin, pbin / "sub", pbin.parent):
        _refused(_call(cli, "t:pathdrop", workspace, marker=str(marker)))
    assert not (pbin / "python3").exists()
    assert not (pbin / "sub" / "python3").exists()
    # The gateway keeps serving: its Python tools still run with the real interpreter.
    work = tmp_path / "work"
    work.mkdir()
    for _ in range(2):
        done = _call(cli, "t:pathdrop", work, marker=str(marker))
        assert done["status"] == "ok", done
        assert done["content"] == {"wrote": str(work / "python3")}
    assert not marker.exists()


def test_every_path_entry_outside_the_system_is_refused_as_a_writable_workspace() -> None:
    # This machine's own PATH (~/.cargo/bin, ~/.pyenv/shims, a venv's bin...).
    policy = Sandbox().paths()
    entries = [e for e in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(e)]
    checked = 0
    for entry in entries:
        real = os.path.realpath(entry)
        if real.split("/")[1] in {"usr", "bin", "sbin", "lib", "lib64"}:
            continue  # system folders: refused as workspaces anyway
        problem = workspace_problem(Path(entry), policy)
        assert problem is not None, entry
        checked += 1
    assert workspace_problem(Path(sys.prefix), policy) is not None
    if checked == 0:
        pytest.skip("PATH has no entry outside the system folders here")


def test_the_folder_of_a_python_source_outside_the_project_is_not_a_writable_workspace(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    ext = tmp_path / "ext2"
    ext.mkdir()
    source = ext / "mytools.py"
    source.write_text(
        "from toolgate import tool\n\n\n@tool\ndef add(a: int, b: int) -> int:\n"
        '    """Add two integers."""\n    return a + b\n'
    )
    _project(project, f"python:\n  - {source}\n")
    cli = _cli(project, toolgate_home)
    marker = tmp_path / "marker"
    outcome = _call(cli, "t:pathdrop", ext, name="mytools.py", marker=str(marker))
    _refused(outcome)
    assert "@tool" in source.read_text()  # not rewritten
    # The gateway keeps serving, the source's tools included.
    done = _call(cli, "mytools:add", None, a=1, b=2)
    assert done["status"] == "ok", done
    assert done["content"] == 3


def test_any_python_file_the_gateway_imported_guards_its_folder(tmp_path: Path) -> None:
    # However it was loaded (function: handlers, extensions, capabilities load files this way).
    folder = tmp_path / "handlers"
    folder.mkdir()
    (folder / "handlers.py").write_text("def fn():\n    return 1\n")
    assert workspace_problem(folder, Sandbox().paths()) is None
    name = f"_test_handlers_{secrets.token_hex(4)}"
    spec = importlib.util.spec_from_file_location(name, folder / "handlers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        policy = Sandbox().paths()
        assert workspace_problem(folder, policy) is not None
        assert workspace_problem(tmp_path, policy) is not None  # contains it
        # A read-only workspace may still hold code (it is only read).
        assert workspace_problem(folder, policy, writable=False) is None
    finally:
        del sys.modules[name]
    assert workspace_problem(folder, Sandbox().paths()) is None


# -- the temporary folder: other calls' egress sockets and logs --------------------------------


def test_the_temporary_folder_is_refused_as_workspace_and_fs_prefix_but_its_subfolders_work(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    tmp = Path(tempfile.gettempdir())
    if tmp not in tmp_path.parents:
        pytest.skip(f"pytest's folders are not in the temporary folder {tmp}")
    _project(project)
    write_tool(
        project / "tools", "reader", "echo '{}'", sandbox="compartment",
        permissions={"fs": [str(tmp)]},
    )  # fmt: skip
    cli = _cli(project, toolgate_home)
    marker = tmp_path / "marker"
    _refused(_call(cli, "t:pathdrop", tmp, marker=str(marker)), "contains one of the gateway's")
    _refused(_call(cli, "ops:look", tmp, path=str(tmp)), "contains one of the gateway's")
    unavailable = _call(cli, "t:reader", None)
    assert unavailable["status"] == "error", unavailable
    assert "permissions.fs[0]" in unavailable["message"], unavailable
    assert "contains one of the gateway's own folders" in unavailable["message"], unavailable
    # A folder in /tmp is a workspace as before, for both.
    work = tmp_path / "work"
    work.mkdir()
    done = _call(cli, "t:pathdrop", work, marker=str(marker))
    assert done["status"] == "ok", done
    looked = _call(cli, "ops:look", work, path=str(work))
    assert looked["status"] == "ok", looked
    assert looked["content"]["entries"] == ["python3"]


def test_egress_sockets_live_in_the_guarded_run_folder_no_tool_can_reach(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    cli = _cli(project, toolgate_home)
    work = tmp_path / "work"
    work.mkdir()

    async def while_another_call_has_a_proxy() -> None:
        permissions = Permissions(network=("example.com",))
        async with EgressProxy.start(permissions, tool_id="x:net", call_id="c1") as proxy:
            socket = proxy.socket_path
            run = run_folder_path()
            assert run in socket.parents, socket
            info = run.lstat()
            assert info.st_uid == os.getuid() and (info.st_mode & 0o777) == 0o700
            for workspace in (run, socket.parent, run.parent):
                refused = await asyncio.to_thread(
                    _call, cli, "ops:look", workspace, path=str(socket)
                )
                _refused(refused)
            # A tool with a folder in /tmp as its workspace sees no socket of another call.
            seen = await asyncio.to_thread(_call, cli, "ops:look", work, path=str(socket))
            assert seen["status"] == "ok", seen
            assert seen["content"]["exists"] is False, seen
            listed = await asyncio.to_thread(_call, cli, "ops:look", work, path=str(run))
            assert listed["content"]["exists"] is False, listed

    asyncio.run(while_another_call_has_a_proxy())


def test_js_egress_folders_and_mcp_logs_are_made_in_the_run_folder() -> None:
    from toolgate.formats._common.js_host import confinement

    run = run_folder_path()
    log = stderr_file()
    try:
        where = os.readlink(f"/proc/self/fd/{log.fileno()}")
        assert where.startswith(f"{run}/toolgate-mcp-"), where
    finally:
        log.close()
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")
    key = (f"test-{secrets.token_hex(4)}",)
    confined = confinement(Sandbox(), None, network=True, key=key)
    assert confined is not None and confined.egress_dir is not None
    try:
        assert run in confined.egress_dir.parents, confined.egress_dir
    finally:
        shutil.rmtree(confined.egress_dir, ignore_errors=True)


# -- the spill folder ----------------------------------------------------------------------------


def test_the_spill_folder_is_refused_as_a_read_only_and_a_writable_workspace(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project, "overflow:\n  dir: spill\n")
    session = f"test-{secrets.token_hex(4)}"
    spilled = OverflowSpiller(limit=1, preview_chars=0).spill("xx", session_id=session, call_id="c")
    default = spill_root()
    assert Path(spilled.overflow.path).parent == default / session
    configured = project / "spill"
    OverflowSpiller(limit=1, preview_chars=0, root=configured).spill(
        "xx", session_id=session, call_id="c"
    )
    try:
        cli = _cli(project, toolgate_home)
        marker = tmp_path / "marker"
        for folder in (default, default / session, configured, configured / session):
            _refused(_call(cli, "ops:look", folder, path=str(folder)))
            _refused(_call(cli, "t:pathdrop", folder, marker=str(marker)))
        assert not (default / session / "python3").exists()
        work = tmp_path / "work"
        work.mkdir()
        assert _call(cli, "ops:look", work, path=str(work))["status"] == "ok"
    finally:
        shutil.rmtree(default / session, ignore_errors=True)


def test_a_planted_link_in_the_spill_folder_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "spill"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "victim").symlink_to(elsewhere)
    spiller = OverflowSpiller(limit=1, preview_chars=0, root=root)
    with pytest.raises(OSError, match="not a folder of this user"):
        spiller.spill("secret output", session_id="victim", call_id="c1")
    assert list(elsewhere.iterdir()) == []
    linked = OverflowSpiller(limit=1, preview_chars=0, root=tmp_path / "root-link")
    (tmp_path / "root-link").symlink_to(elsewhere)
    with pytest.raises(OSError, match="not a folder of this user"):
        linked.spill("secret output", session_id="s", call_id="c1")
    assert list(elsewhere.iterdir()) == []
    # Other sessions still spill.
    done = spiller.spill("output", session_id="other", call_id="c2")
    assert Path(done.overflow.path).read_text() == "output"
    assert (root / "other").stat().st_mode & 0o777 == 0o700


# -- the gateway's home, read-only ---------------------------------------------------------------


def test_the_gateway_home_is_refused_as_a_read_only_workspace(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    (toolgate_home / ".env").write_text("API_TOKEN=secret\n")
    cli = _cli(project, toolgate_home)
    for workspace in (toolgate_home, tmp_path):  # the home, a folder holding it
        _refused(_call(cli, "ops:look", workspace, path=str(workspace / ".env")))
    # The project (toolgate.yaml, tools/: code, no state) stays a read-only workspace.
    looked = _call(cli, "ops:look", project, path=str(project))
    assert looked["status"] == "ok", looked
    assert "toolgate.yaml" in looked["content"]["entries"]
    # ...unless it holds the gateway's home.
    inner = project / "state"
    inner.mkdir()
    inside = _cli(project, inner)
    _refused(_call(inside, "ops:look", project, path=str(project)), "contains one of the")
    # The gateway keeps serving.
    work = tmp_path / "work"
    work.mkdir()
    assert _call(inside, "ops:look", work, path=str(work))["status"] == "ok"


def test_the_two_tiers_in_the_policy(tmp_path: Path) -> None:
    code, state = tmp_path / "code", tmp_path / "state"
    policy = PathPolicy(gateway_folders=(code,), state_folders=(state,))
    assert workspace_problem(code, policy, writable=False) is None
    assert workspace_problem(code, policy) is not None
    for writable in (True, False):
        assert workspace_problem(state, policy, writable=writable) is not None
        assert workspace_problem(state / "x", policy, writable=writable) is not None
        assert workspace_problem(tmp_path, policy, writable=writable) is not None
    assert workspace_problem(tmp_path / "other", policy, writable=False) is None
