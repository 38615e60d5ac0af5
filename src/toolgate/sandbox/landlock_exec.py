"""The launcher of the Landlock layer: supervise the call, confine a child, make it the tool.

This file is a standalone program (standard library and ``ctypes`` only, no toolgate imports):
the gateway starts it as ``python -I -S <this file> <options> -- <command> [args...]``
(:func:`toolgate.sandbox.landlock.landlock_argv`), with the descriptors of the folders the call
may see inherited (``pass_fds``).

The launcher stays, unconfined, as the call's **supervisor** (the part of a PID namespace's
init that the Landlock layer has no namespace for): it leads the call's session, is the child
subreaper of everything the tool starts, and reaps it; when the tool's first process ends it
kills the tool's process group (nothing the tool started outlives it) and exits as that process
did (its exit code, or its signal); when the gateway dies (``PR_SET_PDEATHSIG`` → ``SIGTERM``)
it kills the group, reaps it and removes the call's ``--scratch`` folder (``SIGTERM`` is held
from the fork until the group exists, which parent and child both make, as a shell does). The
tool cannot signal or trace it (Landlock's signal scope and ptrace rule, seccomp). The
gateway's timeout kills the supervisor's whole tree as before.

Its child, before it executes the command, in this order:

1. makes a process group of its own (``setpgid``), which the supervisor kills: the seccomp filter
   refuses ``setsid``/``setpgid`` afterwards, so no process of the tool can leave it;
2. asks the kernel to kill it when the supervisor dies (``PR_SET_PDEATHSIG``);
3. sets the rlimits (``--limits cpu,as,fsize[,nproc]``; soft = hard; core dumps off);
4. builds a Landlock ruleset that handles every filesystem right of the kernel's ABI, TCP bind
   and connect (ABI 4) and the abstract-socket and signal scopes (ABI 6), grants each inherited
   descriptor its rights (``--read FD``, ``--exec FD``, ``--write FD``, ``--dev FD``) and TCP
   connect to the ``--connect PORT`` ports only, then sets ``no_new_privs`` and restricts itself;
5. drops every capability (bounding, ambient, effective, permitted and inheritable sets), as
   bubblewrap's ``--cap-drop ALL``: started by a root gateway, the tool would otherwise keep
   ``CAP_SYS_ADMIN``, ``CAP_SYS_TIME``, ``CAP_SYS_NICE``... (Landlock and seccomp leave
   ``sethostname``, ``settimeofday``, realtime scheduling, ``fanotify`` open to them); with
   ``no_new_privs`` an ``execve`` as uid 0 cannot get them back;
6. closes every descriptor but 0, 1 and 2 (the held folders, the ruleset);
7. loads the seccomp filter given as ``--bpf HEX`` (a classic BPF program compiled by the gateway
   with libseccomp: :func:`toolgate.sandbox.seccomp.filter_bpf`);
8. executes the command with the environment it was given (the sandbox's, made by the gateway).

The descriptors were opened and checked by the gateway (``O_PATH``): a rule is added to what the
descriptor points to, never to a name resolved again. Any failure exits with 126 and a line on
standard error that starts with ``toolgate landlock:``; the command never runs unconfined.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # no typing import at run time: the launcher starts with every call
    from collections.abc import Sequence
    from typing import NoReturn

__all__ = ["abi_version", "main"]

# Landlock's system calls: the same numbers on every architecture (they came after the
# unification of the syscall tables).
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

# Filesystem rights (linux/landlock.h), by ABI.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

#: The rights that apply to a file (not a folder); a rule on a file may hold only these.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_READ_FILE | FS_READ_DIR
EXEC = READ | FS_EXECUTE
#: A writable folder: everything but device nodes (and ioctls on devices).
WRITE = (
    EXEC
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_SOCK
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
)
#: /dev/null and co: read and write, no ioctl.
DEV = FS_READ_FILE | FS_WRITE_FILE

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_PR_CAPBSET_READ = 23
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_SETPCAP = 8
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in linux/landlock.h
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class LauncherError(Exception):
    """A step failed: the command must not run."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise LauncherError(f"{what}: {os.strerror(err)} (errno {err})")
    return result


