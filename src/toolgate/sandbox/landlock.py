"""The Landlock layer: a sandbox for hosts where bubblewrap cannot start (containers).

Docker's default seccomp profile and Kubernetes' ``RuntimeDefault`` refuse unprivileged user
namespaces, so bubblewrap cannot build its sandbox there. This layer needs none: the tool runs
in the gateway's own namespaces, confined by the kernel's Landlock LSM (what it may open, which
TCP ports it may connect to, which processes it may signal) and a seccomp filter (which system
calls it may make), set up by a small launcher (:mod:`toolgate.sandbox.landlock_exec`) that
then executes the tool. :func:`landlock_argv` is the command line, like
:func:`~toolgate.sandbox.bwrap.bwrap_argv`: backends run it unchanged.

What the tool may open (every other path is refused, ``/proc`` and ``/sys`` included):

=========================  ======================================================================
what                       rights
=========================  ======================================================================
system folders             ``/usr``, ``/bin``, ``/sbin``, ``/lib*`` and the few ``/etc`` files
                           bubblewrap binds (:data:`~toolgate.sandbox.bwrap.ETC_BASE`; the CA
                           certificates with a network permission): read and execute
code and runtime folders   the tool's folder, the runtime's installation root,
                           ``sandbox.system_paths``: read and execute
``fs`` prefixes            read only
workspace                  read, or read and write when the tool's side-effect level writes
scratch folder             a fresh folder of the call (``TMPDIR`` and ``HOME`` are in it),
                           removed when the call ends: read and write
``/dev/null`` and co.      read and write
=========================  ======================================================================

Every folder is opened by the gateway (``O_PATH``), checked as what the descriptor points to,
and the rule is added to the descriptor (the held-descriptor model of bubblewrap's binds); the
launcher never resolves a name. Landlock cannot hide a file inside a granted folder, so a
granted folder that holds one of the gateway's protected paths is refused (bubblewrap covers it).

Network: a tool without network permissions may make no socket but ``socketpair`` (seccomp) and
connect to no TCP port (Landlock). A tool with them may make TCP sockets and connect to the
port of its call's egress proxy only, which listens on ``127.0.0.1`` and keeps its host and
address checks. Landlock filters TCP by port, not by address: an address that listens on that
same port (another host, a metadata service on an odd port) would be reachable too, so the
network permission counts as *not enforced* by this layer (:data:`ENFORCEMENT`).

:func:`probe_landlock` says whether the layer works here (Landlock ABI 6 or later, the seccomp
filter builds, and a launched process is really confined).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import landlock_exec
from .bwrap import ETC_BASE, ETC_NETWORK, SYSTEM_ROOTS, HeldPaths
from .cgroups import PidsHierarchy, probe_pids_cgroup
from .command import SandboxUnavailableError
from .limits import ResourceLimits
from .seccomp import SeccompUnavailableError, filter_bpf

__all__ = [
    "DEVICES",
    "ENFORCEMENT",
    "MIN_ABI",
    "PERMISSIONS",
    "LandlockCapabilities",
    "LandlockSpec",
    "forget_landlock_probes",
    "landlock_argv",
    "probe_landlock",
    "refuse_protected",
    "remove_scratch",
]

#: The Landlock ABI this layer needs: 6 brings the signal and abstract-socket scopes (Linux
#: 6.12); 4 the TCP rules, 3 truncation, 2 renames across folders.
MIN_ABI = 6
#: The device files a tool may read and write.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
#: Files of /etc readable under Landlock besides bubblewrap's: a file that exists but cannot be
#: opened is an error where an absent one is not (Node.js stops at an unreadable openssl.cnf).
ETC_EXTRA = ("/etc/ssl/openssl.cnf",)
#: Seconds the probe may take.
PROBE_TIMEOUT = 10.0
#: The launcher's exit code when it could not confine the process (nothing ran).
LAUNCH_FAILED = 126

#: The aspects of a tool's confinement, in the order ``sandbox check`` and ``tools show`` list
#: them. ``fs``, ``env`` and ``network`` are declared permissions; the others hold for every tool.
PERMISSIONS = ("fs", "env", "network", "tmp", "proc", "processes", "signals", "syscalls")

#: Per layer and aspect: (enforced, how). A tool that declares ``network`` under a layer that
#: does not enforce it is unavailable unless the operator accepts the layer for it.
ENFORCEMENT: dict[str, dict[str, tuple[bool, str]]] = {
    "bubblewrap": {
        "fs": (
            True,
            "mount namespace: only the system, code, declared prefixes (read-only) "
            "and workspace are visible; protected paths covered",
        ),
        "env": (True, "declared keys only (runtime-code keys refused)"),
        "network": (
            True,
            "network namespace: only the egress proxy's socket (host and address checks)",
        ),
        "tmp": (True, "private /tmp and HOME (tmpfs of a fixed size)"),
        "proc": (True, "PID namespace: /proc shows the sandbox's processes only"),
        "processes": (
            True,
            "pids cgroup or RLIMIT_NPROC in the user namespace; the PID "
            "namespace dies with the call",
        ),
        "signals": (True, "PID namespace: no other process can be named"),
        "syscalls": (True, "no capabilities; no_new_privs (no seccomp filter)"),
    },
    "landlock": {
        "fs": (
            True,
            "Landlock: read(+execute) of the system, code and declared prefixes, the "
            "workspace (writable when the tool writes) and the call's scratch folder; "
            "everything else refused (the paths exist but cannot be opened; their "
            "metadata is not ruled: modes, groups and times of files the gateway's user "
            "owns can change anywhere, never to setuid or world-writable)",
        ),
        "env": (True, "declared keys only (runtime-code keys refused)"),
        "network": (
            False,
            "seccomp: TCP sockets only (no MPTCP, TCP Fast Open or listen); Landlock: "
            "connect to the egress proxy's port only, but on ANY address (Landlock filters "
            "by port, not address): a server that listens on that port, as any server an "
            "attacker runs can, is reached directly, past the proxy's host allowlist",
        ),
        "tmp": (
            True,
            "a private scratch folder as TMPDIR and HOME, removed after the call; "
            "its size is bounded per file (RLIMIT_FSIZE), not in total; /tmp itself is "
            "not writable",
        ),
        "proc": (
            True,
            "Landlock: /proc cannot be opened at all (other processes are not "
            "hidden, only unreadable)",
        ),
        "processes": (
            True,
            "pids cgroup when usable, else RLIMIT_NPROC (counts every process "
            "of the gateway's user); the launcher's supervisor reaps the call and kills its "
            "process group (setsid refused) when the tool ends or the gateway dies",
        ),
        "signals": (True, "Landlock signal scope: no process outside the call can be signalled"),
        "syscalls": (
            True,
            "no capabilities (all sets empty, also under a root gateway); no_new_privs; "
            "seccomp: ptrace, mount, unshare, bpf, keyctl, modules, perf_event_open, "
            "io_uring, System V IPC, setuid chmod, xattr writes, other processes' limits "
            "and scheduling... refused",
        ),
    },
}


@dataclass(frozen=True, slots=True)
class LandlockCapabilities:
    """The answer of :func:`probe_landlock`."""

    abi: int
    """The kernel's Landlock ABI (0: none)."""
    works: bool
    problem: str | None = None
    """Why not, and how to fix it (``None`` when it works)."""
    pids_cgroup: PidsHierarchy | None = None
    cgroup_problem: str | None = None
    nproc_enforced: bool = False
    """Whether ``RLIMIT_NPROC`` applies (the gateway's real user is not root)."""

    @property
    def process_limit(self) -> str | None:
        """How the process count is enforced, or ``None`` when it is not."""
        if self.pids_cgroup is not None:
            return self.pids_cgroup.describe()
        if self.nproc_enforced:
            return "RLIMIT_NPROC (a ceiling on every process of the gateway's user)"
        return None


