"""The container stand-in (``tests/container_standin/launch.py``) is faithful: under it user
namespaces, mounts and the other calls Docker's default seccomp profile refuses to a container
without CAP_SYS_ADMIN fail as they fail there, bubblewrap cannot start (with its real message),
and ordinary programs run. The same probes run on the host show that the refusals come from the
stand-in, not from the machine.
"""

from __future__ import annotations

import errno
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from folder_tools import require_program

LAUNCH = Path(__file__).parent / "container_standin" / "launch.py"

#: One raw system call per line of output: its name and the errno it failed with (0: it worked).
SYSCALLS = textwrap.dedent(
    """\
    import ctypes, json, os, socket
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    SIGCHLD = 17
    NS = {"NEWNS": 0x20000, "NEWCGROUP": 0x2000000, "NEWUTS": 0x4000000, "NEWIPC": 0x8000000,
          "NEWUSER": 0x10000000, "NEWPID": 0x20000000, "NEWNET": 0x40000000}
    result = {}

    def outcome(value):
        return 0 if value != -1 else ctypes.get_errno()

    def in_child(call):
        # A call that changes the process (unshare) runs in a child, which reports its errno.
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, str(call()).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        return int(os.read(read, 16))

    for name, flag in NS.items():
        def clone(flag=flag):
            got = libc.syscall(56, flag | SIGCHLD, 0, 0, 0, 0)  # x86-64 clone
            if got == 0:
                os._exit(0)
            if got > 0:
                os.waitpid(got, 0)
            return outcome(got)
        result["clone " + name] = clone()
        result["unshare " + name] = in_child(lambda flag=flag: outcome(libc.unshare(flag)))
    result["clone3"] = outcome(libc.syscall(435, 0, 0))
    net = os.open("/proc/self/ns/net", os.O_RDONLY)
    result["setns"] = outcome(libc.setns(net, 0))
    result["mount"] = outcome(libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))
    result["umount2"] = outcome(libc.umount2(b"/proc", 0))
    result["pivot_root"] = outcome(libc.syscall(155, b"/", b"/"))
    result["keyctl"] = outcome(libc.syscall(250, 0, 0, 0, 0, 0))
    result["add_key"] = outcome(libc.syscall(248, b"user", b"k", b"v", 1, -2))
    result["bpf"] = outcome(libc.syscall(321, 0, 0, 0))
    result["perf_event_open"] = outcome(libc.syscall(298, 0, 0, -1, -1, 0))
    result["open_by_handle_at"] = outcome(libc.syscall(304, -100, 0, 0))
    try:
        socket.socket(40, socket.SOCK_STREAM).close()  # AF_VSOCK
        result["socket AF_VSOCK"] = 0
    except OSError as exc:
        result["socket AF_VSOCK"] = exc.errno
    result["fork"] = in_child(lambda: 0)
    # ptrace of one's own child: allowed by Docker's profile (kernel >= 4.8), so the attack
    # tests see toolgate's layer refuse it, not the stand-in.
    child = os.fork()
    if child == 0:
        import time
        time.sleep(30)
        os._exit(0)
    result["ptrace"] = outcome(libc.ptrace(16, child, None, None))  # PTRACE_ATTACH
    os.kill(child, 9)
    os.waitpid(child, 0)
    print(json.dumps(result))
    """
)

REFUSED = {
    **{f"clone {ns}": errno.EPERM for ns in ("NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC")},
    **{f"clone {ns}": errno.EPERM for ns in ("NEWUSER", "NEWPID", "NEWNET")},
    **{f"unshare {ns}": errno.EPERM for ns in ("NEWNS", "NEWCGROUP", "NEWUTS", "NEWIPC")},
    **{f"unshare {ns}": errno.EPERM for ns in ("NEWUSER", "NEWPID", "NEWNET")},
    "clone3": errno.ENOSYS,
    "setns": errno.EPERM,
    "mount": errno.EPERM,
    "umount2": errno.EPERM,
    "pivot_root": errno.EPERM,
    "keyctl": errno.EPERM,
    "add_key": errno.EPERM,
    "bpf": errno.EPERM,
    "perf_event_open": errno.EPERM,
    "open_by_handle_at": errno.EPERM,
    "socket AF_VSOCK": errno.EPERM,
    "fork": 0,
    "ptrace": 0,
}

#: The capabilities Docker leaves a container (moby oci/caps/defaults.go), as a CapBnd mask.
DOCKER_MASK = sum(1 << cap for cap in (0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 27, 29, 31))