def abi_version(libc: ctypes.CDLL | None = None) -> int:
    """The Landlock ABI of the running kernel (0: no Landlock, or disabled at boot)."""
    libc = libc or _libc()
    libc.syscall.restype = ctypes.c_long
    found = int(libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION))
    return max(found, 0)


def _handled_fs(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def _restrict(libc: ctypes.CDLL, rules: Sequence[tuple[int, int]], ports: Sequence[int]) -> None:
    """Build the ruleset of ``rules`` ((descriptor, rights)) and ``ports``, and enforce it."""
    abi = abi_version(libc)
    if abi < 6:
        raise LauncherError(f"the kernel's Landlock ABI is {abi}; this layer needs 6 or later")
    handled = _handled_fs(abi)
    attr = _RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP, SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL)
    ruleset = _check(
        libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0),
        "landlock_create_ruleset",
    )
    import stat  # only here: a C module, cheap to import

    for fd, rights in rules:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        beneath = _PathBeneath(rights & handled, fd)
        _check(
            libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(beneath), 0),
            f"landlock_add_rule (descriptor {fd})",
        )
    for port in ports:
        net = _NetPort(NET_CONNECT_TCP, port)
        _check(
            libc.syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(net), 0),
            f"landlock_add_rule (TCP port {port})",
        )
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    _check(libc.syscall(_RESTRICT_SELF, ruleset, 0), "landlock_restrict_self")
    os.close(ruleset)


