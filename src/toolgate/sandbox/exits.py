"""Waiting for processes that are not the gateway's children to exit, without polling.

When a sandboxed call ends, the gateway has reaped the process it started (the outer
``bwrap``), but the sandbox's PID 1 may still be exiting: the last process of a mount namespace
tears it down as it exits (unmounting every bind, an RCU grace period), about 0.5 ms here and up
to a few ms under load, and until then the call's pids cgroup cannot be removed
(:meth:`~toolgate.sandbox.cgroups.CallCgroup.close`). Sleeping in fixed steps made every such
call wait for the first step (2 ms) or more; :func:`wait_exited` instead waits on a *pidfd* of
each process (``pidfd_open``), which the kernel makes readable when the process has exited,
after it left its cgroup. The event loop is woken then, not before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterable

__all__ = ["wait_exited"]


async def wait_exited(pids: Iterable[int], timeout: float) -> None:
    """Return when every process of ``pids`` has exited, or after ``timeout`` seconds, whichever
    comes first. A process that is already gone (or that cannot be watched) counts as exited;
    a reused pid is never waited for longer than ``timeout``."""
    loop = asyncio.get_running_loop()
    watched: list[tuple[int, asyncio.Future[None]]] = []
    try:
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # gone already
            done: asyncio.Future[None] = loop.create_future()
            try:
                loop.add_reader(fd, _settle, done)
            except (OSError, ValueError, NotImplementedError):
                os.close(fd)
                continue
            watched.append((fd, done))
        if watched:
            await asyncio.wait([done for _, done in watched], timeout=timeout)
    finally:
        for fd, done in watched:
            loop.remove_reader(fd)
            done.cancel()
            with contextlib.suppress(OSError):
                os.close(fd)


def _settle(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)
