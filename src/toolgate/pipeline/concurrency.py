"""The Concurrency stage: how many calls of one tool run at once, and how many may wait.

Every tool has its own slots (``running``) and its own bounded queue (``waiting``): a flood of
calls to one slow tool fills that tool's slots and queue, and nothing else, so calls to the other
tools go on as if nothing happened. A call that finds the queue full ends at once with ``busy``;
a call that waits in the queue longer than the tool's timeout ends ``busy`` too (the tool did not
run); a waiting call that is cancelled (its caller went away) leaves the queue.

Defaults: 16 running, 64 waiting per tool. 16 is the most a single tool may occupy of the
machine's threads or processes before queueing — enough for the parallelism one tool needs on a
typical gateway (a handful of cores; I/O-bound tools rarely gain past a dozen calls at once), and
small enough that a flood of one tool costs a bounded number of threads (sync Python tools each
get their own, see :mod:`toolgate.backends.python`) or processes. 64 waiting absorbs a burst of
four times that without refusing anything, while a real flood is refused at once instead of
building a queue no caller would wait through.

The stage is the last before Execute: a call waiting for a person's approval, or refused by a
rate limit, never holds a slot. Slots are shared by every event loop and thread of the gateway
(the async API, ``call_sync``'s private loop, ``call_sync``'s inline calls), so the counts are
guarded by a lock: uncontended it costs a fraction of a microsecond, the only price a call pays
while its tool is below its limit.
"""

from __future__ import annotations

import asyncio
import fnmatch
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import ErrorCode
from ..model import CallOutcome, ImplementationKind, Tool
from ..registry import RegisteredTool
from .state import CallState, Handler, error_outcome

__all__ = [
    "DEFAULT_RUNNING",
    "DEFAULT_WAITING",
    "ConcurrencyLimit",
    "ConcurrencySettings",
    "ConcurrencyStage",
    "ToolLoad",
    "ToolSlots",
]

#: Calls of one tool that may run at once, unless configured otherwise.
DEFAULT_RUNNING = 16
#: Calls of one tool that may wait for a free slot, unless configured otherwise.
DEFAULT_WAITING = 64

#: Why a call got no slot: the queue was full when it came.
FULL = "full"
#: Why a call got no slot: it waited in the queue as long as the tool's timeout.
EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """The limits of a tool (or of the tools a pattern selects); ``None``: inherited from the
    default."""

    running: int | None = None
    """Calls that may run at once (at least 1)."""
    waiting: int | None = None
    """Calls that may wait for a free slot (0: none wait, a call beyond ``running`` is refused)."""

    def __post_init__(self) -> None:
        if self.running is not None and self.running < 1:
            raise ValueError(f"running must be at least 1, not {self.running}")
        if self.waiting is not None and self.waiting < 0:
            raise ValueError(f"waiting must be at least 0, not {self.waiting}")


@dataclass(frozen=True, slots=True)
class ConcurrencySettings:
    """Which limits apply to which tool.

    ``tools`` maps tool ids (``inventory:lookup``) and namespace patterns (``inventory:*``) to
    limits; a tool's own id wins over its namespace's pattern, which wins over ``default``.
    ``scripts_running`` is the older ``scripts.concurrency`` setting: the running limit of
    script tools that no entry of ``tools`` names (``None``: ``default.running``).
    """

    default: ConcurrencyLimit = field(default_factory=ConcurrencyLimit)
    tools: Mapping[str, ConcurrencyLimit] = field(default_factory=dict)
    scripts_running: int | None = None

    def limits_for(self, tool: Tool) -> tuple[int, int]:
        """``(running, waiting)`` of ``tool``."""
        running = self.default.running or DEFAULT_RUNNING
        waiting = DEFAULT_WAITING if self.default.waiting is None else self.default.waiting
        if self.scripts_running is not None and tool.kind is ImplementationKind.SCRIPT:
            running = self.scripts_running
        found = self._matches(tool.id)
        for limit in found:  # the namespace's pattern first, then the tool's own entry
            if limit.running is not None:
                running = limit.running
            if limit.waiting is not None:
                waiting = limit.waiting
        return running, waiting

    def _matches(self, tool_id: str) -> list[ConcurrencyLimit]:
        own = self.tools.get(tool_id)
        patterns = [
            limit
            for pattern, limit in self.tools.items()
            if pattern != tool_id and "*" in pattern and fnmatch.fnmatchcase(tool_id, pattern)
        ]
        return [*patterns, *(() if own is None else (own,))]


