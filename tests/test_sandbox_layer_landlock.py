"""The Landlock layer through the public surface: toolgate.yaml, tool folders and the CLI.

bubblewrap works on this machine, so these tests force the layer (``sandbox.layer: landlock``);
the tools are real scripts run by the installed ``toolgate`` console script, and each attack is
tried for real inside the call (one call tries many, to keep the test short).
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from egress_support import HELLO, hello_server
from toolgate.sandbox.landlock import MIN_ABI
from toolgate.sandbox.landlock_exec import abi_version

pytestmark = pytest.mark.slow


def _landlock_works() -> None:
    if abi_version() < MIN_ABI:
        pytest.skip(f"this kernel's Landlock ABI is {abi_version()} (< {MIN_ABI})")
    pytest.importorskip("pyseccomp")


#: Tries what an attacker would, from inside the sandbox, and says what happened to each.
ATTACK = r"""
import ctypes, errno, json, os, socket, sys
data = json.load(sys.stdin)
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as exc:
        out[name] = "denied:" + (errno.errorcode.get(exc.errno, "?"))
def read(path):
    with open(path, "rb") as handle:
        return handle.read(40).decode("utf-8", "replace")
def write(path):
    with open(path, "w") as handle:
        handle.write("x")
    return "written"
gateway = os.getppid()
attempt("prefix", lambda: read(data["prefix_file"]))
attempt("sibling", lambda: read(data["sibling_file"]))
attempt("proc_environ", lambda: read(f"/proc/{gateway}/environ"))
attempt("own_proc", lambda: read("/proc/self/status"))
attempt("ssh", lambda: os.listdir(data["ssh"]))
attempt("home", lambda: os.listdir(data["home"]))
attempt("state", lambda: os.listdir(data["state"]))
attempt("config", lambda: read(data["config"]))
attempt("write_workspace", lambda: write(os.path.join(data["workspace"], "made.txt")))
attempt("write_tmpdir", lambda: write(os.path.join(os.environ["TMPDIR"], "scratch.txt")))
attempt("write_home", lambda: write(os.path.join(os.environ["HOME"], "dot")))
attempt("write_tmp", lambda: write("/tmp/toolgate-landlock-escape.txt"))
attempt("write_prefix", lambda: write(os.path.join(os.path.dirname(data["prefix_file"]), "w")))
def connect(port):
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        return "connected"
attempt("connect_loopback", lambda: connect(data["port"]))
attempt("unix_socket", lambda: socket.socket(socket.AF_UNIX).close())
attempt("socketpair", lambda: [s.close() for s in socket.socketpair()] and "pair")
attempt("kill_gateway", lambda: os.kill(gateway, 0))
attempt("setsid", lambda: os.setsid())
attempt("setpgid", lambda: os.setpgid(0, 0))
libc = ctypes.CDLL(None, use_errno=True)
def call(fn, *args):
    if fn(*args) != 0:
        raise OSError(ctypes.get_errno(), "failed")
    return "done"
attempt("ptrace", lambda: call(libc.ptrace, 16, gateway, None, None))  # PTRACE_ATTACH
attempt("unshare_user", lambda: call(libc.unshare, 0x10000000))
attempt("mount", lambda: call(libc.mount, b"none", b"/tmp", b"tmpfs", 0, None))
attempt("env_keys", lambda: ",".join(sorted(os.environ)))
print(json.dumps(out))
"""

FORK_BOMB = r"""
import json, os, sys, time
json.load(sys.stdin)
made = 0
children = []
while made < 2000:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children.append(pid)
    made += 1
for pid in children:
    os.kill(pid, 9)
print(json.dumps({"forked": made}))
"""

#: Starts a child that records its pid and outlives the call's timeout unless its group is
#: killed; the child first tries to leave the group (setsid), which must be refused.
LINGER = r"""
import json, os, sys, time
data = json.load(sys.stdin)
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        left = "left"
    except OSError:
        left = "stayed"
    with open(os.path.join(data["workspace"], "child.json"), "w") as handle:
        handle.write(json.dumps({"pid": os.getpid(), "group": left}))
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""

