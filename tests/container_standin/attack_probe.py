"""The attacker's tool for the container attack suite: one attack per call, its outcome as JSON.

Input (stdin): {"op": ..., ...}. Output: {"ok": bool, "value"|"why": ..., "errno": int|null}.
Every attack reports what happened instead of crashing, so a test tells "denied" (ok false, with
the errno) from "the tool broke" (no JSON at all).
"""

import contextlib
import ctypes
import json
import os
import socket
import sys
import time
import urllib.request

args = json.load(sys.stdin)
op = args.get("op")
libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
PTRACE_ATTACH = 16
PTRACE_DETACH = 17
SYS_PROCESS_VM_READV = 310  # x86-64


def attempt(func):
    try:
        return {"ok": True, "value": func()}
    except OSError as exc:
        return {"ok": False, "why": f"{type(exc).__name__}: {exc}", "errno": exc.errno}
    except Exception as exc:  # noqa: BLE001 - report, never crash
        return {"ok": False, "why": f"{type(exc).__name__}: {exc}", "errno": None}


def checked(result):
    """Raise the call's errno as OSError when a libc call returned -1."""
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def read(path):
    with open(path, "rb") as handle:
        return handle.read(4096).decode("utf-8", "replace")


def write(path):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("written by the attacker")
    return path


def connect(host, port):
    with socket.create_connection((host, port), timeout=3):
        return "connected"


def connect_unix(path):
    # A name starting with "@" is an abstract socket (no file: only Landlock's scope stops it).
    address = "\0" + path[1:] if path.startswith("@") else path
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(3)
        sock.connect(address)
        return "connected"


def send_udp(host, port):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        return sock.sendto(b"exfiltrated by the attacker", (host, port))


def fetch(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def ptrace(pid):
    checked(libc.ptrace(PTRACE_ATTACH, pid, None, None))
    libc.ptrace(PTRACE_DETACH, pid, None, None)
    return "attached"


class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def vm_read(pid):
    # Any address: a refusal says EPERM/ESRCH, a permitted read of a bad address says EFAULT.
    buffer = ctypes.create_string_buffer(64)
    local = IoVec(ctypes.cast(buffer, ctypes.c_void_p), 64)
    remote = IoVec(0x400000, 64)
    libc.syscall.restype = ctypes.c_long
    got = libc.syscall(
        SYS_PROCESS_VM_READV, pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0
    )
    return f"read {checked(got)} bytes"


def unshare(flags):
    checked(libc.unshare(flags))
    return "unshared"


def mount():
    checked(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
    return "mounted"


def fork_bomb():
    children = 0
    for _ in range(100000):
        try:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            children += 1
        except OSError as exc:
            return f"stopped after {children} children: {exc}"
    return f"forked {children}"


def children(count):
    # What any ordinary tool does: start a few processes and wait for them.
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    return len(pids)


def daemon():
    # The classic escape from a call: fork, setsid (if allowed), fork again, outlive the call.
    if os.fork() == 0:
        with contextlib.suppress(OSError):
            os.setsid()
        if os.fork() == 0:
            time.sleep(60)
        os._exit(0)
    return "detached"


if op == "read":
    result = attempt(lambda: read(args["path"]))
elif op == "write":
    result = attempt(lambda: write(args["path"]))
elif op == "write_tmp":  # the tool's own temporary folder, wherever the layer puts it
    import tempfile

    result = attempt(lambda: write(os.path.join(tempfile.gettempdir(), args["name"])))
elif op == "listdir":
    result = attempt(lambda: sorted(os.listdir(args["path"])))
elif op == "env":
    result = {"ok": True, "value": dict(os.environ)}
elif op == "connect":
    result = attempt(lambda: connect(args["host"], args["port"]))
elif op == "unix":
    result = attempt(lambda: connect_unix(args["path"]))
elif op == "udp":
    result = attempt(lambda: send_udp(args["host"], args["port"]))
elif op == "http":
    result = attempt(lambda: fetch(args["url"]))
elif op == "kill":
    result = attempt(lambda: os.kill(args["pid"], args.get("signal", 15)))
elif op == "ptrace":
    result = attempt(lambda: ptrace(args["pid"]))
elif op == "vm_read":
    result = attempt(lambda: vm_read(args["pid"]))
elif op == "unshare_user":
    result = attempt(lambda: unshare(CLONE_NEWUSER))
elif op == "unshare_mount":
    result = attempt(lambda: unshare(CLONE_NEWNS))
elif op == "mount":
    result = attempt(mount)
elif op == "children":
    result = attempt(lambda: children(args["count"]))
elif op == "daemon":
    result = attempt(daemon)
elif op == "fork_bomb":
    result = attempt(fork_bomb)
else:
    result = {"ok": True, "value": "hello"}
print(json.dumps(result))