@dataclass(frozen=True, slots=True)
class ToolLoad:
    """What a tool's slots hold now, for health and metrics."""

    running: int
    """Calls running now (a sync Python call that timed out counts until its thread returns)."""
    waiting: int
    """Calls waiting for a slot."""
    running_limit: int
    waiting_limit: int
    busy: int
    """Calls refused with ``busy`` since the gateway started."""

    def to_dict(self) -> dict[str, int]:
        """JSON-ready."""
        return {
            "running": self.running,
            "waiting": self.waiting,
            "runningLimit": self.running_limit,
            "waitingLimit": self.waiting_limit,
            "busy": self.busy,
        }


class _Waiter:
    """One call waiting for a slot: a future on its loop, or an event for an inline call."""

    __slots__ = ("event", "future", "granted", "loop")

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None, future: asyncio.Future[bool] | None
    ) -> None:
        self.loop = loop
        self.future = future
        self.event = threading.Event() if future is None else None
        self.granted = False
        """Set under the lock when a released slot is handed to this waiter."""

    def wake(self) -> bool:
        """Tell the waiter it holds a slot; ``False`` when it never can learn it (its loop is
        closed)."""
        if self.event is not None:
            self.event.set()
            return True
        assert self.loop is not None and self.future is not None
        try:
            same_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            _grant(self.future)
            return True
        try:
            self.loop.call_soon_threadsafe(_grant, self.future)
        except RuntimeError:  # closed
            return False
        return True


def _grant(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(True)


class ToolSlots:
    """The running calls and the queue of one tool, shared by every loop and thread."""

    __slots__ = ("_lock", "_waiters", "active", "busy", "running_limit", "tool_id", "waiting_limit")

    def __init__(self, tool_id: str, running: int, waiting: int) -> None:
        self.tool_id = tool_id
        self.running_limit = running
        self.waiting_limit = waiting
        self.active = 0
        """Slots taken (may pass the limit briefly when it was lowered, or while a timed-out
        thread is adopted, see :meth:`hold`)."""
        self.busy = 0
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    def load(self) -> ToolLoad:
        """The counts now."""
        with self._lock:
            return ToolLoad(
                self.active, len(self._waiters), self.running_limit, self.waiting_limit, self.busy
            )

    def set_limits(self, running: int, waiting: int) -> None:
        """New limits (the tool was declared again): a raised running limit admits as many
        waiting calls as it now has room for, at once."""
        with self._lock:
            self.running_limit, self.waiting_limit = running, waiting
        while True:
            with self._lock:
                if not self._waiters or self.active >= self.running_limit:
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True
                self.active += 1
            if not waiter.wake():
                self.release()  # its loop is closed: pass the slot on

    def try_acquire(self) -> bool:
        """Take a free slot if there is one and nobody waits before us."""
        with self._lock:
            if self.active < self.running_limit and not self._waiters:
                self.active += 1
                return True
            return False

    def hold(self) -> None:
        """Take one more slot whatever the limit: a call whose work goes on after it ended (a
        sync Python function that overran its timeout) keeps its place until that work returns;
        :meth:`release` it then."""
        with self._lock:
            self.active += 1

    def release(self) -> None:
        """Give a slot back: to the first waiter, or to the pool."""
        while True:
            with self._lock:
                if not self._waiters or self.active > self.running_limit:
                    self.active -= 1
                    return
                waiter = self._waiters.popleft()
                waiter.granted = True  # the slot passes to it: ``active`` does not change
            if waiter.wake():
                return
            # Its event loop is closed: nobody will take the slot there, pass it on.

    def _enqueue(self, waiter: _Waiter) -> bool:
        """Queue ``waiter``; ``False`` when the queue is full (counted as a busy refusal). A slot
        that freed meanwhile is taken at once (``granted``)."""
        with self._lock:
            if self.active < self.running_limit and not self._waiters:
                self.active += 1
                waiter.granted = True
                return True
            if len(self._waiters) >= self.waiting_limit:
                self.busy += 1
                return False
            self._waiters.append(waiter)
            return True

    def _leave(self, waiter: _Waiter, *, expired: bool) -> bool:
        """The waiter gives up (timeout or cancellation). Returns whether it held a slot after
        all (handed to it meanwhile), which the caller then owns."""
        with self._lock:
            if waiter.granted:
                return True
            self._waiters.remove(waiter)
            if expired:
                self.busy += 1
            return False

    async def acquire(self, timeout: float) -> str | None:
        """Wait up to ``timeout`` seconds for a slot: ``None`` once it is taken, else why not
        (:data:`FULL`, :data:`EXPIRED`). Cancellation leaves the queue (a slot handed over
        meanwhile is passed on)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop, loop.create_future())
        if not self._enqueue(waiter):
            return FULL
        if waiter.granted:
            return None
        future = waiter.future
        assert future is not None
        timer = loop.call_later(timeout, _expire, future)
        try:
            await future
        except asyncio.CancelledError:
            if self._leave(waiter, expired=False):
                self.release()
            raise
        finally:
            timer.cancel()
        return None if waiter.granted or self._leave(waiter, expired=True) else EXPIRED

    def acquire_blocking(self, timeout: float) -> str | None:
        """:meth:`acquire` for an inline call (``call_sync`` without a loop): blocks the calling
        thread, which is the caller's own."""
        waiter = _Waiter(None, None)
        if not self._enqueue(waiter):
            return FULL
        if waiter.granted:
            return None
        assert waiter.event is not None
        waiter.event.wait(timeout)
        return None if waiter.granted or self._leave(waiter, expired=True) else EXPIRED


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)  # the waiter checks ``granted`` under the lock