def _capabilities(libc: ctypes.CDLL) -> tuple[int, int, int]:
    """This process's (effective, permitted, inheritable) capability sets."""
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capget(ctypes.byref(header), data), "capget")
    return (
        data[0].effective | data[1].effective << 32,
        data[0].permitted | data[1].permitted << 32,
        data[0].inheritable | data[1].inheritable << 32,
    )


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty every capability set (bubblewrap's ``--cap-drop ALL``); raises
    :class:`LauncherError` when one is left."""
    if _capabilities(libc)[1] >> _CAP_SETPCAP & 1:  # only CAP_SETPCAP may shrink the bounding set
        for cap in range(64):
            held = libc.prctl(_PR_CAPBSET_READ, cap, 0, 0, 0)
            if held < 0:
                break  # EINVAL: past the kernel's last capability
            if held:
                _check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"prctl(PR_CAPBSET_DROP, {cap})")
    _check(
        libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0),
        "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
    )
    header, data = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")
    if any(_capabilities(libc)):
        raise LauncherError("capabilities are still held after dropping them all")


def _load_seccomp(libc: ctypes.CDLL, program: bytes) -> None:
    if not program or len(program) % 8:
        raise LauncherError("the seccomp filter is empty or not whole BPF instructions")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    _check(
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0),
        "prctl(PR_SET_SECCOMP)",
    )


def _set_limits(words: str) -> None:
    import resource

    figures = [int(word) for word in words.split(",")]
    names = [resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC]
    for name, figure in zip(names, figures, strict=False):
        resource.setrlimit(name, (figure, figure))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _parse(argv: Sequence[str]) -> tuple[dict[str, list[str]], list[str]]:
    options: dict[str, list[str]] = {}
    index = 0
    while index < len(argv) and argv[index] != "--":
        name = argv[index]
        if not name.startswith("--") or index + 1 >= len(argv):
            raise LauncherError(f"unexpected argument {name!r}")
        options.setdefault(name[2:], []).append(argv[index + 1])
        index += 2
    command = list(argv[index + 1 :])
    if not command:
        raise LauncherError("no command to run after '--'")
    return options, command


def main(argv: Sequence[str]) -> None:
    """Supervise the call ``argv`` describes (see the module documentation); never returns."""
    try:
        options, command = _parse(argv)
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        if os.getsid(0) != os.getpid():  # the runner starts it as a session leader already
            os.setsid()
        gateway = os.getppid()
        _check(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(PR_SET_CHILD_SUBREAPER)")
        signal.signal(signal.SIGTERM, _gateway_gone)
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != gateway:  # it died before the death signal was asked for
            raise LauncherError("the gateway is gone")
        # SIGTERM waits until the child has a process group to kill: a SIGTERM handled before
        # that would kill no group (killpg: no such group) and the tool would run on.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        supervisor = os.getpid()
        tool = os.fork()
    except (LauncherError, OSError, ValueError) as exc:
        _fail(exc)
    if tool == 0:
        _become_tool(libc, options, command, supervisor)
    _supervise(tool, options.get("scratch", [""])[-1])


def _fail(exc: BaseException) -> NoReturn:
    sys.stderr.write(f"toolgate landlock: {exc}\n")
    sys.stderr.flush()
    os._exit(126)


def _become_tool(
    libc: ctypes.CDLL, options: dict[str, list[str]], command: list[str], supervisor: int
) -> NoReturn:
    """In the supervisor's child: confine this process and execute the command."""
    try:
        # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec:
        # the tool starts with the defaults, as under bubblewrap (subprocess's restore_signals).
        for signum in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # the mask outlives exec
        os.setpgid(0, 0)
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != supervisor:  # it died before the death signal was asked for
            raise LauncherError("the supervisor is gone")
        for words in options.get("limits", []):
            _set_limits(words)
        rights = {"read": READ, "exec": EXEC, "write": WRITE, "dev": DEV}
        rules = [
            (int(fd), access) for kind, access in rights.items() for fd in options.get(kind, [])
        ]
        ports = [int(port) for port in options.get("connect", [])]
        _restrict(libc, rules, ports)
        _drop_capabilities(libc)
        os.closerange(3, 1 << 20)
        bpf = options.get("bpf", [""])[-1]
        _load_seccomp(libc, bytes.fromhex(bpf))
        os.execvp(command[0], command)
    except (LauncherError, OSError, ValueError) as exc:
        _fail(exc)
    raise AssertionError("unreachable")  # execvp returned without raising


#: Set by ``SIGTERM``: the gateway died (or stops the call): kill the tool's group and go.
_gone: list[int] = []
_tool_group: list[int] = []


def _gateway_gone(_signum: int, _frame: object) -> None:
    _gone.append(1)
    if _tool_group:
        _kill_group(_tool_group[0])


def _kill_group(group: int) -> None:
    try:  # noqa: SIM105 - no contextlib import here: the launcher starts with every call
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _supervise(tool: int, scratch: str) -> NoReturn:
    """Reap everything the tool starts; exit as its first process did."""
    try:  # noqa: SIM105 - as a shell does: whichever of parent and child runs first makes it
        os.setpgid(tool, tool)
    except OSError:
        pass  # the child failed already (it exits 126) or made the group itself
    _tool_group.append(tool)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.closerange(3, 1 << 20)  # the held folders are the tool's, not the supervisor's
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the call's input is the tool's
    os.close(null)
    if _gone:
        _kill_group(tool)
    status = 0
    while True:
        try:
            pid, code = os.waitpid(-1, 0)
        except ChildProcessError:
            break  # nothing of the call is left
        if pid == tool:
            status = code
            _kill_group(tool)  # what it started dies with it, as in a PID namespace
    if _gone and scratch:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    if os.WIFSIGNALED(status):
        import resource

        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # SIGKILL (the CPU limit's, the OOM killer's) has no handler to reset: signal() refuses.
        if signum != signal.SIGKILL:
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 126)


if __name__ == "__main__":
    main(sys.argv[1:])