NET = r"""
import json, os, socket, sys, urllib.request, urllib.error
data = json.load(sys.stdin)
out = {}
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return "ok:" + answer.read().decode()
    except urllib.error.HTTPError as exc:
        return f"refused:{exc.code}"
    except OSError as exc:
        return "denied:" + str(exc)
out["allowed"] = get(f"http://allowed.test:{data['port']}/")
out["undeclared"] = get(f"http://other.test:{data['port']}/")
out["metadata_via_proxy"] = get("http://169.254.169.254/latest/meta-data/")
def direct(host, port):
    try:
        with socket.create_connection((host, port), timeout=2):
            return "connected"
    except OSError as exc:
        return "denied:" + str(exc)
out["metadata_direct"] = direct("169.254.169.254", 80)
out["loopback_direct"] = direct("127.0.0.1", data["port"])
out["udp"] = direct_udp = None
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
    out["udp"] = "made"
except OSError as exc:
    out["udp"] = "denied:" + str(exc)
print(json.dumps(out))
"""


def _tool(root: Path, name: str, script: str, front: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(script)
    (folder / "tool.md").write_text(
        f"---\nname: {name}\nscript: run.py\nruntime: python\nsandbox: compartment\n{front}"
        "inputSchema:\n  type: object\n---\nA test tool.\n"
    )
    return folder


def _config(project: Path, sandbox: str) -> None:
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\nsandbox:\n  layer: landlock\n"
        + textwrap.indent(textwrap.dedent(sandbox), "  ")
    )


def _call(run_cli: RunCli, tool: str, args: dict[str, Any], workspace: Path) -> dict[str, Any]:
    done = run_cli("call", tool, "--json", "-a", json.dumps(args), "--workspace", str(workspace))
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@pytest.fixture
def layout(tmp_path: Path) -> dict[str, Path]:
    """A declared prefix with a file, a sibling folder with a secret, a workspace."""
    data = tmp_path / "data"
    (data / "allowed").mkdir(parents=True)
    (data / "sibling").mkdir()
    (data / "allowed" / "a.txt").write_text("declared data")
    (data / "sibling" / "secret.txt").write_text("sibling secret")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return {"allowed": data / "allowed", "sibling": data / "sibling", "workspace": workspace}