def standin(*argv: str, caps: str | None = None) -> subprocess.CompletedProcess[str]:
    options = [f"--caps={caps}"] if caps else []
    return subprocess.run(
        [sys.executable, str(LAUNCH), *options, "--", *argv],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_every_namespace_and_mount_call_fails_as_in_a_docker_container() -> None:
    done = standin(sys.executable, "-c", SYSCALLS)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == REFUSED


def test_on_the_host_the_same_calls_are_not_refused_by_a_filter() -> None:
    # The control: without the stand-in, a user namespace and clone3 work here, so the
    # refusals above are the stand-in's.
    done = subprocess.run(
        [sys.executable, "-c", SYSCALLS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    host = json.loads(done.stdout)
    assert host["unshare NEWUSER"] == 0 and host["clone NEWUSER"] == 0, host
    assert host["clone3"] != errno.ENOSYS, host


def test_unshare_fails_with_eperm() -> None:
    require_program("unshare")
    done = standin("unshare", "-U", "true")
    assert done.returncode != 0
    assert "unshare failed: Operation not permitted" in done.stderr, done.stderr


#: bubblewrap's own words: with a user namespace it blames the kernel's settings (what an
#: operator sees in a container), without one (run as root) the mount namespace fails.
NO_USERNS = "bwrap: No permissions to create new namespace, likely because the kernel does not"
NO_MOUNTNS = "bwrap: Creating new namespace failed: Operation not permitted"


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--unshare-all"], NO_USERNS), (["--unshare-user"], NO_USERNS), ([], NO_MOUNTNS)],
)
def test_bubblewrap_cannot_start(extra: list[str], message: str) -> None:
    require_program("bwrap")
    done = standin("bwrap", *extra, "--ro-bind", "/", "/", "true")
    assert done.returncode == 1
    assert done.stderr.startswith(message), done.stderr
    # Outside the stand-in the same command works here.
    host = subprocess.run(
        ["bwrap", *extra, "--ro-bind", "/", "/", "true"], capture_output=True, text=True
    )
    assert host.returncode == 0, host.stderr


def test_ordinary_programs_run_threads_and_children_included() -> None:
    code = (
        "import subprocess, sys, threading\n"
        "out = []\n"
        "workers = [threading.Thread(target=out.append, args=(n,)) for n in range(8)]\n"
        "[w.start() for w in workers]; [w.join() for w in workers]\n"
        "child = subprocess.run(['sh', '-c', 'echo child'], capture_output=True, text=True)\n"
        "print(sorted(out), child.stdout.strip())\n"
    )
    done = standin(sys.executable, "-c", code)
    assert (done.returncode, done.stdout) == (0, "[0, 1, 2, 3, 4, 5, 6, 7] child\n"), done.stderr


def test_node_starts_its_threads_through_the_clone_fallback() -> None:
    # libuv and V8 start threads with glibc's pthread_create, which tries clone3 first: the
    # ENOSYS answer must make it fall back to clone, as in a container.
    require_program("node")
    done = standin("node", "-e", "require('fs').readFile('/etc/hostname', () => console.log('ok'))")
    assert (done.returncode, done.stdout) == (0, "ok\n"), done.stderr


def _status(*options: str) -> dict[str, str]:
    done = standin("cat", "/proc/self/status", *options)
    assert done.returncode == 0, done.stderr
    return dict(line.split(":\t", 1) for line in done.stdout.splitlines() if ":\t" in line)


def test_no_new_privs_the_filter_and_dockers_capabilities_hold() -> None:
    status = _status()
    assert status["NoNewPrivs"].strip() == "1"
    assert status["Seccomp"].strip() == "2"  # a filter
    host_bounding = int(Path("/proc/self/status").read_text().split("CapBnd:\t")[1][:16], 16)
    assert int(status["CapBnd"], 16) == DOCKER_MASK & host_bounding
    assert int(status["CapEff"], 16) & (1 << 21) == 0  # CAP_SYS_ADMIN
    assert int(status["CapEff"], 16) & (1 << 19) == 0  # CAP_SYS_PTRACE


def test_kubernetes_restricted_drops_every_capability() -> None:
    done = standin("cat", "/proc/self/status", caps="none")
    assert "CapEff:\t0000000000000000" in done.stdout, done.stdout


def test_the_commands_exit_code_passes_through_and_a_missing_one_is_127() -> None:
    assert standin("sh", "-c", "exit 7").returncode == 7
    missing = standin("/no/such/program")
    assert missing.returncode == 127
    assert "cannot run '/no/such/program'" in missing.stderr
