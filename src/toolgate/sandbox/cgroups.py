"""Per-call pids cgroups: a process limit the kernel applies to root too.

``RLIMIT_NPROC`` (set by ``prlimit`` in the sandbox) is never applied to processes whose real
user is root, so when the gateway runs as root it cannot stop a fork bomb. A cgroup's
``pids.max`` can: the pids controller refuses ``fork``/``clone`` in a cgroup whose task count
(processes *and* threads) reached it, whoever the user is.

Every sandboxed call gets a fresh cgroup, ``toolgate-<gateway pid>-<unique id>``, under a
parent found once by :func:`probe_pids_cgroup`:

* cgroup v2: the gateway's own cgroup (``0::`` of ``/proc/self/cgroup``) when its
  ``cgroup.controllers`` has ``pids`` and its ``cgroup.subtree_control`` has it or can be given
  it (a root cgroup, or a delegated one with no processes of its own);
* cgroup v1: the gateway's cgroup in the ``pids`` hierarchy;
* or the folder the operator names in ``sandbox.pids_cgroup`` (either version).

The probe proves the whole mechanism rather than trusting that a folder looks right: it creates
a test cgroup, sets its ``pids.max``, starts a process through the same wrapper the calls use,
checks from ``/proc/self/cgroup`` that the process landed in it, and removes it again.

The sandbox joins the call's cgroup *before* anything in it can fork: the command starts as a
tiny POSIX shell (:meth:`CallCgroup.wrap`) that writes ``0`` ("myself") to the cgroup's
``tasks`` (v1) or ``cgroup.procs`` (v2) and then ``exec``\\s ``bwrap``, so ``bwrap`` and
everything it starts are born in the cgroup. If the write fails, the shell exits and ``bwrap``
never starts (it fails closed). This costs one ``exec`` of ``sh`` (about 0.3 ms per call on v1,
measured with ``bench/run.py --only sandbox`` with and without it), less than holding ``bwrap``
with ``--block-fd`` and moving its processes from the gateway, which would also need file
descriptors passed through the process runner. No ``preexec_fn`` (not safe with threads).
Why ``tasks`` on v1: see :attr:`CallCgroup.join_file`. Where it can
(:attr:`PidsHierarchy.shell_limits`, proven by the probe), the same shell also sets the call's
rlimits (:data:`~toolgate.sandbox.limits.ULIMIT_SCRIPT`), and the ``prlimit`` program is then not
started at all (see :mod:`toolgate.sandbox.limits`).

After the call, whatever is left in the cgroup is killed (``cgroup.kill`` on v2 when the kernel
has it, otherwise ``SIGKILL`` through pidfds of the pids in ``cgroup.procs``, so a reused pid is
never signalled) and the folder is removed, retrying briefly while exiting tasks still hold it.
A folder that cannot be removed is retried at the next call and at exit; stale empty
``toolgate-<pid>-*`` folders of gateways that no longer run are removed at probe time.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import dataclasses
import errno
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .exits import wait_exited
from .limits import ULIMIT_SCRIPT, ResourceLimits, shell_limit_args

__all__ = [
    "BRIDGE_TASKS",
    "BWRAP_TASKS",
    "CallCgroup",
    "CgroupProbe",
    "PidsHierarchy",
    "forget_cgroup_probes",
    "own_cgroup_folders",
    "probe_pids_cgroup",
    "sweep_stale",
]

#: Tasks bubblewrap itself keeps in the cgroup during a call: the outer ``bwrap`` (the process
#: the gateway started) and its child, PID 1 of the sandbox's PID namespace (measured with
#: bubblewrap 0.8: ``pids.current`` is 2 + the tool's own tasks).
BWRAP_TASKS = 2
#: Tasks of the egress bridge of a tool with network permissions: its process and the thread
#: that accepts connections (each open connection's two pump threads count toward the tool's
#: limit, as they do toward ``RLIMIT_NPROC``).
BRIDGE_TASKS = 2

#: Names of the per-call cgroups: ``toolgate-<gateway pid>-<unique id>``.
PREFIX = "toolgate-"
#: The join wrapper: move this shell into the cgroup (``0`` is "the writer itself"), then
#: become the command. It fails closed: if the write fails, the command never starts.
_JOIN = 'echo 0 > "$1" || { echo "toolgate: cannot join the call\'s pids cgroup" >&2; exit 126; }\n'
JOIN_SCRIPT = _JOIN + 'shift\nexec "$@"'
#: The join wrapper that also sets the call's rlimits (three words after the join file).
JOIN_LIMITS_SCRIPT = _JOIN + "shift\n" + ULIMIT_SCRIPT + 'exec "$@"'
#: The limits the probe sets through the shell and reads back (odd figures, so that a shell
#: counting in other units than :func:`~toolgate.sandbox.limits.shell_limit_args` is caught).
PROBE_LIMITS = ResourceLimits(
    cpu_seconds=7, memory_bytes=1536 * 1024 * 1024, file_size_bytes=3 * 1024 * 1024
)
#: Seconds an empty per-call cgroup of a gateway that looks gone must be old to be swept.
STALE_AFTER = 60.0
#: Seconds the probe's test process may take.
PROBE_TIMEOUT = 10.0
#: Pauses between attempts to remove a call's cgroup while its last tasks exit (~1.6 s in all).
REMOVE_RETRIES = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4, 0.8)
#: Seconds to wait for the tasks left at the end of a call to exit before the retries above.
EXIT_WAIT = 0.05

_SAFE_PATH = "/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class PidsHierarchy:
    """Where per-call cgroups are made, and how."""

    version: int
    """1 (the v1 ``pids`` hierarchy) or 2 (the unified hierarchy)."""
    parent: Path
    """The cgroup folder the per-call cgroups are created in."""
    shell: str
    """The POSIX shell that runs the join wrapper (an absolute path)."""
    shell_limits: bool = False
    """The shell sets the rlimits exactly as :data:`JOIN_LIMITS_SCRIPT` asks (proven by the
    probe), so a call can have them set there instead of by ``prlimit``."""

    def describe(self) -> str:
        """``pids cgroup v1`` or ``pids cgroup v2``."""
        return f"pids cgroup v{self.version}"


@dataclass(frozen=True, slots=True)
class CgroupProbe:
    """The answer of one probe: a usable hierarchy, or why there is none."""

    hierarchy: PidsHierarchy | None
    problem: str | None


_CACHE: dict[str | None, CgroupProbe] = {}
_LOCK = threading.Lock()
_LEFTOVERS: set[CallCgroup] = set()


def probe_pids_cgroup(parent: str | None = None) -> CgroupProbe:
    """Find (once per ``parent``) where this gateway can make per-call pids cgroups.

    ``parent``: the operator's folder (``sandbox.pids_cgroup``); ``None`` looks at the
    gateway's own cgroup, v2 first, then the v1 ``pids`` hierarchy.
    """
    with _LOCK:
        cached = _CACHE.get(parent)
        if cached is None:
            cached = _CACHE[parent] = _probe(parent)
        return cached


def forget_cgroup_probes() -> None:
    """Drop cached probe results (tests; ``sandbox check``)."""
    with _LOCK:
        _CACHE.clear()


def _probe(parent: str | None) -> CgroupProbe:
    shell = shutil.which("sh", path=_SAFE_PATH)
    if shell is None:
        return CgroupProbe(None, "no POSIX shell ('sh') in /usr/bin or /bin")
    if parent is not None:
        folder = Path(parent)
        version = 2 if (folder / "cgroup.controllers").exists() else 1
        candidates = [(version, folder)]
    else:
        candidates = _own_cgroups()
        if not candidates:
            return CgroupProbe(None, "no cgroup v2 or v1 'pids' hierarchy is mounted")
    problems = []
    for version, folder in candidates:
        hierarchy = PidsHierarchy(version, folder, shell)
        problem = _try(hierarchy)
        if problem is None:
            sweep_stale(folder)
            limits = _shell_sets_limits(hierarchy)
            return CgroupProbe(dataclasses.replace(hierarchy, shell_limits=limits), None)
        problems.append(f"cgroup v{version} at {folder}: {problem}")
    return CgroupProbe(None, "; ".join(problems))


def _own_cgroups() -> list[tuple[int, Path]]:
    """The gateway's own cgroup folders that could hold pids cgroups: v2, then v1 ``pids``."""
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        cgroup = Path("/proc/self/cgroup").read_text(encoding="utf-8")
    except OSError:
        return []
    return own_cgroup_folders(mountinfo, cgroup)


