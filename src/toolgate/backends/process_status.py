"""The status pipe of a program run through a fast-exit shim: one line with its exit code.

See :mod:`toolgate.backends.processes` ("The status pipe") for how the runner uses it and
:mod:`toolgate.backends.fast_exit` for the shims that write it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import weakref
from collections.abc import Callable

__all__ = ["STATUS_ENV", "StatusPipe", "reap_later", "reap_pending"]

#: The variable that names the status pipe's descriptor to a program started with ``status``.
STATUS_ENV = "TOOLGATE_STATUS_FD"

#: A status line: an exit code of at most three digits and a newline.
_STATUS_MAX = 4
_STATUS_CODE = re.compile(rb"[0-9]{1,3}")

# Exit futures of programs that reported their status and were killed but not reaped yet, per
# event loop: :func:`reap_pending` waits for them (a gateway does before its loop closes).
_PENDING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[asyncio.Future[int]]] = (
    weakref.WeakKeyDictionary()
)


def reap_later(loop: asyncio.AbstractEventLoop, exit: asyncio.Future[int]) -> None:
    """Count a killed program's exit among those :func:`reap_pending` waits for."""
    if not exit.done():
        pending = _PENDING.setdefault(loop, set())
        pending.add(exit)
        exit.add_done_callback(pending.discard)


async def reap_pending(timeout: float = 1.0) -> None:
    """Wait (at most ``timeout`` seconds) until the programs of the running event loop that
    were answered from their status pipe, and killed, have also been reaped."""
    pending = _PENDING.get(asyncio.get_running_loop())
    if pending:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), timeout)


class StatusPipe:
    """The runner's end of one program's status pipe, read on the event loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, on_report: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._fd = fd
        self._on_report = on_report
        self._data = bytearray()
        self._reading = False
        self.reported: int | None = None
        """The exit code the program reported (``None``: none yet, or not a valid line)."""

    def start(self) -> None:
        """Read the pipe from now on (the call has begun)."""
        os.set_blocking(self._fd, False)
        self._loop.add_reader(self._fd, self._on_readable)
        self._reading = True

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, _STATUS_MAX + 1 - len(self._data))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self._data += data
        line, newline, _ = self._data.partition(b"\n")
        if data and not newline and len(self._data) <= _STATUS_MAX:
            return  # the rest of the line is on its way
        # The first line, once: one that is not an exit code is ignored, and the exit status
        # comes from the process itself. The pipe stays open (a shim waits on it, alive, for
        # the tree's kill) until :meth:`close`.
        self._stop_reading()
        if newline and _STATUS_CODE.fullmatch(line):
            # Taken even when the exit is already known: a shim that reported ends by a signal
            # (the tree's kill, or its own), so the reported code is the script's.
            self.reported = int(line) & 0xFF
            self._on_report()

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def close(self) -> None:
        """Stop reading and close the pipe (after the tree's kill: a shim waiting on it ends)."""
        if self._fd >= 0:
            self._stop_reading()
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
