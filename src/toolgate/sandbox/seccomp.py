"""The seccomp filter of the Landlock layer, compiled once per gateway with libseccomp.

The filter is built here, in the gateway, with ``pyseccomp`` (a ``ctypes`` binding of the
system's ``libseccomp.so.2``), exported as a classic BPF program and handed to the launcher
(:mod:`toolgate.sandbox.landlock_exec`) as hex text, which loads it with one ``prctl``: the
launcher imports nothing but ``ctypes``, and libseccomp does the per-architecture work (syscall
numbers, the x32 ABI, the architecture check) that a hand-written filter gets wrong.

Default: allow. Refused with ``EPERM`` (what container runtimes and Codex's Linux sandbox
refuse, plus what keeps the process group whole):

* debugging and other processes' memory: ``ptrace``, ``process_vm_readv``/``writev``,
  ``kcmp``, ``pidfd_getfd``;
* ``clone`` with ``CLONE_PARENT``: the new process would be the gateway's child, which never
  waits for it (under bubblewrap the sandbox's init is that parent): a zombie of a long-running
  gateway per call, each holding a pid;
* namespaces and mounts: ``unshare``, ``setns``, ``clone`` with any ``CLONE_NEW*`` flag, ``mount``,
  ``umount2``, ``pivot_root``, ``chroot``, ``open_tree``, ``move_mount``, ``fsopen``, ``fsmount``,
  ``fsconfig``, ``fspick``, ``mount_setattr``; ``clone3`` answers ``ENOSYS`` (its flags are in
  memory a filter cannot read; C libraries then fall back to ``clone``);
* the kernel: ``bpf``, ``perf_event_open``, ``userfaultfd``, ``keyctl``, ``add_key``,
  ``request_key``, ``init_module``, ``finit_module``, ``delete_module``, ``kexec_load``,
  ``kexec_file_load``, ``reboot``, ``swapon``, ``swapoff``, ``acct``, ``quotactl``,
  ``lookup_dcookie``, ``personality`` (another persona, or a flag that weakens the address
  space), ``io_uring_setup``,
  ``io_uring_enter``, ``io_uring_register`` (io_uring does its work outside seccomp's view),
  ``name_to_handle_at``/``open_by_handle_at``;
* leaving the process group: ``setsid``, ``setpgid`` (the launcher set them first);
* System V IPC (``shmget``, ``semget``, ``msgget`` and the calls on their objects): its objects
  outlive the call (bubblewrap's IPC namespace dies with it; here there is none), so a tool
  could leave memory behind, or attach the gateway user's segments by their guessable ids;
* other processes' limits and scheduling, which Landlock does not scope (only signals and
  ``ptrace``): ``prlimit64`` that sets a limit of another process (a tool could set the
  gateway's ``RLIMIT_CPU`` or ``RLIMIT_NOFILE`` and stop it), and ``setpriority``,
  ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr`` and ``ioprio_set`` on any
  process but the caller (``SCHED_IDLE`` or nice 19 would starve a gateway that is not root);
* metadata Landlock does not rule (it rules opening, writing, making and removing files, not
  their modes or attributes): extended attributes cannot be set or removed (``setxattr`` and its
  variants answer ``EOPNOTSUPP``, as on a file system without them), and no ``chmod`` variant may
  set the setuid, setgid or sticky bit or make a file writable by its group or others (a tool
  of a root gateway would otherwise make ``/usr/bin/python3`` setuid root for every local user,
  or any file it cannot open world-writable). Other mode changes, owners' groups and times of
  files the gateway's user owns stay possible everywhere (a limit of the layer);
* sockets: ``socket`` of every family but, for a tool with network permissions, ``AF_INET`` and
  ``AF_INET6`` of type ``SOCK_STREAM`` and protocol TCP (a tool without them may make no socket
  at all, not even ``AF_UNIX``; ``socketpair`` stays allowed for pipes between its own
  processes, of type ``SOCK_STREAM`` or ``SOCK_SEQPACKET`` only: a datagram pair, and
  ``SOCK_RAW``, which ``AF_UNIX`` makes a datagram socket, can be re-addressed with
  ``sendto``/``connect`` to any pathname datagram socket of the host (syslog's ``/dev/log``,
  journald, systemd's notify socket), which Landlock does not rule). Landlock's port rule
  covers TCP only, and two ways reach a port without the ``connect`` it checks, so a tool with
  network permissions may also not make an MPTCP socket (``IPPROTO_MPTCP``: Landlock does not
  rule it), send with ``MSG_FASTOPEN`` (TCP Fast Open connects inside ``sendto``/``sendmsg``;
  answered ``EOPNOTSUPP``, as when the host turns Fast Open off, so clients fall back to
  ``connect``) or ``listen`` (on an unbound socket it binds a port of every address without
  the ``bind`` Landlock checks).
"""