def test_a_landlocked_tool_reads_only_what_it_declares_and_cannot_escape(
    run_cli: RunCli, project: Path, toolgate_home: Path, layout: dict[str, Path]
) -> None:
    _landlock_works()
    (toolgate_home / "approvals.db").write_text("state")
    _tool(project / "tools", "attack", ATTACK, f"permissions:\n  fs: [{layout['allowed']}]\n")
    _config(project, "")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        outcome = _call(
            run_cli,
            "t:attack",
            {
                "prefix_file": str(layout["allowed"] / "a.txt"),
                "sibling_file": str(layout["sibling"] / "secret.txt"),
                "ssh": str(Path.home() / ".ssh"),
                "home": str(Path.home()),
                "state": str(toolgate_home),
                "config": str(project / "toolgate.yaml"),
                "workspace": str(layout["workspace"]),
                "port": port,
            },
            layout["workspace"],
        )
    assert outcome["status"] == "ok", outcome
    assert outcome["metadata"]["sandbox"]["layer"] == "landlock"
    assert "not_enforced" not in outcome["metadata"]["sandbox"]
    seen = outcome["content"]
    assert seen["prefix"] == "ok:declared data"
    for name in ("sibling", "proc_environ", "own_proc", "home", "state", "config"):
        assert seen[name] == "denied:EACCES", (name, seen)
    # ~/.ssh may not exist on the machine; either way the tool cannot look.
    assert seen["ssh"] in ("denied:EACCES", "denied:ENOENT"), seen
    assert seen["write_workspace"] == "ok:written"
    assert (layout["workspace"] / "made.txt").read_text() == "x"
    assert seen["write_tmpdir"] == "ok:written"
    assert seen["write_home"] == "ok:written"
    assert seen["write_tmp"] == "denied:EACCES"
    assert not Path("/tmp/toolgate-landlock-escape.txt").exists()
    assert seen["write_prefix"] == "denied:EACCES"
    # No network permission: no socket at all (seccomp), no TCP connect (Landlock).
    assert seen["connect_loopback"] == "denied:EAFNOSUPPORT"
    assert seen["unix_socket"] == "denied:EAFNOSUPPORT"
    assert seen["socketpair"].startswith("ok:")
    # The signal scope: the gateway cannot be signalled; nor can the tool leave its group.
    assert seen["kill_gateway"] == "denied:EPERM"
    assert seen["setsid"] == "denied:EPERM"
    assert seen["setpgid"] == "denied:EPERM"
    assert seen["ptrace"] == "denied:EPERM"
    assert seen["unshare_user"] == "denied:EPERM"
    assert seen["mount"] == "denied:EPERM"
    assert seen["env_keys"] == "ok:HOME,LANG,PATH,PWD,PYTHONNOUSERSITE,TMPDIR"
    # The scratch folder is gone after the call.
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("toolgate-call-*/tmp/scratch.txt"))


def test_a_fork_bomb_stops_at_the_process_limit(
    run_cli: RunCli, project: Path, layout: dict[str, Path]
) -> None:
    _landlock_works()
    _tool(project / "tools", "bomb", FORK_BOMB, "")
    _config(project, "limits: {processes: 16}\n")
    outcome = _call(run_cli, "t:bomb", {}, layout["workspace"])
    assert outcome["status"] == "ok", outcome
    # The pids cgroup (pids.max 16 + 1 for the launcher's join shell) or RLIMIT_NPROC stops
    # it far before the 2000 it tries.
    assert 0 < outcome["content"]["forked"] <= 16, outcome


def test_at_the_timeout_every_process_of_the_call_is_killed(
    run_cli: RunCli, project: Path, layout: dict[str, Path]
) -> None:
    _landlock_works()
    _tool(project / "tools", "linger", LINGER, "timeout: 1500\n")
    _config(project, "")
    workspace = layout["workspace"]
    outcome = _call(run_cli, "t:linger", {"workspace": str(workspace)}, workspace)
    assert outcome["code"] == "timeout", outcome
    child = json.loads((workspace / "child.json").read_text())
    assert child["group"] == "stayed"  # setsid refused: killpg reaches it
    status = Path(f"/proc/{child['pid']}/status")
    # Gone, or a zombie waiting for its reaper: not running either way.
    assert not status.exists() or "State:\tZ" in status.read_text()


def test_declared_runtime_code_keys_are_refused_under_landlock(
    run_cli: RunCli, project: Path, layout: dict[str, Path]
) -> None:
    _landlock_works()
    _tool(project / "tools", "inject", ATTACK, "env: [BASH_ENV]\n")
    _tool(project / "tools", "preload", ATTACK, "permissions:\n  env: [LD_PRELOAD]\n")
    _config(project, "")
    for tool in ("t:inject", "t:preload"):
        outcome = _call(run_cli, tool, {}, layout["workspace"])
        assert outcome["status"] == "error", outcome
        # Refused at load, as under bubblewrap: the tool is never registered.
        assert outcome["code"] in ("tool_not_found", "unavailable"), outcome
        assert "content" not in outcome
    listed = run_cli("tools", "list")
    assert "'BASH_ENV' may not be declared" in listed.stdout + listed.stderr
    assert "'LD_PRELOAD' may not be declared" in listed.stdout + listed.stderr


