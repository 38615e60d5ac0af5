"""A watchdog for an event loop that stops answering, and the record of which tool call runs.

An async tool that computes (or calls blocking code) without awaiting holds the event loop: every
other request — ``/healthz`` included — waits until it yields. Python cannot interrupt it; what
the gateway can do is notice, say which call did it, and count it.

* :class:`LoopWatchdog` is a daemon thread that posts a heartbeat onto the loop every
  ``interval`` seconds. When a heartbeat has waited longer than ``threshold``, it logs one
  warning naming the tool call running on the loop at that moment and counts it in
  :data:`LOOP_STALLS`; when the loop answers again it logs how long it was blocked. It costs the
  loop one callback per interval.
* The call is found without recording anything per call: the watchdog reads the loop thread's
  stack (``sys._current_frames``, as a debugger does) for the innermost frame of a function
  registered with :func:`watch_call_frames` (the Execute stage's), and takes the call from its
  locals.

``toolgate serve`` runs one (``serve.loop_blocked_after`` in toolgate.yaml); Python API users who
run their own loop start one with ``async with LoopWatchdog():``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import CodeType, FrameType, TracebackType
from typing import Final, Protocol

__all__ = [
    "DEFAULT_BLOCKED_AFTER",
    "LOOP_STALLS",
    "LoopStalls",
    "LoopWatchdog",
    "RunningCall",
    "watch_call_frames",
]

log = logging.getLogger("toolgate.loop")

#: Seconds the loop may go without answering before the watchdog reports it.
DEFAULT_BLOCKED_AFTER: Final = 1.0
#: The tool label of a stall during which no tool call was running on the loop.
NO_TOOL: Final = "(none)"


class _Tool(Protocol):
    @property
    def id(self) -> str: ...


class RunningCall(Protocol):
    """What the watchdog reads of a running call (the pipeline's ``CallState``)."""

    @property
    def call_id(self) -> str: ...

    @property
    def tool(self) -> _Tool: ...


#: The code of the functions that run one tool call → the name of their local holding it.
_CALL_FRAMES: dict[CodeType, str] = {}


def watch_call_frames(function: Callable[..., object], local: str) -> None:
    """Tell the watchdog that a frame of ``function`` runs the call held in its local ``local``
    (a :class:`RunningCall`)."""
    _CALL_FRAMES[function.__code__] = local


def _running_call(thread: int) -> RunningCall | None:
    """The call whose frame is innermost on the stack of ``thread`` right now, if any."""
    frame: FrameType | None = sys._current_frames().get(thread)
    while frame is not None:
        local = _CALL_FRAMES.get(frame.f_code)
        if local is not None:
            call: RunningCall | None = frame.f_locals.get(local)
            if call is not None:
                return call
        frame = frame.f_back
    return None


@dataclass
class _Counts:
    stalls: int = 0
    seconds: float = 0.0


class LoopStalls:
    """How often, and how long, event loops of this process were blocked, by the tool that was
    running (:data:`NO_TOOL` when none was). Read by ``/metrics``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, _Counts] = {}

    def stalled(self, tool: str) -> None:
        """Count one stall while ``tool`` ran."""
        with self._lock:
            self._counts.setdefault(tool, _Counts()).stalls += 1

    def recovered(self, tool: str, seconds: float) -> None:
        """Add the ``seconds`` a counted stall lasted."""
        with self._lock:
            self._counts.setdefault(tool, _Counts()).seconds += seconds

    def snapshot(self) -> dict[str, tuple[int, float]]:
        """Per tool: the stalls counted and the seconds they lasted (those that ended)."""
        with self._lock:
            return {tool: (c.stalls, c.seconds) for tool, c in self._counts.items()}


#: The stalls of this process's loops (the default of every :class:`LoopWatchdog`).
LOOP_STALLS: Final = LoopStalls()


def _running_on(thread: int | None) -> tuple[str, str | None]:
    """The tool id and call id of the call running on the loop's ``thread`` right now."""
    call = None if thread is None else _running_call(thread)
    if call is None:
        return NO_TOOL, None
    return call.tool.id, call.call_id


class LoopWatchdog:
    """Reports an event loop that has not answered for more than ``threshold`` seconds.

    Start it on the loop to watch (``start()`` from inside it, or ``start(loop)`` from anywhere)
    and stop it with :meth:`stop`; or use it as an async context manager inside the loop::

        async with LoopWatchdog(threshold=0.5):
            await serve_forever()
    """

    def __init__(
        self,
        threshold: float = DEFAULT_BLOCKED_AFTER,
        *,
        interval: float | None = None,
        stalls: LoopStalls = LOOP_STALLS,
        setting: str | None = None,
    ) -> None:
        """
        Args:
            threshold: Seconds without an answer from the loop before a stall is reported.
            interval: Seconds between heartbeats (default: a quarter of ``threshold``, at most
                0.25 s): how late past the threshold a stall may be noticed.
            stalls: Where stalls are counted (default: the process-wide :data:`LOOP_STALLS`).
            setting: The setting that changes ``threshold``, named in the warning.
        """
        if threshold <= 0:
            raise ValueError("threshold must be positive")
        self.threshold = threshold
        self.interval = interval if interval is not None else min(0.25, threshold / 4)
        self.stalls = stalls
        self.setting = setting
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether the watchdog's thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Watch ``loop`` (default: the running loop) from a daemon thread."""
        if self._thread is not None:
            raise RuntimeError("this watchdog already runs")
        watched = asyncio.get_running_loop() if loop is None else loop
        # The loop's thread, whose stack names the blocking call: this one when started from
        # inside the loop, else the first heartbeat tells it.
        thread = threading.get_ident() if loop is None else None
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._watch,
            args=(watched, thread),
            name="toolgate-loop-watchdog",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and join the thread (idempotent)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=5)

    async def __aenter__(self) -> LoopWatchdog:
        self.start()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _watch(self, loop: asyncio.AbstractEventLoop, known: int | None) -> None:
        answered: list[float] = []  # appended by the heartbeat, on the loop
        thread: list[int] = [] if known is None else [known]

        def beat() -> None:
            answered.append(time.monotonic())
            if not thread:
                thread.append(threading.get_ident())

        sent: float | None = None
        stalled: str | None = None  # the tool a reported stall is counted under
        while not self._stop.wait(self.interval):
            if sent is not None and answered:
                if stalled is not None:
                    seconds = answered[-1] - sent
                    self.stalls.recovered(stalled, seconds)
                    log.info("the event loop answered again after %.1f s", seconds)
                    stalled = None
                sent = None
            if sent is None:
                answered.clear()
                try:
                    loop.call_soon_threadsafe(beat)
                except RuntimeError:
                    return  # the loop is closed: nothing left to watch
                sent = time.monotonic()
                continue
            waited = time.monotonic() - sent
            if stalled is None and waited > self.threshold:
                stalled = self._report(thread[0] if thread else None, waited)

    def _report(self, thread: int | None, waited: float) -> str:
        tool, call = _running_on(thread)
        self.stalls.stalled(tool)
        where = f" ({self.setting})" if self.setting else ""
        if call is None:
            log.warning(
                "the event loop has not answered for %.1f s (more than %g s%s); no tool call was "
                "running on it: every request waits meanwhile",
                waited,
                self.threshold,
                where,
            )
        else:
            log.warning(
                "the event loop has not answered for %.1f s (more than %g s%s): tool %s (call "
                "%s) runs on it without awaiting, and every request waits meanwhile. Make the "
                'tool await, run it off the loop (@tool(run_in="thread")), or move it to a tool '
                "folder script",
                waited,
                self.threshold,
                where,
                tool,
                call,
            )
        return tool