def own_cgroup_folders(mountinfo: str, cgroup: str) -> list[tuple[int, Path]]:
    """``(version, folder)`` of a process's cgroups that could hold pids cgroups, v2 first,
    from the text of its ``/proc/<pid>/mountinfo`` and ``/proc/<pid>/cgroup``."""
    mounts = mountinfo.splitlines()
    paths: dict[str, str] = {}  # "" for v2, "pids" for the v1 pids hierarchy
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            paths[""] = path
        elif "pids" in controllers.split(","):
            paths["pids"] = path
    found: dict[str, Path] = {}
    for line in mounts:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        fstype, _source, options = line.split(" - ", 1)[1].split()[:3]
        key = "" if fstype == "cgroup2" else "pids" if fstype == "cgroup" else None
        if key is None or key in found or key not in paths:
            continue
        if key == "pids" and "pids" not in options.split(","):
            continue
        inside = os.path.relpath(paths[key], root)
        if inside.startswith(".."):
            continue  # the gateway's cgroup is not visible through this mount
        found[key] = Path(point) if inside == "." else Path(point) / inside
    return [(2 if key == "" else 1, folder) for key, folder in sorted(found.items())]


def _unescape(field: str) -> str:
    """A mountinfo path field (spaces and the like are octal escapes: ``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match[1], 8)), field)


def _try(hierarchy: PidsHierarchy) -> str | None:
    """Create a test cgroup in ``hierarchy``, start a process in it; ``None`` when it worked."""
    parent = hierarchy.parent
    if not parent.is_dir():
        return "no such folder"
    if hierarchy.version == 2:
        problem = _enable_pids(parent)
        if problem is not None:
            return problem
    test = parent / f"{PREFIX}{os.getpid()}-probe{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(test)
    except OSError as exc:
        return f"cannot create a cgroup there ({exc.strerror})"
    try:
        joining = CallCgroup(test, hierarchy.version, hierarchy.shell)
        if not (test / "pids.max").exists() or not (test / joining.join_file).exists():
            return "not a cgroup with the pids controller (no pids.max in a new cgroup)"
        _write(test / "pids.max", "8")
        argv = joining.wrap(["cat", "/proc/self/cgroup"])
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            env={"PATH": _SAFE_PATH},
            check=False,
        )
        if done.returncode != 0 or test.name not in done.stdout.decode("utf-8", "replace"):
            why = done.stderr.decode("utf-8", "replace").strip()[-300:]
            return f"a process cannot join a cgroup there ({why or f'exit {done.returncode}'})"
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"cannot use a cgroup there ({exc})"
    finally:
        CallCgroup(test, hierarchy.version, hierarchy.shell).remove_now()


def _shell_sets_limits(hierarchy: PidsHierarchy) -> bool:
    """Whether the join wrapper with limits sets exactly :data:`PROBE_LIMITS` (soft and hard)
    in a test cgroup of ``hierarchy``: read back from ``/proc/self/limits``."""
    test = hierarchy.parent / f"{PREFIX}{os.getpid()}-probe{uuid.uuid4().hex[:8]}"
    try:
        os.mkdir(test)
    except OSError:
        return False
    joining = CallCgroup(test, hierarchy.version, hierarchy.shell, sets_limits=True)
    try:
        done = subprocess.run(
            joining.wrap(["cat", "/proc/self/limits"], limits=PROBE_LIMITS),
            capture_output=True,
            timeout=PROBE_TIMEOUT,
            env={"PATH": _SAFE_PATH},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        joining.remove_now()
    if done.returncode != 0:
        return False
    return limits_read(done.stdout.decode("ascii", "replace")) == expected_limits(PROBE_LIMITS)


def expected_limits(limits: ResourceLimits) -> dict[str, tuple[str, str]]:
    """The ``/proc/<pid>/limits`` rows (soft, hard) that ``limits`` sets."""
    return {
        "Max cpu time": (str(limits.cpu_seconds),) * 2,
        "Max file size": (str(limits.file_size_bytes),) * 2,
        "Max core file size": ("0", "0"),
        "Max address space": (str(limits.memory_bytes),) * 2,
    }


def limits_read(text: str) -> dict[str, tuple[str, str]]:
    """The rows of ``/proc/<pid>/limits`` that :func:`expected_limits` names."""
    found: dict[str, tuple[str, str]] = {}
    for name in expected_limits(PROBE_LIMITS):
        for line in text.splitlines():
            if line.startswith(name + " "):
                words = line[len(name) :].split()
                if len(words) >= 2:
                    found[name] = (words[0], words[1])
    return found


def _enable_pids(parent: Path) -> str | None:
    """Make the v2 cgroup ``parent`` give the pids controller to its children."""
    try:
        available = (parent / "cgroup.controllers").read_text(encoding="utf-8").split()
        if "pids" not in available:
            listed = " ".join(available) or "empty"
            return f"the pids controller is not available (cgroup.controllers: {listed})"
        if "pids" in (parent / "cgroup.subtree_control").read_text(encoding="utf-8").split():
            return None
        _write(parent / "cgroup.subtree_control", "+pids")
        return None
    except OSError as exc:
        hint = (
            " (the cgroup holds processes of its own; delegate a cgroup to the gateway and name "
            "an empty one in sandbox.pids_cgroup)"
            if exc.errno == errno.EBUSY
            else ""
        )
        return f"cannot enable the pids controller for its children ({exc.strerror}){hint}"


def sweep_stale(parent: Path) -> int:
    """Remove empty ``toolgate-<pid>-*`` cgroups in ``parent`` whose gateway no longer runs.

    Returns how many were removed. Non-empty ones are left alone (their processes are not
    this gateway's to kill: another gateway in another PID namespace may share the hierarchy),
    and so are ones younger than :data:`STALE_AFTER` seconds: such a gateway's pid may look
    dead from here, and its cgroup is empty from its creation until the call joins it.
    """
    removed = 0
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    now = time.time()
    for entry in entries:
        if not entry.name.startswith(PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        pid_text = entry.name[len(PREFIX) :].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime < STALE_AFTER:
                continue
        except OSError:
            continue
        try:
            os.rmdir(entry.path)
            removed += 1
        except OSError:
            continue  # not empty, or already gone
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, another user's
    return True


@dataclass(frozen=True, slots=True)
class CallCgroup:
    """The pids cgroup of one sandboxed call."""

    path: Path
    version: int
    shell: str
    sets_limits: bool = False
    """:meth:`wrap` can set the call's rlimits too (:attr:`PidsHierarchy.shell_limits`)."""

    @classmethod
    def create(cls, hierarchy: PidsHierarchy, max_pids: int) -> CallCgroup:
        """A new cgroup in ``hierarchy`` with ``pids.max`` = ``max_pids``; raises ``OSError``."""
        path = hierarchy.parent / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        os.mkdir(path)
        made = cls(path, hierarchy.version, hierarchy.shell, hierarchy.shell_limits)
        try:
            _write(path / "pids.max", str(max_pids))
        except OSError:
            made.remove_now()
            raise
        return made

    def wrap(self, argv: Sequence[str], *, limits: ResourceLimits | None = None) -> list[str]:
        """``argv`` started inside this cgroup (see the module documentation), with ``limits``
        set as rlimits first when given (only where :attr:`sets_limits`; raises
        :class:`ValueError` otherwise, or when the shell cannot say them exactly)."""
        join = str(self.path / self.join_file)
        if limits is None:
            return [self.shell, "-c", JOIN_SCRIPT, "sh", join, *argv]
        words = shell_limit_args(limits)
        if not self.sets_limits or words is None:
            raise ValueError(f"the join shell of {self.path} cannot set these limits exactly")
        return [self.shell, "-c", JOIN_LIMITS_SCRIPT, "sh", join, *words, *argv]

    @property
    def join_file(self) -> str:
        """The file the wrapper writes to join.

        On v1 ``tasks``: writing ``0`` there moves only the writing thread (the shell has one),
        which the kernel does without the global ``cgroup_threadgroup_rwsem``, whose write lock
        waits for an RCU grace period (5-15 ms per call on an otherwise idle host, measured);
        ``cgroup.procs`` takes it. v2 has no such file for ordinary (domain) cgroups, so it
        pays the grace period, unless the hierarchy is mounted with ``favordynmods``.
        """
        return "tasks" if self.version == 1 else "cgroup.procs"

    def pids(self) -> list[int]:
        """The processes in the cgroup now."""
        try:
            text = (self.path / "cgroup.procs").read_text(encoding="ascii")
        except OSError:
            return []
        return [int(word) for word in text.split()]

    def kill(self) -> None:
        """``SIGKILL`` everything in the cgroup (it may fork while this runs: call again)."""
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(self.path / "cgroup.kill", "1")
                return
        pids = self.pids()
        if not pids:
            return
        handles: dict[int, int] = {}
        try:
            for pid in pids:
                with contextlib.suppress(OSError):
                    handles[pid] = os.pidfd_open(pid)
            # A pidfd holds one process; signal it only if that process is still in the
            # cgroup, so a pid reused since the first read is never signalled.
            still = set(self.pids())
            for pid, handle in handles.items():
                if pid in still:
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(handle, signal.SIGKILL)
        finally:
            for handle in handles.values():
                os.close(handle)

    def remove_now(self) -> bool:
        """Kill what is left and remove the folder; ``False`` when it is still busy."""
        self.kill()
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    async def close(self) -> None:
        """Remove the cgroup after the call (ok, error, timeout or cancellation).

        Waits for its last tasks to exit (:func:`~toolgate.sandbox.exits.wait_exited`: the
        sandbox's PID 1 still tearing its namespaces down), then retries; a folder still busy
        after that is remembered and retried at the next call's end and when the gateway exits.
        """
        _retry_leftovers()
        try:
            if self.remove_now():
                return
            # Everything left was sent SIGKILL: wait for it to be gone, woken by the kernel.
            await wait_exited(self.pids(), EXIT_WAIT)
            for delay in REMOVE_RETRIES:
                if delay:
                    await asyncio.sleep(delay)
                if self.remove_now():
                    return
        except asyncio.CancelledError:
            if not self.remove_now():
                _remember(self)
            raise
        _remember(self)


def _write(path: Path, text: str) -> None:
    """Write ``text`` to a cgroup control file (one ``write``, no create, no truncate)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _remember(cgroup: CallCgroup) -> None:
    with _LOCK:
        _LEFTOVERS.add(cgroup)


def _retry_leftovers() -> None:
    """Try again to remove cgroups that were still busy at the end of earlier calls."""
    if not _LEFTOVERS:
        return
    with _LOCK:
        pending = list(_LEFTOVERS)
    for cgroup in pending:
        if cgroup.remove_now():
            with _LOCK:
                _LEFTOVERS.discard(cgroup)


atexit.register(_retry_leftovers)
