"""Run a command as a container would run it: under the seccomp rules of Docker's default profile
(and Kubernetes' ``RuntimeDefault``) for a process without ``CAP_SYS_ADMIN``, with Docker's
default capability set and ``no_new_privs``.

Usage::

    python tests/container_standin/launch.py [--caps docker|none|keep] [--user UID[:GID]] \
        -- toolgate serve ...

The filter is a deny list over an ALLOW default: it reproduces the outcome of the profile's
allow list (default action ``EPERM``) for every system call that decides whether a sandbox can
start or a tool can escape, not the whole list (README.md in this folder names each rule and
where it comes from). It applies to the native architecture and to the 32-bit ones the profile
also covers on x86-64 (x86, x32), so ``int 0x80`` is no way round it.

Exit codes: the command's own once it runs; 125 when the stand-in cannot be set up (like
``docker run``), 127 when the command cannot be run.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import os
import platform
import sys
from collections.abc import Iterable

import pyseccomp as seccomp

#: The namespace flags of clone(2) that the profile allows only with CAP_SYS_ADMIN (its
#: ``clone`` rule: allowed when ``flags & mask == 0``, refused with the default EPERM otherwise).
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (
    CLONE_NEWNS,
    CLONE_NEWCGROUP,
    CLONE_NEWUTS,
    CLONE_NEWIPC,
    CLONE_NEWUSER,
    CLONE_NEWPID,
    CLONE_NEWNET,
)

#: System calls the profile allows only with CAP_SYS_ADMIN (its "CAP_SYS_ADMIN" include group;
#: ``clone`` and ``clone3`` are handled on their own).
NEEDS_SYS_ADMIN = (
    "bpf",
    "fanotify_init",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "lookup_dcookie",
    "mount",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "perf_event_open",
    "quotactl",
    "quotactl_fd",
    "setdomainname",
    "sethostname",
    "setns",
    "syslog",
    "umount",
    "umount2",
    "unshare",
)

#: System calls the profile allows only with a capability Docker does not give a container by
#: default (CAP_SYS_BOOT, CAP_SYS_MODULE, CAP_SYS_PACCT, CAP_SYS_PTRACE for these three,
#: CAP_SYS_RAWIO, CAP_SYS_TIME, CAP_SYS_TTY_CONFIG, CAP_SYS_NICE, CAP_DAC_READ_SEARCH).
NEEDS_OTHER_CAPABILITY = (
    "reboot",
    "init_module",
    "finit_module",
    "delete_module",
    "acct",
    "kcmp",
    "pidfd_getfd",
    "process_madvise",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "vhangup",
    "get_mempolicy",
    "mbind",
    "set_mempolicy",
    "set_mempolicy_home_node",
    "open_by_handle_at",
)

#: System calls outside the profile's allow list altogether (its default action, EPERM).
NOT_ALLOWED = (
    "pivot_root",
    "keyctl",
    "add_key",
    "request_key",
    "kexec_load",
    "kexec_file_load",
    "swapon",
    "swapoff",
    "userfaultfd",
    "uselib",
    "_sysctl",
    "nfsservctl",
    "move_pages",
    "migrate_pages",
)

#: Docker's default capabilities of a container process (moby ``oci/caps/defaults.go``).
DOCKER_CAPABILITIES = {
    0: "CAP_CHOWN",
    1: "CAP_DAC_OVERRIDE",
    3: "CAP_FOWNER",
    4: "CAP_FSETID",
    5: "CAP_KILL",
    6: "CAP_SETGID",
    7: "CAP_SETUID",
    8: "CAP_SETPCAP",
    10: "CAP_NET_BIND_SERVICE",
    13: "CAP_NET_RAW",
    18: "CAP_SYS_CHROOT",
    27: "CAP_MKNOD",
    29: "CAP_AUDIT_WRITE",
    31: "CAP_SETFCAP",
}

AF_VSOCK = 40
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAPBSET_READ = 23

#: Extra architectures the profile covers on each native one (its ``archMap``).
SUB_ARCHES = {"x86_64": ("X86", "X32"), "aarch64": ("ARM",)}


def _deny(
    rules: seccomp.SyscallFilter, action: int, names: Iterable[str], *args: seccomp.Arg
) -> list[str]:
    """Add ``action`` for each name the running libseccomp knows; return the unknown ones."""
    unknown = []
    for name in names:
        try:
            rules.add_rule(action, name, *args)
        except (ValueError, RuntimeError, OSError):
            # A system call this libseccomp (or this architecture) does not know cannot be
            # called by its name here either; the profile's EPERM default covers it there.
            unknown.append(name)
    return unknown


def build_filter() -> tuple[seccomp.SyscallFilter, list[str]]:
    """The stand-in's filter (not yet loaded) and the names libseccomp did not know."""
    rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for arch in SUB_ARCHES.get(platform.machine(), ()):
        # A libseccomp without that architecture: the kernel's compat layer is then unused.
        with contextlib.suppress(AttributeError, ValueError, RuntimeError, OSError):
            rules.add_arch(getattr(seccomp.Arch, arch))
    # libseccomp sets no_new_privs when it loads the filter (CTL_NNP); say so, not rely on it.
    rules.set_attr(seccomp.Attr.CTL_NNP, 1)
    eperm = seccomp.ERRNO(errno.EPERM)
    unknown = _deny(rules, eperm, NEEDS_SYS_ADMIN)
    unknown += _deny(rules, eperm, NEEDS_OTHER_CAPABILITY)
    unknown += _deny(rules, eperm, NOT_ALLOWED)
    # clone with any namespace flag: one rule per flag ((flags & flag) == flag), since
    # libseccomp has no "masked not equal"; together they refuse what the profile's
    # ``flags & mask == 0`` allow rule does not allow.
    for flag in NAMESPACE_FLAGS:
        rules.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory, which seccomp cannot read: the profile answers ENOSYS
    # so that glibc falls back to clone, whose flags it can check.
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(eperm, "socket", seccomp.Arg(0, seccomp.EQ, AF_VSOCK))
    return rules, unknown


def drop_capabilities(keep: set[int]) -> None:
    """Drop every capability but ``keep`` from the bounding set: after ``execve`` even root then
    has only those (as in a container started without ``--cap-add``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as handle:
        last = int(handle.read())
    for cap in range(last + 1):
        if cap in keep or libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1:
            continue
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot drop capability {cap}: {os.strerror(code)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--caps",
        choices=("docker", "none", "keep"),
        default="docker",
        help="capabilities left: Docker's default set (default), none (Kubernetes' "
        "restricted profile drops ALL) or the caller's",
    )
    parser.add_argument(
        "--user",
        metavar="UID[:GID]",
        help="run the command as this user (a pod's runAsUser/runAsGroup; no extra groups); "
        "a non-root user keeps no capabilities",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the command to run after --")
    try:
        if options.caps != "keep":
            # The bounding set only: the capabilities in effect now still change the user.
            drop_capabilities(set(DOCKER_CAPABILITIES) if options.caps == "docker" else set())
        if options.user:
            uid, _, gid = options.user.partition(":")
            os.setgroups([])
            os.setgid(int(gid or uid))
            os.setuid(int(uid))  # a non-root user: no capabilities left at all
        rules, _unknown = build_filter()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        rules.load()
    except OSError as exc:
        print(f"container stand-in: cannot set up: {exc}", file=sys.stderr)
        return 125
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"container stand-in: cannot run {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main())