class ConcurrencyStage:
    """Holds a slot of the tool while the call runs; queues or refuses (``busy``) beyond."""

    name = "concurrency"
    suspends = False  # an inline call waits by blocking its own thread: call_sync stays inline

    def __init__(self, settings: ConcurrencySettings | None = None) -> None:
        self.settings = settings or ConcurrencySettings()
        self._slots: dict[str, ToolSlots] = {}
        self._lock = threading.Lock()

    def applies_to(self, entry: RegisteredTool) -> bool:
        # Called once per registration: a tool declared again gets its (new) limits here, and
        # keeps the calls already counted.
        running, waiting = self.settings.limits_for(entry.tool)
        self.slots(entry.tool).set_limits(running, waiting)
        return True

    def slots(self, tool: Tool) -> ToolSlots:
        """The slots of ``tool`` (created on first use)."""
        slots = self._slots.get(tool.id)
        if slots is None:
            with self._lock:
                slots = self._slots.get(tool.id)
                if slots is None:
                    running, waiting = self.settings.limits_for(tool)
                    slots = self._slots[tool.id] = ToolSlots(tool.id, running, waiting)
        return slots

    def load(self, tool_id: str) -> ToolLoad | None:
        """The running and waiting calls of a tool (``None``: it was never called)."""
        slots = self._slots.get(tool_id)
        return None if slots is None else slots.load()

    def loads(self) -> dict[str, tuple[int, int, int]]:
        """Per tool that was called: ``(running, waiting, busy)`` now (for metrics)."""
        with self._lock:
            every = list(self._slots.values())
        found = {}
        for slots in every:
            load = slots.load()
            found[slots.tool_id] = (load.running, load.waiting, load.busy)
        return found

    def hold(self, tool_id: str) -> ToolSlots | None:
        """Keep one more slot of ``tool_id`` taken until the returned slots are released (see
        :meth:`ToolSlots.hold`)."""
        slots = self._slots.get(tool_id)
        if slots is not None:
            slots.hold()
        return slots

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        tool = state.tool
        slots = self._slots.get(tool.id) or self.slots(tool)
        # The fast path, inlined (this runs on every call): a free slot and nobody waiting.
        with slots._lock:
            free = slots.active < slots.running_limit and not slots._waiters
            if free:
                slots.active += 1
        if not free:
            refused = (
                slots.acquire_blocking(tool.timeout)
                if state.inline
                else await slots.acquire(tool.timeout)
            )
            if refused is not None:
                return _busy(state, slots, refused)
        try:
            return await proceed(state)
        finally:
            slots.release()


def _busy(state: CallState, slots: ToolSlots, why: str) -> CallOutcome:
    running, waiting = slots.running_limit, slots.waiting_limit
    state.metadata["concurrency"] = {"running": running, "waiting": waiting, "refused": why}
    state.refused_before_run = True
    plural = "s" if running != 1 else ""
    limits = f"it runs at most {running} call{plural} at once and {waiting} may wait"
    if why == EXPIRED:
        what = f"this call waited {state.tool.timeout:g} s (the tool's timeout) and no slot freed"
    else:
        what = "that many calls are running and waiting now"
    return error_outcome(
        state,
        ErrorCode.BUSY,
        f"Tool {state.tool.id} is busy: {limits}, and {what}. It did not run; retry later.",
    )