from __future__ import annotations

import errno
import functools
import socket
import tempfile
import threading
from typing import Any

__all__ = ["SeccompUnavailableError", "filter_bpf"]

_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsmount",
    "fsconfig",
    "fspick",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "keyctl",
    "add_key",
    "request_key",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "name_to_handle_at",
    "open_by_handle_at",
    "setsid",
    "setpgid",
    "shmget",
    "shmat",
    "shmctl",
    "shmdt",
    "semget",
    "semop",
    "semtimedop",
    "semctl",
    "msgget",
    "msgsnd",
    "msgrcv",
    "msgctl",
)
#: The calls that set or remove an extended attribute (by path, by descriptor, and the
#: ``*xattrat`` calls of Linux 6.13, by number: the same on every architecture, unknown to
#: older libseccomp).
_XATTR_WRITES: tuple[str | int, ...] = (
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    463,  # setxattrat
    466,  # removexattrat
)
#: The ``chmod`` calls, by the index of their mode argument.
_CHMODS = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}
#: Mode bits no ``chmod`` may set: setuid, setgid, sticky, group-write, other-write.
_REFUSED_MODE_BITS = (0o4000, 0o2000, 0o1000, 0o020, 0o002)
#: Every ``CLONE_NEW*`` flag (``CLONE_NEWTIME`` is only for ``clone3`` and ``unshare``).
_CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_CLONE_PARENT = 0x00008000
#: Socket families the filter enumerates (``AF_MAX`` is 46 in Linux 6.x; above: refused whole).
_FAMILIES = 64
#: Socket types other than ``SOCK_STREAM`` (the low four bits of ``type``).
_OTHER_TYPES = tuple(t for t in range(16) if t != socket.SOCK_STREAM)
#: The protocols a TCP socket may name: 0 (the default) and ``IPPROTO_TCP``; below 7, the others
#: are refused one by one, from 7 on as a range (``IPPROTO_MPTCP`` is 262).
_TCP_PROTOCOLS = (0, socket.IPPROTO_TCP)
#: ``MSG_FASTOPEN``: ``sendto``/``sendmsg`` connect as they send (the flags argument's index).
_MSG_FASTOPEN = 0x20000000
_SEND_FLAGS = {"sendto": 3, "sendmsg": 2, "sendmmsg": 3}
#: The ``socketpair`` types that stay connected to each other for good.
_PAIR_TYPES = (socket.SOCK_STREAM, socket.SOCK_SEQPACKET)
#: ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, ADDR_LIMIT_32BIT.
_PERSONA_FLAGS = (0x0040000, 0x0100000, 0x0200000, 0x0400000, 0x0800000)

_LOCK = threading.Lock()


class SeccompUnavailableError(RuntimeError):
    """libseccomp (or its binding) is missing or refused to build the filter."""


def _library() -> Any:
    try:
        import pyseccomp  # type: ignore[import-untyped]  # optional: the Landlock layer only
    except (ImportError, OSError, RuntimeError) as exc:
        raise SeccompUnavailableError(
            f"the seccomp binding is not available ({exc}): install toolgate's 'landlock' extra "
            "(pip install 'toolgate[landlock]') and the system's libseccomp "
            "(Debian/Ubuntu: libseccomp2)"
        ) from None
    return pyseccomp


@functools.cache
def filter_bpf(network: bool) -> bytes:
    """The classic BPF program of the filter (see the module documentation) for a tool with
    (``network``) or without network permissions. Raises :class:`SeccompUnavailableError`."""
    sc = _library()
    with _LOCK:
        try:
            return _build(sc, network)
        except OSError as exc:
            raise SeccompUnavailableError(f"libseccomp refused the filter: {exc}") from None


