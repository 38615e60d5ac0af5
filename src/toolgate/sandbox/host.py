"""What this host can enforce: ``toolgate sandbox check`` and the availability of compartments.

The probe starts a real sandbox (the same namespaces and mounts a tool gets, running ``prlimit``
with the tool limits and ``true``), so "works" means a tool would start, not merely that a
``bwrap`` binary exists. The result is cached per (bwrap path, prlimit path): a host does not
gain or lose user namespaces while the gateway runs, and a failing probe costs one process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass

from .bwrap import BwrapSpec, bwrap_argv
from .limits import ResourceLimits, prlimit_argv

__all__ = ["HostCapabilities", "probe_host"]

#: Seconds the probe sandbox may take to start and exit.
PROBE_TIMEOUT = 10.0

_CACHE: dict[tuple[str, str | None], HostCapabilities] = {}
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
    """Whether the process limit applies (not when the gateway runs as root)."""
    version: str | None = None

    def limit_notes(self) -> dict[str, str]:
        """Which limits are enforced, one line each (for ``sandbox check``)."""
        nproc = (
            "enforced (RLIMIT_NPROC in the sandbox's own user namespace)"
            if self.nproc_enforced
            else "NOT enforced: the gateway runs as root, and the kernel exempts root from "
            "RLIMIT_NPROC; a fork bomb is still confined to the PID namespace and killed at "
            "the timeout. Run the gateway as an ordinary user to enforce it."
        )
        return {
            "cpu time": "enforced (RLIMIT_CPU)",
            "memory": "enforced per process (RLIMIT_AS)",
            "file size": "enforced (RLIMIT_FSIZE); /tmp is a tmpfs of a fixed size",
            "processes": nproc,
            "timeout and output caps": "enforced (the process runner kills the sandbox)",
        }


def probe_host(bwrap_path: str = "bwrap") -> HostCapabilities:
    """Probe (once per program path) whether sandboxes work on this host."""
    key = (bwrap_path, shutil.which("prlimit"))
    with _LOCK:
        cached = _CACHE.get(key)
        if cached is None:
            cached = _CACHE[key] = _probe(bwrap_path, key[1])
        return cached


def forget_probes() -> None:
    """Drop cached probe results (tests; an operator who just installed bubblewrap)."""
    with _LOCK:
        _CACHE.clear()


def _probe(bwrap_path: str, prlimit: str | None) -> HostCapabilities:
    nproc = os.geteuid() != 0
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
    spec = BwrapSpec(
        command=[*prlimit_argv(prlimit, ResourceLimits()), "true"],
        workspace=None,
        workspace_writable=False,
    )
    try:
        done = subprocess.run(
            bwrap_argv(bwrap, spec),
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
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
    return HostCapabilities(bwrap, prlimit, True, None, nproc, version)


def _version(bwrap: str) -> str | None:
    try:
        done = subprocess.run(
            [bwrap, "--version"], capture_output=True, timeout=PROBE_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.decode("utf-8", "replace").strip() or None