@dataclass(frozen=True, slots=True)
class LandlockSpec:
    """Everything that decides the launcher's command line of one call."""

    command: Sequence[str]
    exec_fds: Sequence[int] = ()
    """System, code and runtime folders: read and execute."""
    read_fds: Sequence[int] = ()
    """Declared ``fs`` prefixes (and a read-only workspace): read."""
    write_fds: Sequence[int] = ()
    """The scratch folder and a writable workspace."""
    dev_fds: Sequence[int] = ()
    connect_ports: Sequence[int] = ()
    limits: ResourceLimits | None = field(default_factory=ResourceLimits)
    """The call's rlimits (``None``: none, for a long-lived host process)."""
    nproc: bool = True
    """Set ``RLIMIT_NPROC`` (only where it means something: the gateway is not root)."""
    network: bool = False
    scratch: Path | None = None
    """The call's scratch folder: the launcher's supervisor removes it when the gateway dies."""

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return tuple((*self.exec_fds, *self.read_fds, *self.write_fds, *self.dev_fds))


def launcher_path() -> str:
    """The launcher's file (run as a script: ``-S`` leaves site-packages out of its start)."""
    return landlock_exec.__file__


def landlock_argv(python: str, spec: LandlockSpec) -> list[str]:
    """The launcher's command line for ``spec``, run by ``python`` (the gateway's interpreter).
    Raises :class:`~toolgate.sandbox.seccomp.SeccompUnavailableError`."""
    argv = [python, "-I", "-S", launcher_path()]
    lim = spec.limits
    if lim is not None:
        figures = [lim.cpu_seconds, lim.memory_bytes, lim.file_size_bytes]
        if spec.nproc:
            figures.append(lim.processes)
        argv += ["--limits", ",".join(map(str, figures))]
    for option, fds in (
        ("--exec", spec.exec_fds),
        ("--read", spec.read_fds),
        ("--write", spec.write_fds),
        ("--dev", spec.dev_fds),
    ):
        for fd in fds:
            argv += [option, str(fd)]
    for port in spec.connect_ports:
        argv += ["--connect", str(port)]
    if spec.scratch is not None:
        argv += ["--scratch", str(spec.scratch)]
    argv += ["--bpf", filter_bpf(spec.network).hex(), "--", *spec.command]
    return argv