def test_a_network_tool_needs_accept_weaker_and_then_reaches_only_its_hosts(
    run_cli: RunCli, project: Path, layout: dict[str, Path]
) -> None:
    _landlock_works()
    hosts = """
    hosts: {allowed.test: [127.0.0.1], other.test: [127.0.0.1]}
    network_grants: {"t:net": [127.0.0.1/32]}
    """
    with hello_server() as port:
        front = f"permissions:\n  network: ['allowed.test:{port}']\n"
        _tool(project / "tools", "net", NET, front)
        _config(project, hosts)
        refused = _call(run_cli, "t:net", {"port": port}, layout["workspace"])
        assert refused["code"] == "unavailable", refused
        assert "accept_weaker" in refused["message"]
        assert "by port, not address" in refused["message"]

        _config(project, hosts + 'accept_weaker: {"t/*": landlock}\n')
        outcome = _call(run_cli, "t:net", {"port": port}, layout["workspace"])
    assert outcome["status"] == "ok", outcome
    sandbox = outcome["metadata"]["sandbox"]
    assert sandbox["layer"] == "landlock"
    assert sandbox["not_enforced"] == ["network"]
    seen = outcome["content"]
    assert seen["allowed"] == f"ok:{HELLO}", sandbox
    assert seen["undeclared"].startswith("refused:4"), seen
    assert seen["metadata_via_proxy"].startswith("refused:4"), seen
    # Straight to an address: Landlock allows the proxy's port only.
    assert "Permission denied" in seen["metadata_direct"], seen
    assert "Permission denied" in seen["loopback_direct"], seen
    assert "not supported" in seen["udp"], seen
    events = sandbox["egress"]
    assert any(e["allowed"] and e["host"] == "allowed.test" for e in events)
    assert any(not e["allowed"] and e["host"] == "other.test" for e in events)


def test_sandbox_check_and_tools_show_name_the_layer_and_what_it_enforces(
    run_cli: RunCli, project: Path, layout: dict[str, Path]
) -> None:
    _landlock_works()
    _tool(project / "tools", "net", NET, "permissions:\n  network: [allowed.test]\n")
    _config(project, "")
    done = run_cli("sandbox", "check", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["layer"] == "landlock"
    assert report["why_not_bubblewrap"] == "sandbox.layer is 'landlock' in toolgate.yaml"
    network = report["enforcement"]["network"]
    assert network["landlock"].startswith("NOT enforced")
    assert network["bubblewrap"].startswith("enforced")
    assert report["enforcement"]["proc"]["landlock"].startswith("enforced")
    text = run_cli("sandbox", "check").stdout
    assert "layer landlock + seccomp" in text
    assert "network [landlock]: NOT enforced" in text

    shown = json.loads(run_cli("tools", "show", "t:net", "--json").stdout)
    assert shown["available"] is False
    enforced = shown["sandbox"]["enforced"]
    assert enforced["sandbox"].startswith("compartment (landlock + seccomp); NOT enforced: network")
    assert enforced["network (landlock)"].startswith("NOT enforced")
    assert "fs (landlock)" not in enforced  # only the aspects the tool has are listed
    assert enforced["proc (landlock)"].startswith("enforced")


def test_an_unknown_layer_name_is_a_config_error_naming_the_field(
    run_cli: RunCli, project: Path
) -> None:
    _config(project, 'accept_weaker: {"t/*": chroot}\n')
    done = run_cli("sandbox", "check")
    assert done.returncode != 0
    assert "sandbox.accept_weaker.t/*: Input should be 'landlock'" in done.stdout + done.stderr
    (project / "toolgate.yaml").write_text("sandbox:\n  layer: gvisor\n")
    done = run_cli("sandbox", "check")
    assert done.returncode != 0
    assert "sandbox.layer: Input should be 'auto', 'bubblewrap' or 'landlock'" in (
        done.stdout + done.stderr
    )
