"""Find every process a program started, and kill them all without signalling a stranger.

:class:`ProcessTree` is the process tree of one program that was started with
``start_new_session=True``, so that it leads a new session and process group: everything it forks
stays in that group and session unless it calls ``setsid()`` or ``setpgid()``. The runner of
:mod:`toolgate.backends.processes` uses it to make sure nothing a tool started outlives its call.

How descendants are found (Linux)
=================================

Descendants are found by scanning ``/proc/*/stat`` (``/proc/<pid>/task/<tid>/children`` is not
available on every kernel) and walking the parent links down from the program, from every process
seen before, and from every member of the program's session or process group. Each process is
remembered with its start time (field 22 of ``stat``), and a signal is only sent after checking
that the pid still belongs to the process with that start time (through a pidfd where the kernel
offers one, so a reused pid is never signalled).

A process whose parent exits is reparented to init and drops out of a walk from the program. To
still catch it, the caller *tracks* descendants while the program runs, calling
:meth:`ProcessTree.snapshot` now and then; each snapshot is merged into the tracked set. Scans are
shared by concurrent calls: a snapshot reuses a scan of the process table made less than
:data:`SCAN_MAX_AGE` seconds earlier (and after the call started).

Freezing, then killing
======================

:meth:`ProcessTree.kill` freezes the tree, then kills it: ``SIGSTOP`` to the process group, then
rounds of fresh scans that stop every descendant not yet stopped (a stopped process cannot fork
and keeps its children attached to it, so the walk finds them), until a round finds nothing new;
then ``SIGKILL`` to the process group and to every stopped process.

A process that escaped the walk but still holds one of the program's output pipes open is found
by the pipe it holds: :func:`pipe_holders` looks through ``/proc/*/fd`` for the pipes, and
:meth:`ProcessTree.adopt` counts the holders in, so that the next kill takes them and what they
started the same way.

Without ``/proc`` (macOS, BSD; :data:`HAVE_PROC` is false) only the process group is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal as signal_module
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

__all__ = [
    "HAVE_PROC",
    "SCAN_MAX_AGE",
    "ProcessStat",
    "ProcessTree",
    "parse_stat",
    "pipe_holders",
    "read_process_table",
]

#: A snapshot may reuse a process-table scan this many seconds old (shared by concurrent calls).
SCAN_MAX_AGE = 0.05
#: Whether descendants can be found through ``/proc/<pid>/stat`` (Linux). Read on every call.
HAVE_PROC = os.path.exists("/proc/self/stat")

_MAX_FREEZE_ROUNDS = 50
_PROC = "/proc"
_HAVE_PIDFD = hasattr(os, "pidfd_open") and hasattr(signal_module, "pidfd_send_signal")


class ProcessStat(NamedTuple):
    """The fields of ``/proc/<pid>/stat`` this module uses."""

    state: bytes
    ppid: int
    pgrp: int
    session: int
    start: int


def parse_stat(data: bytes) -> ProcessStat | None:
    """Parse one ``/proc/<pid>/stat`` line; ``comm`` may hold spaces and parentheses."""
    close = data.rfind(b")")
    if close < 0:
        return None
    fields = data[close + 1 :].split()
    # fields[0] is field 3 of stat (state); fields[19] is field 22 (starttime).
    try:
        return ProcessStat(
            fields[0], int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
        )
    except (IndexError, ValueError):
        return None


def _read_stat(pid: int) -> ProcessStat | None:
    try:
        fd = os.open(f"{_PROC}/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)
    return parse_stat(data)


def _last_pid() -> int | None:
    try:
        with open(f"{_PROC}/sys/kernel/ns_last_pid", "rb") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def lowest_pid_to_scan(root: int, tracked: Iterable[int] = ()) -> int:
    """The lowest pid a scan for ``root``'s descendants must read.

    Pids are handed out in increasing order, so everything ``root`` started has a higher pid —
    unless the kernel's pid counter wrapped around since ``root`` started; then (or when the
    counter cannot be read) the whole table is scanned. Reading only the newer entries is what
    keeps the per-call bookkeeping cheap on a host with many processes.
    """
    last = _last_pid()
    if last is None or last < root:
        return 0
    return min(root, *tracked) if tracked else root


def read_process_table(min_pid: int = 0) -> dict[int, ProcessStat]:
    """Scan ``/proc``: pid to stat of every process with a pid of at least ``min_pid``."""
    table: dict[int, ProcessStat] = {}
    try:
        names = os.listdir(_PROC)
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid < min_pid:
            continue
        stat = _read_stat(pid)
        if stat is not None:
            table[pid] = stat
    return table


class _ProcessTableCache:
    """The latest scan of ``/proc``, shared by all calls (scans are synchronous: no lock)."""

    __slots__ = ("_latest",)

    def __init__(self) -> None:
        #: When the latest scan began (``time.monotonic()``), the lowest pid it read, and its
        #: table; one attribute, so that event loops in other threads always see a matching set.
        self._latest: tuple[float, int, dict[int, ProcessStat]] = (float("-inf"), 0, {})

    def get(self, not_before: float, min_pid: int = 0) -> dict[int, ProcessStat]:
        """A table of every pid from ``min_pid`` on, scanned at or after ``not_before``
        (``time.monotonic()``), scanning if needed."""
        began, covered_from, table = self._latest
        if began >= not_before and covered_from <= min_pid:
            return table
        began = time.monotonic()
        table = read_process_table(min_pid)
        self._latest = (began, min_pid, table)
        return table


_SCANS = _ProcessTableCache()


class ProcessTree:
    """The processes one call started: found by walking ``/proc``, remembered while it runs."""

    __slots__ = ("_not_before", "_root", "_root_start", "tracked")

    def __init__(self, root: int, started: float) -> None:
        """The tree of ``root``, a session leader started at ``started`` (``time.monotonic()``).

        No scan of the process table begun before ``started`` is used for it.
        """
        self._root = root
        self._root_start: int | None = None
        self._not_before = started
        #: pid to start time of every descendant seen so far and not known to be gone.
        self.tracked: dict[int, int] = {}

    def snapshot(self) -> None:
        """Record the current descendants (from a scan at most ``SCAN_MAX_AGE`` seconds old)."""
        not_before = max(self._not_before, time.monotonic() - SCAN_MAX_AGE)
        self._record(_SCANS.get(not_before, lowest_pid_to_scan(self._root, self.tracked)))

    def _record(self, table: dict[int, ProcessStat]) -> dict[int, int]:
        """Walk ``table`` from the root, the tracked processes and the root's session and group.

        Updates :attr:`tracked` and returns the descendants found (pid to start time).
        """
        root = self._root
        tracked = {
            pid: start
            for pid, start in self.tracked.items()
            if (stat := table.get(pid)) is not None and stat.start == start
        }
        root_stat = table.get(root)
        if root_stat is not None:
            if self._root_start is None:
                self._root_start = root_stat.start
            if root_stat.start == self._root_start:
                tracked[root] = root_stat.start
        children: dict[int, list[int]] = {}
        for pid, stat in table.items():
            if stat.session == root or stat.pgrp == root:
                tracked.setdefault(pid, stat.start)
            children.setdefault(stat.ppid, []).append(pid)
        found: dict[int, int] = {}
        never = (0, 1, os.getpid())
        todo = list(tracked)
        while todo:
            pid = todo.pop()
            if pid in found or pid in never:
                continue
            found[pid] = table[pid].start
            todo.extend(children.get(pid, ()))
        self.tracked = found
        return found

    def adopt(self, processes: Mapping[int, int]) -> bool:
        """Count ``processes`` (pid to start time) as descendants; True if one was new."""
        new = {pid: start for pid, start in processes.items() if self.tracked.get(pid) != start}
        self.tracked.update(new)
        return bool(new)

    def kill(self) -> None:
        """``SIGKILL`` the process group and every descendant; synchronous, so cancel-safe.

        The tree is first frozen with ``SIGSTOP`` (group, then each descendant found by fresh
        scans until a scan finds nothing new), so no process can fork or be orphaned while it is
        being walked; then everything frozen gets ``SIGKILL``.
        """
        if not HAVE_PROC:
            _signal_group(self._root, signal_module.SIGKILL)
            return
        _signal_group(self._root, signal_module.SIGSTOP)
        stopped: dict[int, _Target] = {}
        try:
            for _ in range(_MAX_FREEZE_ROUNDS):
                table = _SCANS.get(time.monotonic(), lowest_pid_to_scan(self._root, self.tracked))
                found = self._record(table)
                new = [
                    (pid, start)
                    for pid, start in found.items()
                    if pid not in stopped and table[pid].state not in (b"Z", b"X")
                ]
                if not new:
                    break
                for pid, start in new:
                    target = _Target.open(pid, start)
                    if target is not None:
                        target.send(signal_module.SIGSTOP)
                        stopped[pid] = target
        finally:
            _signal_group(self._root, signal_module.SIGKILL)
            for target in stopped.values():
                target.send(signal_module.SIGKILL)
                target.close()


def pipe_holders(inodes: set[int]) -> dict[int, int]:
    """Processes (pid to start time) other than this one with a pipe of ``inodes`` open.

    Reads every ``/proc/<pid>/fd`` it may read: a few milliseconds, so only used when the output
    does not reach end of file although the tree was killed.
    """
    holders: dict[int, int] = {}
    if not inodes:
        return holders
    links = {f"pipe:[{inode}]" for inode in inodes}
    me = os.getpid()
    try:
        names = os.listdir(_PROC)
    except OSError:
        return holders
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        folder = f"{_PROC}/{name}/fd"
        try:
            fds = os.listdir(folder)
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{folder}/{fd}")
            except OSError:
                continue
            if link in links:
                stat = _read_stat(int(name))
                if stat is not None:
                    holders[int(name)] = stat.start
                break
    return holders


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _Target:
    """A process checked to be the one with a known start time, safe to signal (pidfd)."""

    __slots__ = ("_pid", "_pidfd")

    def __init__(self, pid: int, pidfd: int | None) -> None:
        self._pid = pid
        self._pidfd = pidfd

    @classmethod
    def open(cls, pid: int, start: int) -> _Target | None:
        """The process ``pid`` if it is still the one started at ``start``, else ``None``."""
        pidfd: int | None = None
        if _HAVE_PIDFD:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                return None
            except OSError:
                pidfd = None  # ENOSYS and the like: check the start time, then use the pid
        # With a pidfd open first, a matching start time proves the pidfd is that process.
        stat = _read_stat(pid)
        if stat is None or stat.start != start:
            if pidfd is not None:
                os.close(pidfd)
            return None
        return cls(pid, pidfd)

    def send(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self._pidfd is not None:
                signal_module.pidfd_send_signal(self._pidfd, sig)
            else:
                os.kill(self._pid, sig)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