def hold_system(held: HeldPaths, *, network: bool) -> tuple[list[int], list[int]]:
    """Open the system folders and ``/etc`` files (read and execute) and the device files in
    ``held``: their descriptors."""
    exec_fds: list[int] = []
    for name in (*SYSTEM_ROOTS, *ETC_BASE, *ETC_EXTRA, *(ETC_NETWORK if network else ())):
        if os.path.exists(name):
            exec_fds.append(held.fd(held.hold(Path(name))))
    dev_fds = [held.fd(held.hold(Path(name))) for name in DEVICES if os.path.exists(name)]
    return exec_fds, dev_fds


#: The probe's shell: reads /proc/self/status, which the ruleset refuses; exit 3 when it could.
_PROBE_SCRIPT = "cat /proc/self/status >/dev/null 2>&1 && exit 3; exit 0"


def refuse_protected(label: str, granted: Sequence[Path], protected: Sequence[Path]) -> None:
    """Landlock grants whole folders and cannot hide a file inside one: a granted folder that
    holds one of the gateway's protected paths (its database, ``.env``, secrets) is refused
    (:class:`~toolgate.sandbox.command.SandboxUnavailableError`; ``label`` names the tool)."""
    for item in protected:
        for path in {Path(os.path.abspath(item)), Path(os.path.realpath(item))}:
            for folder in granted:
                if path == folder or folder in path.parents:
                    raise SandboxUnavailableError(
                        f"{label} did not run: {folder} holds the gateway's protected {path}, "
                        "which the Landlock layer cannot hide inside a granted folder "
                        "(bubblewrap covers it). Move the gateway's state out of the tool's "
                        "folders, workspace and fs prefixes"
                    )


