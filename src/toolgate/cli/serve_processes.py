"""``toolgate serve --workers N``: N server processes on one listening socket, sharing their
state through PostgreSQL (and Redis).

One interpreter spends most of an HTTP call on protocol work; more processes are the way past
it. The supervisor (this module) binds the port once, then starts N workers — each a
``toolgate serve`` of its own, given the socket's file descriptor — and the kernel hands each
new connection to one of them. The workers share nothing in memory, so every guarantee must live
in the shared state: ``--workers`` above 1 needs ``state:`` (PostgreSQL; with ``redis:`` for the
rate limits), exactly as several replicas do. On the SQLite files the MCP sessions, the web UI's
form keys and the audit writers would be per process; toolgate refuses that combination instead
of serving with a guarantee quietly weakened.

A worker that dies is started again (at most :data:`RESTARTS` times in :data:`RESTART_WINDOW`
seconds, then the supervisor gives up and stops the others). On SIGINT or SIGTERM the supervisor
sends SIGTERM to every worker, which finish their requests in flight as a single server does,
and says "toolgate stopped." once for all of them. Ctrl+C in a terminal signals the whole process
group: a worker still starting ignores that SIGINT (it is started with SIGINT ignored, until its
server takes the signal over), so it never dies in the middle of an import with a traceback; the
supervisor's SIGTERM stops it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.text import Text

from .errors import CliFailure

__all__ = ["RESTARTS", "RESTART_WINDOW", "refuse_unshared", "supervise", "worker_command"]

#: A worker may die this many times within :data:`RESTART_WINDOW` seconds and be restarted.
RESTARTS: Final = 5
RESTART_WINDOW: Final = 60.0

#: Seconds workers get to stop after SIGTERM before they are killed (their own graceful
#: shutdown is 5 s, plus the gateway's close).
STOP_TIMEOUT: Final = 15.0


def refuse_unshared(workers: int, shared_database: object | None) -> None:
    """Refuse ``--workers N`` (N > 1) without a shared database, saying why and what to do."""
    if workers > 1 and shared_database is None:
        raise CliFailure(
            f"--workers {workers} needs the shared state in PostgreSQL (state: in toolgate.yaml, "
            "or TOOLGATE_DATABASE_URL; then 'toolgate db upgrade'): the workers share no memory, "
            "and on the SQLite files each would keep its own MCP sessions, web form keys and "
            "audit writer. Run one process (--workers 1), or several with the shared state "
            "(see docs/guides/scale-out.md)."
        )


def worker_command(fd: int, config: Path | None, serve_options: Sequence[str]) -> list[str]:
    """The command line of one worker: ``toolgate [--config PATH] serve --listen-fd FD …``."""
    head = [sys.executable, "-m", "toolgate"]
    if config is not None:
        head += ["--config", str(config)]
    return [*head, "serve", "--listen-fd", str(fd), *serve_options]


def supervise(
    sock: socket.socket, workers: int, command: list[str], err: Console, *, cwd: Path
) -> int:
    """Run ``workers`` copies of ``command`` (:func:`worker_command`) on ``sock`` until SIGINT
    or SIGTERM; returns the exit code (0, or 1 when workers kept dying)."""
    fd = sock.fileno()
    os.set_inheritable(fd, True)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    running: dict[int, subprocess.Popen[bytes]] = {}
    deaths: deque[float] = deque()
    code = 0
    try:
        for slot in range(workers):
            running[slot] = _spawn(command, fd, cwd)
        err.print(
            Text(
                f"{workers} workers: pids "
                + ", ".join(str(process.pid) for process in running.values())
            )
        )
        while not stopping:
            time.sleep(0.2)
            for slot, process in list(running.items()):
                status = process.poll()
                if status is None or stopping:
                    continue
                now = time.monotonic()
                deaths.append(now)
                while deaths and now - deaths[0] > RESTART_WINDOW:
                    deaths.popleft()
                if len(deaths) > RESTARTS:
                    err.print(
                        Text(
                            f"error: workers died {len(deaths)} times within "
                            f"{RESTART_WINDOW:g} s (the last, pid {process.pid}, with exit code "
                            f"{status}); stopping the others",
                            style="bold red",
                        )
                    )
                    code, stopping = 1, True
                    break
                running[slot] = _spawn(command, fd, cwd)
                err.print(
                    Text(
                        f"worker pid {process.pid} exited with code {status}; started pid "
                        f"{running[slot].pid} in its place"
                    )
                )
    finally:
        _stop_all(list(running.values()))
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code


def _spawn(command: list[str], fd: int, cwd: Path) -> subprocess.Popen[bytes]:
    # Workers share the supervisor's stdout/stderr (their logs) and nothing else. An ignored
    # signal stays ignored across exec (a handled one does not): the worker's interpreter starts
    # with SIGINT ignored, until uvicorn installs its own handler. A SIGINT reaching the
    # supervisor during these few milliseconds is lost; the next one stops it.
    handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return subprocess.Popen(command, pass_fds=(fd,), cwd=cwd, stdin=subprocess.DEVNULL)
    finally:
        signal.signal(signal.SIGINT, handler)


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
