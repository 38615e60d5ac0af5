"""What this host can enforce: ``toolgate sandbox check`` and the availability of compartments.

The probe starts a real sandbox (the same namespaces and mounts a tool gets, running ``prlimit``
with the tool limits and ``cat /proc/self/status``), so "works" means a tool would start, not
merely that a ``bwrap`` binary exists, and that it starts *without capabilities*: a sandbox
whose process has a non-zero ``CapEff`` (a ``bwrap`` that ignores ``--cap-drop ALL``, a wrapper
in its place) could undo its own mounts, so it counts as not working and compartment tools are
unavailable. It also needs bubblewrap's ``--bind-fd`` / ``--ro-bind-fd`` (a call's workspace and
``fs`` prefixes are bound from descriptors opened and checked by the gateway, never by name again:
see :mod:`toolgate.sandbox.bwrap`); a ``bwrap`` without them counts as not working, with that
reason, and the probe itself binds a folder that way. When it works, the probe also looks for a
pids cgroup the gateway can use for every call
(:func:`~toolgate.sandbox.cgroups.probe_pids_cgroup`), which is how the process count is enforced
when the gateway runs as root. The result is cached per (bwrap path, prlimit path, configured
cgroup): a host does not gain or lose user namespaces while the
gateway runs, and a failing probe costs one process.

How the process count is enforced (:attr:`HostCapabilities.process_limit`), best first:

1. a pids cgroup per call (v2 or v1), whoever the gateway runs as;
2. ``RLIMIT_NPROC`` inside the sandbox's user namespace, when the gateway's real user is not
   root;
3. not at all: the gateway runs as root and no pids cgroup is usable. Compartment tools are then
   unavailable (:meth:`HostCapabilities.process_problem` says why and how to fix it) unless the
   operator sets ``sandbox.allow_unlimited_processes: true``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from .bwrap import BwrapSpec, HeldPaths, bwrap_argv
from .cgroups import BWRAP_TASKS, PidsHierarchy, forget_cgroup_probes, probe_pids_cgroup
from .limits import ResourceLimits, prlimit_argv
from .programs import forget_programs

__all__ = ["HostCapabilities", "probe_host"]

#: Seconds the probe sandbox may take to start and exit.
PROBE_TIMEOUT = 10.0

_CACHE: dict[tuple[str, str | None, str | None], HostCapabilities] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class HostCapabilities:
    """The answer of one probe."""

    bwrap: str | None
    """The resolved bubblewrap program, or ``None`` when it was not found."""
    prlimit: str | None
    """The resolved ``prlimit`` (util-linux), or ``None``."""
    works: bool
    """A sandbox with every namespace started and ran a command."""
    problem: str | None
    """Why not, and how to fix it (``None`` when it works)."""
    nproc_enforced: bool
    """Whether ``RLIMIT_NPROC`` applies (not when the gateway's real user is root)."""
    version: str | None = None
    pids_cgroup: PidsHierarchy | None = None
    """Where per-call pids cgroups are made (``None``: no usable pids cgroup)."""
    cgroup_problem: str | None = None
    """Why no pids cgroup is usable (``None`` when one is, or when the sandbox does not work)."""
    capabilities: str | None = None
    """The effective capability set a sandboxed process had (``CapEff`` of
    ``/proc/self/status``, ``0000000000000000`` when it works), ``None`` when none ran."""

    @property
    def process_limit(self) -> str | None:
        """How the process count is enforced, or ``None`` when it is not."""
        if self.pids_cgroup is not None:
            return self.pids_cgroup.describe()
        if self.nproc_enforced:
            return "RLIMIT_NPROC in the sandbox's user namespace"
        return None

    def process_problem(self) -> str | None:
        """Why the process count cannot be enforced here and how to fix it (``None``: it is)."""
        if self.process_limit is not None:
            return None
        return (
            "the process count of a sandbox cannot be enforced here: the gateway runs as root, "
            "which the kernel exempts from RLIMIT_NPROC, and no pids cgroup is usable "
            f"({self.cgroup_problem or 'none found'}). Run the gateway as an ordinary user, or "
            "give it a writable pids cgroup (the cgroup v1 'pids' hierarchy, or a delegated "
            "cgroup v2 subtree with the pids controller, named in sandbox.pids_cgroup), or "
            "accept it with 'sandbox: {allow_unlimited_processes: true}' in toolgate.yaml"
        )

    def process_note(
        self, processes: int | None = None, *, unlimited_accepted: bool = False
    ) -> str:
        """How the process count is enforced, for people: ``pids cgroup v1 (pids.max N per
        call)``, ``RLIMIT_NPROC in the sandbox's user namespace`` or ``not enforced (...)``."""
        how = self.process_limit
        if self.pids_cgroup is not None:
            per_call = f"pids.max {processes} per call" if processes else "pids.max per call"
            also = "; RLIMIT_NPROC too" if self.nproc_enforced else ""
            return f"{how} ({per_call}, plus {BWRAP_TASKS} for bubblewrap's own processes{also})"
        if how is not None:
            return how
        consequence = (
            "accepted with sandbox.allow_unlimited_processes: a fork bomb is confined to the "
            "PID namespace and killed at the call's timeout, but can use host PIDs until then"
            if unlimited_accepted
            else "compartment tools are unavailable until it is fixed"
        )
        return (
            "not enforced (the gateway runs as root, which the kernel exempts from "
            f"RLIMIT_NPROC, and no pids cgroup is usable; {consequence})"
        )

    def limit_notes(
        self, processes: int | None = None, *, unlimited_accepted: bool = False
    ) -> dict[str, str]:
        """Which limits are enforced, one line each (for ``sandbox check`` and ``tools show``).

        ``processes`` is the configured process limit; ``unlimited_accepted`` whether the
        operator set ``sandbox.allow_unlimited_processes``.
        """
        note = self.process_note(processes, unlimited_accepted=unlimited_accepted)
        return {
            "cpu time": "enforced (RLIMIT_CPU)",
            "memory": "enforced per process (RLIMIT_AS)",
            "file size": "enforced (RLIMIT_FSIZE); /tmp is a tmpfs of a fixed size",
            "processes": note if note.startswith("not enforced") else f"enforced: {note}",
            "timeout and output caps": "enforced (the process runner kills the sandbox)",
        }


def probe_host(bwrap_path: str = "bwrap", pids_cgroup: str | None = None) -> HostCapabilities:
    """Probe (once per program path and cgroup setting) whether sandboxes work on this host.

    ``pids_cgroup`` is the operator's ``sandbox.pids_cgroup`` (``None``: find one).
    """
    key = (bwrap_path, shutil.which("prlimit"), pids_cgroup)
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            found = _probe(bwrap_path, key[1])
            if found.works:
                cgroup = probe_pids_cgroup(pids_cgroup)
                found = dataclasses.replace(
                    found, pids_cgroup=cgroup.hierarchy, cgroup_problem=cgroup.problem
                )
            cached = _CACHE[key] = found
        return cached


def forget_probes() -> None:
    """Drop cached probe results (tests; an operator who just installed bubblewrap), and the
    runtimes found behind shims."""
    with _LOCK:
        _CACHE.clear()
    forget_cgroup_probes()
    forget_programs()


def _runs_as_root() -> bool:
    """Whether the kernel exempts the gateway from ``RLIMIT_NPROC``: it does for a process
    whose *real* user is root (in the initial user namespace)."""
    return os.getuid() == 0


def _probe(bwrap_path: str, prlimit: str | None) -> HostCapabilities:
    nproc = not _runs_as_root()
    bwrap = shutil.which(bwrap_path)
    if bwrap is None:
        return HostCapabilities(
            None,
            prlimit,
            False,
            f"bubblewrap was not found ({bwrap_path!r}): install it (Debian/Ubuntu: "
            "'apt-get install bubblewrap') or set sandbox.bwrap_path in toolgate.yaml",
            nproc,
        )
    if prlimit is None:
        return HostCapabilities(
            bwrap,
            None,
            False,
            "'prlimit' was not found: install util-linux, which sets the sandbox's limits",
            nproc,
        )
    version = _version(bwrap)
    if not _binds_descriptors(bwrap):
        return HostCapabilities(
            bwrap,
            prlimit,
            False,
            f"{bwrap} ({version or 'unknown version'}) has no '--bind-fd' / '--ro-bind-fd', "
            "which a sandbox needs to bind exactly the workspace and folders the gateway "
            "checked (a path bound by name can be swapped for a link after the check). "
            "Install a newer bubblewrap, or point sandbox.bwrap_path in toolgate.yaml at one",
            nproc,
            version,
        )
    try:
        with HeldPaths() as held:
            # The probe binds a folder from a descriptor, as every call does.
            probed = held.hold(Path(prlimit).parent, directory=True)
            spec = BwrapSpec(
                command=[*prlimit_argv(prlimit, ResourceLimits()), "cat", "/proc/self/status"],
                workspace=None,
                workspace_writable=False,
                ro_paths=[probed],
                held=held.held,
                require_held=True,
            )
            done = subprocess.run(
                bwrap_argv(bwrap, spec),
                capture_output=True,
                timeout=PROBE_TIMEOUT,
                env={"PATH": "/usr/bin:/bin"},
                check=False,
                pass_fds=spec.pass_fds,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return HostCapabilities(bwrap, prlimit, False, f"bubblewrap did not run: {exc}", nproc)
    if done.returncode != 0:
        stderr = done.stderr.decode("utf-8", "replace").strip()[-400:]
        return HostCapabilities(
            bwrap,
            prlimit,
            False,
            f"bubblewrap cannot create a sandbox here ({stderr or f'exit {done.returncode}'}). "
            "User namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1, "
            "user.max_user_namespaces > 0; in a container, allow them, e.g. no default "
            "seccomp profile that blocks clone(CLONE_NEWUSER)).",
            nproc,
            version,
        )
    capabilities = _effective_capabilities(done.stdout.decode("utf-8", "replace"))
    if capabilities is None or int(capabilities, 16) != 0:
        found = (
            f"CapEff {capabilities}"
            if capabilities is not None
            else "no CapEff line in its /proc/self/status"
        )
        return HostCapabilities(
            bwrap,
            prlimit,
            False,
            f"a sandboxed process keeps capabilities ({found}; expected 0): {bwrap} ignored "
            "'--cap-drop ALL', so a tool could undo the sandbox's read-only and hiding mounts. "
            "Point sandbox.bwrap_path in toolgate.yaml at the distribution's bubblewrap "
            "(not a wrapper that drops arguments)",
            nproc,
            version,
            capabilities=capabilities,
        )
    return HostCapabilities(bwrap, prlimit, True, None, nproc, version, capabilities=capabilities)


def _effective_capabilities(status: str) -> str | None:
    """The hexadecimal ``CapEff`` of a ``/proc/PID/status`` text, or ``None`` without one."""
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == "CapEff":
            value = value.strip()
            try:
                int(value, 16)
            except ValueError:
                return None
            return value
    return None


def _binds_descriptors(bwrap: str) -> bool:
    """Whether ``bwrap --help`` lists ``--bind-fd`` and ``--ro-bind-fd``."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], capture_output=True, timeout=PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = (done.stdout + done.stderr).decode("utf-8", "replace")
    return "--bind-fd" in text and "--ro-bind-fd" in text


def _version(bwrap: str) -> str | None:
    try:
        done = subprocess.run(
            [bwrap, "--version"], capture_output=True, timeout=PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode("utf-8", "replace").strip() or None