def remove_scratch(folder: Path) -> None:
    """Remove a call's scratch folder and whatever the tool left in it (after its processes are
    gone). A tool may take the write or search bit off a folder of its own (Landlock does not
    rule modes), and a gateway without ``CAP_DAC_OVERRIDE`` (any but root) could then not
    empty it: the folders are given back to their owner first, never following a symlink."""
    failed: list[str] = []
    shutil.rmtree(folder, onerror=lambda _function, path, _exc: failed.append(path))
    if not failed:
        return
    pending = [str(folder)]
    while pending:
        current = pending.pop()
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                continue
            os.chmod(current, 0o700)  # a folder, not a symlink: lstat said so
            with os.scandir(current) as entries:
                pending += [entry.path for entry in entries if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
    shutil.rmtree(folder, ignore_errors=True)


_CACHE: dict[str | None, LandlockCapabilities] = {}
_LOCK = threading.Lock()


def probe_landlock(pids_cgroup: str | None = None) -> LandlockCapabilities:
    """Whether the Landlock layer works here (cached per cgroup setting): the kernel's ABI,
    the seccomp filter, and a launched shell that cannot read ``/proc/self/status``."""
    with _LOCK:
        cached = _CACHE.get(pids_cgroup)
        if cached is None:
            cached = _CACHE[pids_cgroup] = _probe(pids_cgroup)
        return cached


def forget_landlock_probes() -> None:
    """Drop cached probe results (tests)."""
    with _LOCK:
        _CACHE.clear()


def _probe(pids_cgroup: str | None) -> LandlockCapabilities:
    nproc = os.getuid() != 0
    abi = landlock_exec.abi_version()
    if abi < MIN_ABI:
        why = (
            "the kernel has no Landlock (or it is not in the 'lsm=' boot list)"
            if abi == 0
            else f"the kernel's Landlock ABI is {abi}"
        )
        return LandlockCapabilities(
            abi,
            False,
            f"{why}; the Landlock layer needs ABI {MIN_ABI} or later (Linux 6.12+, with "
            "landlock in the kernel's 'lsm=' list) for its TCP rules and signal scope",
            nproc_enforced=nproc,
        )
    try:
        with HeldPaths() as held:
            exec_fds, dev_fds = hold_system(held, network=False)
            # Reads /proc/self/status, which the ruleset refuses: a shell that reads it was not
            # confined. Exit 0 only when the read fails and the shell itself ran.
            spec = LandlockSpec(
                command=[
                    "/bin/sh",
                    "-c",
                    "cat /proc/self/status >/dev/null 2>&1 && exit 3; exit 0",
                ],
                exec_fds=exec_fds,
                dev_fds=dev_fds,
                nproc=False,
            )
            done = subprocess.run(
                landlock_argv(sys.executable, spec),
                capture_output=True,
                timeout=PROBE_TIMEOUT,
                env={"PATH": "/usr/bin:/bin"},
                check=False,
                pass_fds=spec.pass_fds,
            )
    except SeccompUnavailableError as exc:
        return LandlockCapabilities(abi, False, str(exc), nproc_enforced=nproc)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return LandlockCapabilities(
            abi, False, f"the Landlock launcher did not run: {exc}", nproc_enforced=nproc
        )
    if done.returncode != 0:
        stderr = done.stderr.decode("utf-8", "replace").strip()[-400:]
        what = "was not confined" if done.returncode == 3 else "failed"
        return LandlockCapabilities(
            abi,
            False,
            f"a process started by the Landlock launcher {what} "
            f"({stderr or f'exit {done.returncode}'})",
            nproc_enforced=nproc,
        )
    cgroup = probe_pids_cgroup(pids_cgroup)
    return dataclasses.replace(
        LandlockCapabilities(abi, True, nproc_enforced=nproc),
        pids_cgroup=cgroup.hierarchy,
        cgroup_problem=cgroup.problem,
    )
