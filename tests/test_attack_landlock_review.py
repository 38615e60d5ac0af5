"""Attack review of the Landlock layer: what a hostile tool script tries under it.

Each attack runs for real inside a call made through the installed ``toolgate`` console script
(``sandbox.layer: landlock`` forces the layer; bubblewrap works on this machine). One call tries
several things, to keep the tests short.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from egress_support import hello_server
from toolgate.sandbox.landlock import MIN_ABI
from toolgate.sandbox.landlock_exec import abi_version

pytestmark = pytest.mark.slow


def _landlock_works() -> None:
    if abi_version() < MIN_ABI:
        pytest.skip(f"this kernel's Landlock ABI is {abi_version()} (< {MIN_ABI})")
    pytest.importorskip("pyseccomp")


def _tool(root: Path, name: str, script: str, front: str = "") -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "run.py").write_text(script)
    (folder / "tool.md").write_text(
        f"---\nname: {name}\nscript: run.py\nruntime: python\nsandbox: compartment\n{front}"
        "inputSchema:\n  type: object\n---\nA hostile test tool.\n"
    )


def _config(project: Path, sandbox: str = "") -> None:
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\nsandbox:\n  layer: landlock\n"
        + textwrap.indent(textwrap.dedent(sandbox), "  ")
    )


def _call(run_cli: RunCli, tool: str, args: dict[str, Any], workspace: Path) -> dict[str, Any]:
    done = run_cli("call", tool, "--json", "-a", json.dumps(args), "--workspace", str(workspace))
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@contextmanager
def _victim() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP service on another loopback port (a Redis or PostgreSQL of the gateway): yields its
    port and what reached it."""
    got: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    got.append(conn.recv(64) or b"<connected>")
                except OSError:
                    got.append(b"<connected>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], got
    finally:
        stop.set()
        thread.join()
        listener.close()


#: Ways around Landlock's TCP connect rule (it allows the proxy's port only): an MPTCP socket
#: (Landlock rules TCP sockets only), TCP Fast Open (``sendto`` with ``MSG_FASTOPEN`` connects
#: without ``connect``), and an inbound port opened by ``listen`` on an unbound socket.
NET_BYPASS = r"""
import errno, json, socket, sys
data = json.load(sys.stdin)
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as exc:
        out[name] = "denied:" + errno.errorcode.get(exc.errno, "?")
target = ("127.0.0.1", data["victim"])
def plain():
    with socket.socket() as s:
        s.settimeout(2)
        s.connect(target)
        return "connected"
def mptcp(family, address):
    with socket.socket(family, socket.SOCK_STREAM, 262) as s:  # IPPROTO_MPTCP
        s.settimeout(2)
        s.connect(address)
        s.sendall(b"mptcp")
        return "connected"
def fastopen():
    with socket.socket() as s:
        s.sendto(b"fastopen", 0x20000000, target)  # MSG_FASTOPEN
        return "sent"
def listen():
    with socket.socket() as s:
        s.listen(1)
        return s.getsockname()
attempt("plain", plain)
attempt("mptcp", lambda: mptcp(socket.AF_INET, target))
attempt("mptcp6", lambda: mptcp(socket.AF_INET6, ("::ffff:127.0.0.1", data["victim"])))
attempt("fastopen", fastopen)
attempt("listen", listen)
print(json.dumps(out))
"""


def test_a_network_tool_cannot_reach_another_port_through_mptcp_fastopen_or_listen(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    with hello_server() as port, _victim() as (victim, got):
        front = f"permissions:\n  network: ['allowed.test:{port}']\n"
        _tool(project / "tools", "net", NET_BYPASS, front)
        _config(project, 'hosts: {allowed.test: [127.0.0.1]}\naccept_weaker: {"t/*": landlock}\n')
        outcome = _call(run_cli, "t:net", {"victim": victim}, workspace)
    assert outcome["status"] == "ok", outcome
    seen = outcome["content"]
    assert seen["plain"] == "denied:EACCES", seen  # Landlock's port rule
    for name in ("mptcp", "mptcp6", "fastopen", "listen"):
        assert seen[name].startswith("denied:"), (name, seen)
    assert got == [], got  # nothing reached the other port


#: What a tool started by a root gateway may still do with its capabilities (read, not used:
#: changing the host's name or clock would change the test machine).
CAPS = r"""
import ctypes, errno, json, os, sys
json.load(sys.stdin)
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]
header, data = Header(0x20080522, 0), (Data * 2)()
assert libc.capget(ctypes.byref(header), data) == 0
def joined(name):
    return getattr(data[0], name) | getattr(data[1], name) << 32
bounding = [cap for cap in range(64) if libc.prctl(23, cap, 0, 0, 0) == 1]  # PR_CAPBSET_READ
ambient = [cap for cap in range(64) if libc.prctl(47, 1, cap, 0, 0) == 1]  # PR_CAP_AMBIENT_IS_SET
out = {"uid": os.getuid(), "effective": joined("effective"), "permitted": joined("permitted"),
       "inheritable": joined("inheritable"), "bounding": bounding, "ambient": ambient}
print(json.dumps(out))
"""


def test_a_tool_of_a_root_gateway_has_no_capabilities(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    # bubblewrap runs the tool with --cap-drop ALL; the launcher must drop them too, or a tool
    # of a root gateway keeps CAP_SYS_ADMIN, CAP_SYS_TIME, CAP_SYS_NICE... (sethostname,
    # settimeofday, realtime scheduling, fanotify over the whole filesystem).
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _tool(project / "tools", "caps", CAPS)
    _config(project)
    outcome = _call(run_cli, "t:caps", {}, workspace)
    assert outcome["status"] == "ok", outcome
    seen = outcome["content"]
    assert seen["effective"] == 0, seen
    assert seen["permitted"] == 0, seen
    assert seen["inheritable"] == 0, seen
    assert seen["ambient"] == [], seen
    # Empty bounding set: an execve as uid 0 cannot get them back.
    assert seen["bounding"] == [], seen


#: System V IPC objects outlive the process that made them (bubblewrap's IPC namespace dies
#: with the call; here there is none): memory a call leaves behind, and the gateway user's
#: segments by guessable id.
SYSV = r"""
import ctypes, errno, json, sys
json.load(sys.stdin)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}
def attempt(name, nr, *args):
    result = libc.syscall(nr, *args)
    if result >= 0:
        out[name] = "ok:" + str(result)
        if name == "shmget":
            libc.syscall(31, result, 0, None)  # IPC_RMID: leave nothing behind
        if name == "msgget":
            libc.syscall(71, result, 0, None)
        if name == "semget":
            libc.syscall(66, result, 0, 0, None)
    else:
        out[name] = "denied:" + errno.errorcode.get(ctypes.get_errno(), "?")
attempt("shmget", 29, 0, 4096, 0o1600)   # IPC_PRIVATE, IPC_CREAT
attempt("msgget", 68, 0, 0o1600)
attempt("semget", 64, 0, 1, 0o1600)
attempt("shmat", 30, 0, None, 0)
print(json.dumps(out))
"""


def test_a_tool_cannot_make_or_attach_system_v_ipc_objects(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _tool(project / "tools", "sysv", SYSV)
    _config(project)
    outcome = _call(run_cli, "t:sysv", {}, workspace)
    assert outcome["status"] == "ok", outcome
    seen = outcome["content"]
    for name in ("shmget", "msgget", "semget", "shmat"):
        assert seen[name] == "denied:EPERM", (name, seen)


#: Starts a background child that records its pid and scratch folder, then waits.
ORPHAN = r"""
import json, os, sys, time
data = json.load(sys.stdin)
if os.fork() == 0:
    os.close(1)
    os.close(2)
    record = {"pid": os.getpid(), "scratch": os.path.dirname(os.environ["TMPDIR"])}
    with open(os.path.join(data["workspace"], "child.json.tmp"), "w") as handle:
        handle.write(json.dumps(record))
    os.rename(os.path.join(data["workspace"], "child.json.tmp"),
              os.path.join(data["workspace"], "child.json"))
    time.sleep(120)
    os._exit(0)
time.sleep(120)
"""


def _running(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except OSError:
        return False


def test_what_a_tool_started_dies_with_a_killed_gateway(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _tool(project / "tools", "orphan", ORPHAN, "side_effect: write\ntimeout: 60000\n")
    _config(project, "allow_unlimited_processes: true\n")
    toolgate = Path(sys.executable).parent / "toolgate"
    args = json.dumps({"workspace": str(workspace)})
    gateway = subprocess.Popen(
        [str(toolgate), "call", "t:orphan", "--json", "-a", args, "--workspace", str(workspace)],
        cwd=project,
        env={**os.environ, "TOOLGATE_HOME": str(toolgate_home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    record = workspace / "child.json"
    child: dict[str, Any] = {}
    try:
        for _ in range(600):  # the child's record, or the gateway's end (it failed)
            if record.exists() or gateway.poll() is not None:
                break
            time.sleep(0.05)
        assert record.exists(), "the tool did not start"
        child = json.loads(record.read_text())
        gateway.send_signal(signal.SIGKILL)
        gateway.wait()
        # The kernel's death signal is asynchronous, and the supervisor removes the scratch
        # folder after it reaped the call's processes.
        for _ in range(100):
            if not _running(child["pid"]) and not Path(child["scratch"]).exists():
                break
            time.sleep(0.05)
        assert not _running(child["pid"]), "a process of the call outlived the gateway"
        assert not Path(child["scratch"]).exists(), "the call's scratch folder was left behind"
    finally:
        if gateway.poll() is None:
            gateway.kill()
            gateway.wait()
        if child and _running(child["pid"]):
            os.kill(child["pid"], signal.SIGKILL)
        if child:
            import shutil

            shutil.rmtree(child["scratch"], ignore_errors=True)


#: A Unix datagram socket can be re-addressed (``sendto``/``connect`` to a path), and Landlock
#: does not rule Unix sockets: a datagram ``socketpair`` (``SOCK_RAW`` is one too for
#: ``AF_UNIX``) reaches any pathname datagram socket (syslog's ``/dev/log``, journald, systemd's
#: notify socket). Stream and seqpacket pairs are connected for good.
DGRAM = r"""
import errno, json, socket, sys
data = json.load(sys.stdin)
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as exc:
        out[name] = "denied:" + errno.errorcode.get(exc.errno, "?")
def pair(kind):
    one, two = socket.socketpair(socket.AF_UNIX, kind)
    with one, two:
        one.sendto(b"escaped", data["victim"])
        return "sent"
def stream():
    one, two = socket.socketpair()
    with one, two:
        one.sendall(b"x")
        return two.recv(1).decode()
attempt("dgram", lambda: pair(socket.SOCK_DGRAM))
attempt("raw", lambda: pair(socket.SOCK_RAW))
attempt("stream", stream)
print(json.dumps(out))
"""


@pytest.mark.parametrize("network", [False, True])
def test_a_tool_cannot_reach_a_unix_datagram_socket_through_a_socketpair(
    run_cli: RunCli, project: Path, tmp_path: Path, network: bool
) -> None:
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    path = tmp_path / "victim.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as victim:
        victim.bind(str(path))
        front = "permissions:\n  network: ['allowed.test']\n" if network else ""
        _tool(project / "tools", "dgram", DGRAM, front)
        _config(project, 'accept_weaker: {"t/*": landlock}\n' if network else "")
        outcome = _call(run_cli, "t:dgram", {"victim": str(path)}, workspace)
        victim.setblocking(False)
        try:
            got: bytes | None = victim.recv(64)
        except BlockingIOError:
            got = None
    assert outcome["status"] == "ok", outcome
    seen = outcome["content"]
    assert seen["dgram"].startswith("denied:"), seen
    assert seen["raw"].startswith("denied:"), seen
    assert seen["stream"] == "ok:x", seen  # pipes between its own processes still work
    assert got is None, got


#: Landlock rules opening and writing files, not their metadata: modes and extended attributes
#: of files outside the grants (owned by the gateway's user) are changed by name.
METADATA = r"""
import errno, json, os, sys
data = json.load(sys.stdin)
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as exc:
        out[name] = "denied:" + errno.errorcode.get(exc.errno, "?")
outside = data["outside"]
mine = os.path.join(os.environ["TMPDIR"], "script.sh")
with open(mine, "w") as handle:
    handle.write("#!/bin/sh\n")
attempt("setuid_outside", lambda: os.chmod(outside, 0o4755))
attempt("setgid_outside", lambda: os.chmod(outside, 0o2755))
attempt("world_writable_outside", lambda: os.chmod(outside, 0o666))
attempt("xattr_outside", lambda: os.setxattr(outside, "user.planted", b"1"))
fd = os.open(outside, os.O_PATH)
attempt("setuid_by_descriptor", lambda: os.chmod(f"/proc/self/fd/{fd}", 0o4755))
attempt("setuid_mine", lambda: os.chmod(mine, 0o4755))
attempt("exec_bit_mine", lambda: os.chmod(mine, 0o755))  # what installers do: still works
print(json.dumps(out))
"""


def test_a_tool_cannot_make_files_setuid_or_world_writable_or_set_attributes(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "gateway-owned.bin"
    outside.write_text("not the tool's")
    outside.chmod(0o700)
    _tool(project / "tools", "meta", METADATA)
    _config(project)
    outcome = _call(run_cli, "t:meta", {"outside": str(outside)}, workspace)
    assert outcome["status"] == "ok", outcome
    seen = outcome["content"]
    for name in ("setuid_outside", "setgid_outside", "world_writable_outside", "setuid_mine"):
        assert seen[name] == "denied:EPERM", (name, seen)
    assert seen["xattr_outside"] == "denied:" + errno.errorcode[errno.EOPNOTSUPP], seen
    assert seen["setuid_by_descriptor"].startswith("denied:"), seen
    assert seen["exec_bit_mine"] == "ok:None", seen
    assert outside.stat().st_mode & 0o7777 == 0o700
    assert not os.listxattr(outside)


@pytest.mark.xfail(
    strict=True,
    reason="Landlock (ABI 7) does not rule metadata: a tool may chmod (within the allowed bits), "
    "utime and chgrp any file the gateway's user owns, outside its grants too; seccomp cannot "
    "tell the path. Documented in sandboxing-containers.md",
)
def test_a_tool_cannot_change_the_mode_of_a_file_outside_its_grants(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "gateway-state.db"
    outside.write_text("state")
    outside.chmod(0o600)
    script = (
        "import json, os, sys\ndata = json.load(sys.stdin)\n"
        "try:\n    os.chmod(data['outside'], 0)\nexcept OSError:\n    pass\nprint('{}')\n"
    )
    _tool(project / "tools", "mode", script)
    _config(project)
    outcome = _call(run_cli, "t:mode", {"outside": str(outside)}, workspace)
    assert outcome["status"] == "ok", outcome
    assert outside.stat().st_mode & 0o7777 == 0o600


#: Leaves a file in a folder of its scratch space that it made read-only and unsearchable.
LOCKED = r"""
import json, os, sys
data = json.load(sys.stdin)
folder = os.path.join(os.environ["TMPDIR"], "locked", "deeper")
os.makedirs(folder)
with open(os.path.join(folder, "left.bin"), "wb") as handle:
    handle.write(b"x" * 4096)
os.symlink(data["outside"], os.path.join(os.environ["TMPDIR"], "link"))
os.chmod(folder, 0)
os.chmod(os.path.dirname(folder), 0)
with open(os.path.join(data["workspace"], "scratch.txt"), "w") as handle:
    handle.write(os.path.dirname(os.environ["TMPDIR"]))
print("{}")
"""


def test_the_scratch_folder_is_removed_even_when_the_tool_locked_a_folder_in_it(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    # A gateway that is not root has no CAP_DAC_OVERRIDE: simulated by running it with every
    # capability dropped (setpriv), so a folder the tool made 000 cannot be emptied unless the
    # gateway gives it back its mode first.
    import os
    import shutil
    import subprocess
    import sys

    _landlock_works()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    outside.chmod(0o640)
    _tool(project / "tools", "lock", LOCKED, "side_effect: write\n")
    _config(project, "allow_unlimited_processes: true\n")
    args = json.dumps({"workspace": str(workspace), "outside": str(outside)})
    toolgate = Path(sys.executable).parent / "toolgate"
    no_caps = [setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"]
    done = subprocess.run(
        [
            *no_caps,
            str(toolgate),
            "call",
            "t:lock",
            "--json",
            "-a",
            args,
            "--workspace",
            str(workspace),
        ],
        cwd=project,
        env={**os.environ, "TOOLGATE_HOME": str(toolgate_home)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert json.loads(done.stdout)["status"] == "ok", done.stdout + done.stderr
    scratch = Path((workspace / "scratch.txt").read_text())
    try:
        assert not scratch.exists(), sorted(str(p) for p in scratch.rglob("*"))
        assert outside.stat().st_mode & 0o777 == 0o640  # the symlink was not followed
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(scratch)], check=False)
        shutil.rmtree(scratch, ignore_errors=True)


#: Landlock scopes signals and ptrace, not limits or scheduling: the gateway (the tool's parent)
#: is the same user. Each change here sets what is already set (nothing changes if allowed).
LIMITS = r"""
import errno, json, os, resource, sys
json.load(sys.stdin)
out = {}
def attempt(name, fn):
    try:
        out[name] = "ok:" + str(fn())
    except OSError as exc:
        out[name] = "denied:" + errno.errorcode.get(exc.errno, "?")
gateway = os.getppid()
now = resource.prlimit(gateway, resource.RLIMIT_NOFILE)
attempt("read_gateway_limit", lambda: now)
attempt("set_gateway_limit", lambda: resource.prlimit(gateway, resource.RLIMIT_NOFILE, now))
attempt("renice_user", lambda: os.setpriority(os.PRIO_USER, 0, os.getpriority(os.PRIO_USER, 0)))
attempt("renice_gateway", lambda: os.setpriority(os.PRIO_PROCESS, gateway, 0))
other = os.sched_param(0)
attempt("schedule_gateway", lambda: os.sched_setscheduler(gateway, os.SCHED_OTHER, other))
mine = resource.getrlimit(resource.RLIMIT_NOFILE)
attempt("own_limit", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (mine[0] // 2, mine[1])))
attempt("own_nice", lambda: os.nice(1))
print(json.dumps(out))
"""


def test_a_tool_cannot_change_the_gateways_limits_or_scheduling(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    _landlock_works()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    _tool(project / "tools", "limits", LIMITS)
    _config(project)
    outcome = _call(run_cli, "t:limits", {}, workspace)
    assert outcome["status"] == "ok", outcome
    seen = outcome["content"]
    assert seen["read_gateway_limit"].startswith("ok:"), seen
    for name in ("set_gateway_limit", "renice_user", "renice_gateway", "schedule_gateway"):
        assert seen[name] == "denied:EPERM", (name, seen)
    # Its own limits and niceness, as always.
    assert seen["own_limit"] == "ok:None", seen
    assert seen["own_nice"] == "ok:1", seen


#: clone(CLONE_PARENT) makes a sibling: a child of the gateway, which never waits for it. Under
#: bubblewrap the sandbox's own init is that parent; here every one would stay a zombie of a
#: long-running gateway (a pid each, counted by the process limits).
SIBLINGS = r"""
import ctypes, json, os, sys
json.load(sys.stdin)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
made, refused = 0, None
for _ in range(5):
    pid = libc.syscall(56, 0x00008000 | 17, 0, 0, 0, 0)  # clone(CLONE_PARENT | SIGCHLD)
    if pid == 0:
        os._exit(0)
    if pid < 0:
        refused = ctypes.get_errno()
        break
    made += 1
print(json.dumps({"made": made, "refused": refused}))
"""


def _zombie_children() -> set[int]:
    import os

    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            found.add(int(entry.name))
    return found


def test_a_tool_cannot_leave_zombie_children_to_the_gateway(tmp_path: Path) -> None:
    from folder_tools import clean_environ
    from gateway_support import gateway_with
    from toolgate.sandbox.runner import Sandbox
    from toolgate.sandbox.settings import SandboxConfig

    _landlock_works()
    root = tmp_path / "tools"
    _tool(root, "siblings", SIBLINGS)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    before = _zombie_children()
    sandbox = Sandbox(SandboxConfig(layer="landlock"))
    with gateway_with(tool_folders=[root], environ=clean_environ(), sandbox=sandbox) as gateway:
        outcome = gateway.call_sync("local:siblings", {}, workspace=workspace)
        left = _zombie_children() - before
    assert outcome.ok, outcome.message
    assert outcome.content == {"made": 0, "refused": errno.EPERM}, outcome.content
    assert not left, left