def _build(sc: Any, network: bool) -> bytes:
    deny = sc.ERRNO(errno.EPERM)
    rules = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED:
        rules.add_rule(deny, name)
    # Limits and scheduling: the caller only (0), or, for prlimit64, reading another's.
    rules.add_rule(deny, "prlimit64", sc.Arg(0, sc.NE, 0), sc.Arg(2, sc.NE, 0))
    for name in ("sched_setscheduler", "sched_setparam", "sched_setattr"):
        rules.add_rule(deny, name, sc.Arg(0, sc.NE, 0))
    rules.add_rule(deny, "setpriority", sc.Arg(0, sc.NE, 0))  # PRIO_PGRP, PRIO_USER
    rules.add_rule(deny, "setpriority", sc.Arg(1, sc.NE, 0))
    rules.add_rule(deny, "ioprio_set", sc.Arg(0, sc.NE, 1))  # IOPRIO_WHO_PROCESS only
    rules.add_rule(deny, "ioprio_set", sc.Arg(1, sc.NE, 0))
    for call in _XATTR_WRITES:
        rules.add_rule(sc.ERRNO(errno.EOPNOTSUPP), call)
    for name, index in _CHMODS.items():
        for bit in _REFUSED_MODE_BITS:
            rules.add_rule(deny, name, sc.Arg(index, sc.MASKED_EQ, bit, bit))
    for flag in (*_CLONE_NEW, _CLONE_PARENT):
        rules.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    # personality(): no other persona, none of the flags that weaken the address space (a
    # query, 0xffffffff, has them all set and is refused too: nothing a tool needs).
    for persona in range(1, 64):
        rules.add_rule(deny, "personality", sc.Arg(0, sc.EQ, persona))
    for flag in _PERSONA_FLAGS:
        rules.add_rule(deny, "personality", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for kind in range(16):
        if kind not in _PAIR_TYPES:
            rules.add_rule(
                sc.ERRNO(errno.EPROTONOSUPPORT), "socketpair", sc.Arg(1, sc.MASKED_EQ, 0xF, kind)
            )
    allowed = (socket.AF_INET, socket.AF_INET6) if network else ()
    refuse_socket = sc.ERRNO(errno.EAFNOSUPPORT)
    for family in range(_FAMILIES):
        if family not in allowed:
            rules.add_rule(refuse_socket, "socket", sc.Arg(0, sc.EQ, family))
    rules.add_rule(refuse_socket, "socket", sc.Arg(0, sc.GE, _FAMILIES))
    for family in allowed:
        for kind in _OTHER_TYPES:
            rules.add_rule(
                sc.ERRNO(errno.EPROTONOSUPPORT),
                "socket",
                sc.Arg(0, sc.EQ, family),
                sc.Arg(1, sc.MASKED_EQ, 0xF, kind),
            )
        # TCP only: Landlock's port rule does not apply to MPTCP (nor any other protocol).
        for protocol in range(1, socket.IPPROTO_TCP + 1):
            if protocol not in _TCP_PROTOCOLS:
                rules.add_rule(
                    sc.ERRNO(errno.EPROTONOSUPPORT),
                    "socket",
                    sc.Arg(0, sc.EQ, family),
                    sc.Arg(2, sc.EQ, protocol),
                )
        rules.add_rule(
            sc.ERRNO(errno.EPROTONOSUPPORT),
            "socket",
            sc.Arg(0, sc.EQ, family),
            sc.Arg(2, sc.GT, socket.IPPROTO_TCP),
        )
    if network:
        # Connecting without connect() (TCP Fast Open) and a port bound without bind() (listen
        # on an unbound socket): neither meets Landlock's TCP rules.
        for name, index in _SEND_FLAGS.items():
            rules.add_rule(
                sc.ERRNO(errno.EOPNOTSUPP),
                name,
                sc.Arg(index, sc.MASKED_EQ, _MSG_FASTOPEN, _MSG_FASTOPEN),
            )
        rules.add_rule(deny, "listen")
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        program: bytes = out.read()
    return program
