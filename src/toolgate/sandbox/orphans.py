"""Reap the processes a call under the Landlock layer leaves behind, when no one else will.

Under bubblewrap a call's processes live in a PID namespace of their own, whose init reaps them.
The Landlock layer has no PID namespace: when a tool's process exits before its children (a fork
bomb, a daemon that forks twice), the kernel hands the children to the nearest *child
subreaper* ancestor, or to PID 1. When the runner kills the call's process tree at the end of
the call, each killed orphan stays a zombie until that process waits for it, and a zombie still
counts against ``RLIMIT_NPROC`` of its user, the limit that bounds a fork bomb where no pids
cgroup is usable (a non-root pod). Zombies nobody reaps would soon stop every call of that user
from forking.

Reaping them is PID 1's job, and an init does it: the image's ``tini -s`` (the Helm chart's
command), systemd on a host. A gateway that *is* PID 1 (a container started without an init,
``docker run --entrypoint toolgate``) gets every orphan of the container and would reap none, so
there, the first time a call runs under the Landlock layer, :func:`adopt_orphans` starts a thread
that reaps them: :func:`reap_soon` wakes it when a call ends; it also looks every
:data:`IDLE_SWEEP` seconds. The gateway never makes itself a child subreaper: under an init that
reaps, that would only take orphans away from it (a host tool's daemon that leads its own session
would then stay a zombie of the gateway, below).

Which zombies are reaped here, and why no one else's: a zombie child of the gateway that is not
the leader of its session and not in the gateway's own session. Every process the gateway
starts itself either stays in the gateway's session or leads a new one
(``start_new_session=True``), and whoever started it waits for it; a tool under the Landlock
layer cannot leave the session its launcher leads (seccomp refuses ``setsid``), so each process
it leaves behind matches, and a process someone else waits for never does. An orphan that leads
a session of its own (a host tool's daemon) looks like a process the gateway started and is
left: run the gateway under an init.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

__all__ = ["IDLE_SWEEP", "adopt_orphans", "reap_now", "reap_soon", "start_reaper"]

#: Seconds between two looks for orphans when no call has ended.
IDLE_SWEEP = 30.0
#: After a call ends, looks at these delays (seconds): a killed process becomes a zombie soon
#: after its ``SIGKILL``, but not at once.
_AFTER_CALL = (0.0, 0.05, 0.25, 1.0, 5.0)

_PROC = "/proc"

_lock = threading.Lock()
#: Held by a sweep: two at once could both read a zombie orphan, one reap it and the other then
#: wait for whatever process the kernel gave that pid next (a child someone else waits for).
_sweeping = threading.Lock()
_wake = threading.Event()
_started = False
_log = logging.getLogger(__name__)


def adopt_orphans() -> bool:
    """Start reaping the orphans handed to the gateway when it is PID 1 of its PID namespace
    (once per process; see the module documentation). ``False`` under another PID 1, which
    reaps them."""
    if os.getpid() != 1:
        return False
    start_reaper()
    return True


def start_reaper() -> None:
    """Start the reaper thread, whatever this process is (once per process): for a process
    that made itself a child subreaper on purpose (an embedder, the tests), which then owns
    what its calls leave behind."""
    global _started
    with _lock:
        if not _started:
            threading.Thread(target=_reaper, name="toolgate-orphan-reaper", daemon=True).start()
            _started = True


def reap_soon() -> None:
    """A call under the Landlock layer ended: look for its orphans in the next seconds."""
    _wake.set()


def reap_now() -> list[int]:
    """Reap every orphan zombie of this process now (see the module documentation); the pids
    reaped."""
    with _sweeping:
        me, my_session = os.getpid(), os.getsid(0)
        reaped: list[int] = []
        for pid in _children(me):
            if _zombie_orphan(pid, me, my_session) and _reap(pid):
                reaped.append(pid)
        return reaped


def _children(me: int) -> list[int]:
    """The pids that may be children of this process: those the kernel lists as children of
    its threads (a few reads, however many processes the host runs), else every pid in
    ``/proc`` (a kernel without ``CONFIG_PROC_CHILDREN``). Nothing when ``/proc`` is not this
    process's PID namespace (its pids would name other processes to ``waitpid``)."""
    try:
        if os.readlink(f"{_PROC}/self") != str(me):
            return []
        tids = os.listdir(f"{_PROC}/self/task")
    except OSError:
        return []
    if not _kernel_lists_children(me):
        return [int(name) for name in _listdir(_PROC) if name.isdigit()]
    pids: list[int] = []
    for tid in tids:
        # A thread that ended meanwhile has no file any more; its children went to another.
        with (
            contextlib.suppress(OSError, ValueError),
            open(f"{_PROC}/self/task/{tid}/children", "rb") as listed,
        ):
            pids.extend(int(word) for word in listed.read().split())
    return pids


def _kernel_lists_children(me: int) -> bool:
    return os.path.exists(f"{_PROC}/self/task/{me}/children")


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _zombie_orphan(pid: int, parent: int, parent_session: int) -> bool:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return False
    # The command name is in parentheses and may hold anything: the fields follow the last ")".
    fields = text[text.rfind(b")") + 2 :].split()
    if len(fields) < 4 or fields[0] != b"Z":
        return False
    ppid, session = int(fields[1]), int(fields[3])
    return ppid == parent and session not in (pid, parent_session)


def _reap(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == pid
    return False


def _reaper() -> None:
    while True:
        if not _wake.wait(IDLE_SWEEP):
            _sweep()
            continue
        step = 0
        while step < len(_AFTER_CALL):
            _wake.clear()
            # Another call ended meanwhile: its looks start again from the first.
            step = 0 if _wake.wait(_AFTER_CALL[step]) else step + 1
            _sweep()


def _sweep() -> None:
    """:func:`reap_now`, which must not end the thread: a sweep that fails is logged and the
    next one runs as planned (a dead reaper would leave every later orphan a zombie)."""
    try:
        reap_now()
    except Exception:  # noqa: BLE001 - whatever failed, the thread must go on
        _log.exception("toolgate: looking for orphan zombies failed; the next look is as planned")
