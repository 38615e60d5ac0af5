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
* sockets: ``socket`` of every family but, for a tool with network permissions, ``AF_INET`` and
  ``AF_INET6`` of type ``SOCK_STREAM`` (a tool without them may make no socket at all, not even
  ``AF_UNIX``; ``socketpair`` stays allowed for pipes between its own processes).
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
)
#: Every ``CLONE_NEW*`` flag (``CLONE_NEWTIME`` is only for ``clone3`` and ``unshare``).
_CLONE_NEW = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#: Socket families the filter enumerates (``AF_MAX`` is 46 in Linux 6.x; above: refused whole).
_FAMILIES = 64
#: Socket types other than ``SOCK_STREAM`` (the low four bits of ``type``).
_OTHER_TYPES = tuple(t for t in range(16) if t != socket.SOCK_STREAM)
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
    for flag in _CLONE_NEW:
        rules.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    # personality(): no other persona, none of the flags that weaken the address space (a
    # query, 0xffffffff, has them all set and is refused too: nothing a tool needs).
    for persona in range(1, 64):
        rules.add_rule(deny, "personality", sc.Arg(0, sc.EQ, persona))
    for flag in _PERSONA_FLAGS:
        rules.add_rule(deny, "personality", sc.Arg(0, sc.MASKED_EQ, flag, flag))
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
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        program: bytes = out.read()
    return program
