"""Pre-started processes for script tools: the process start is paid before the call arrives.

A tool-folder script reads one JSON object on stdin and exits. Starting its interpreter (and its
imports) is most of a call's cost — about 25 ms for python3 and 50 ms for node — so for a tool
that asks for it (``prestart: true``, or the operator's ``processes.prestart``) the gateway keeps
a few processes of it started with their stdin open. A call takes one, writes its input and runs
it exactly like a fresh process (:meth:`~toolgate.backends.processes.StartedProcess.run`: the
same timeout, output caps and process-tree kill). **A process serves one call**: it is never
given a second input, so nothing leaks from one call to the next.

Processes are kept per :class:`PoolKey` — the tool, its command line, its environment and its
working directory, which the format fixes per call — so a call only ever gets a process started
exactly as a fresh one would be. After each call the pool is refilled in the background, up to
:attr:`PrestartSettings.per_tool` processes per key and :attr:`PrestartSettings.total` in all;
a process unused for :attr:`PrestartSettings.idle_timeout` seconds is killed. A process found
dead when a call wants it is thrown away and the call gets another (or a fresh one); a key whose
processes keep dying before their input arrives is no longer pre-started.

The trade-off, and why it is opt-in: a script that does work *before* it reads stdin does that
work early, once per process, even if no call ever comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ToolError
from ..model import Tool
from .processes import ProcessStartError, StartedProcess, spawn_process

#: Starts one process of a key (default: :func:`spawn_process` of the key's command); a warm
#: sandbox's starter prepares the sandbox first and attaches its release to the process.
Starter = Callable[[], Awaitable[StartedProcess]]

__all__ = ["PoolKey", "PrestartPool", "PrestartSettings"]

_log = logging.getLogger("toolgate.processes")

#: Processes of one key that may die while waiting, in a row, before the key is given up.
MAX_DEATHS_IN_A_ROW = 3


@dataclass(frozen=True, slots=True)
class PrestartSettings:
    """Which script tools keep processes started ahead of calls, and how many."""

    enabled: bool = True
    """``False``: no tool is pre-started, not even those that declare ``prestart: true``."""
    tools: frozenset[str] = frozenset()
    """The operator's opt-in besides the tools' own: tool ids, ``namespace:*``, or ``*``."""
    per_tool: int = 2
    """Processes kept ready per tool (and working directory and environment)."""
    total: int = 16
    """Processes kept ready in all."""
    idle_timeout: float = 60.0
    """Seconds a ready process may wait for a call before it is killed."""
    fast_exit: bool = True
    """python3 and node processes end without their interpreter's teardown, through a shim
    that reports the exit code once it is final (:mod:`~toolgate.backends.fast_exit`)."""

    def wants(self, tool_id: str, *, declared: bool) -> bool:
        """Whether calls of ``tool_id`` (which asks for it when ``declared``) get one."""
        if not self.enabled or self.per_tool < 1 or self.total < 1:
            return False
        if declared or "*" in self.tools or tool_id in self.tools:
            return True
        namespace = tool_id.rpartition(":")[0]
        return f"{namespace}:*" in self.tools


@dataclass(frozen=True, slots=True)
class PoolKey:
    """What makes two processes interchangeable: the same program, started the same way."""

    tool_id: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str
    definition: str = ""
    """The tool's definition hash (its code's digest included): an edited tool never gets a
    process started for its old definition."""
    where: str = "host"
    """``host``, or ``sandbox`` for a warm sandbox: the two are never interchanged."""
    pass_fds: tuple[int, ...] = ()
    """Descriptors the process inherits (what its bubblewrap binds with ``--ro-bind-fd``); the
    key's owner keeps them open as long as a process may be started from the key."""
    status: bool = False
    """Whether the process gets a status pipe (its command runs through a shim of
    :mod:`~toolgate.backends.fast_exit`)."""

    @classmethod
    def of(
        cls,
        tool: Tool,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        *,
        where: str = "host",
        status: bool = False,
    ) -> PoolKey:
        """The key of a process of ``tool`` started with ``argv``, ``env`` and ``cwd``."""
        return cls(
            tool.id,
            tuple(argv),
            tuple(sorted(env.items())),
            str(cwd),
            tool.definition_hash,
            where,
            status=status,
        )


@dataclass(slots=True)
class _Ready:
    process: StartedProcess
    since: float


@dataclass(slots=True)
class _Slot:
    """The processes of one key: ready ones, ones being started, and its deaths in a row."""

    ready: deque[_Ready] = field(default_factory=deque)
    starting: int = 0
    calls: int = 0
    """Calls of the key running now (between :meth:`PrestartPool.take` and ``replenish``)."""
    starter: Starter | None = None
    deaths: int = 0
    given_up: bool = False


class PrestartPool:
    """Ready processes by :class:`PoolKey`, in one event loop (processes belong to a loop)."""

    def __init__(self, settings: PrestartSettings) -> None:
        self.settings = settings
        self._slots: dict[PoolKey, _Slot] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False
        self._discarded: list[StartedProcess] = []

    def take(self, key: PoolKey) -> StartedProcess | None:
        """A live ready process for ``key`` (``None``: none is ready; start one as usual).

        Call :meth:`replenish` once the call is done: starting a process blocks the event loop
        for a few milliseconds, which the call itself should not wait for.
        """
        slot = self._slots.setdefault(key, _Slot())
        slot.calls += 1
        process: StartedProcess | None = None
        while slot.ready:
            entry = slot.ready.popleft()
            if not entry.process.exited:
                process = entry.process
                slot.deaths = 0
                break
            # It ended while waiting (killed, crashed, or a script that does not wait for its
            # input): never hand it to a call.
            self._discard(entry.process)
            self._note_death(key, slot)
        return process

    def _note_death(self, key: PoolKey, slot: _Slot) -> None:
        slot.deaths += 1
        if slot.deaths >= MAX_DEATHS_IN_A_ROW and not slot.given_up:
            slot.given_up = True
            _log.warning(
                "%s: its pre-started processes end or fail before their input arrives (%d in a "
                "row); it is no longer pre-started",
                key.tool_id,
                slot.deaths,
            )

    def replenish(self, key: PoolKey, starter: Starter | None = None) -> None:
        """The call that :meth:`take` was asked for is done: once no call of ``key`` runs any
        more, top its processes up again in the background, with ``starter`` (default: start
        the key's command). (Not while a burst runs: new processes would compete with its calls
        for the CPU.)"""
        slot = self._slots.setdefault(key, _Slot())
        slot.calls = max(0, slot.calls - 1)
        slot.starter = starter or slot.starter
        if slot.calls == 0:
            self._refill(key, slot)

    def fill(self, key: PoolKey, starter: Starter | None = None) -> None:
        """Start processes for ``key`` up to the settings now (before any call)."""
        slot = self._slots.setdefault(key, _Slot())
        slot.starter = starter or slot.starter
        self._refill(key, slot)

    def release_later(self, process: StartedProcess) -> None:
        """Undo what was prepared for a process a call has used, in the background (and before
        :meth:`aclose` returns)."""
        task = asyncio.get_running_loop().create_task(process.release())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _discard(self, process: StartedProcess) -> None:
        process.discard()
        # Kept only until it is reaped (aclose waits for those), so the list stays small.
        self._discarded = [p for p in self._discarded if not p.exited]
        self._discarded.append(process)
        if process.setup is not None and not self._closed:
            # What was prepared for it (a warm sandbox) is undone in the background.
            with contextlib.suppress(RuntimeError):  # no running loop: aclose() does it
                task = asyncio.get_running_loop().create_task(process.release())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    def ready_count(self, tool_id: str | None = None) -> int:
        """How many processes are ready (of ``tool_id``, or in all)."""
        return sum(
            len(slot.ready)
            for key, slot in self._slots.items()
            if tool_id is None or key.tool_id == tool_id
        )

    async def settled(self, timeout: float = 10.0) -> bool:
        """Wait until no process is being started any more (``False``: not within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while any(slot.starting for slot in self._slots.values()):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.005)
        return True

    def close(self) -> None:
        """Kill every ready process; processes still starting are killed when they are up.

        Safe to call from another thread than the pool's event loop (a gateway is closed from
        wherever its owner is): it only sends signals and closes file descriptors.
        """
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for slot in list(self._slots.values()):
            while slot.ready:
                process = slot.ready.popleft().process
                process.discard()
                self._discarded.append(process)

    async def aclose(self) -> None:
        """:meth:`close`, then wait until the killed processes are reaped (so nothing is left
        for an event loop about to close)."""
        self.close()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        discarded, self._discarded = self._discarded, []
        await asyncio.gather(*(process.wait_exited() for process in discarded))
        await asyncio.gather(*(process.release() for process in discarded), return_exceptions=True)

    # -- refilling --------------------------------------------------------------------------------

    def _in_pool(self) -> int:
        return sum(len(slot.ready) + slot.starting for slot in self._slots.values())

    def _refill(self, key: PoolKey, slot: _Slot) -> None:
        if self._closed or slot.given_up:
            return
        wanted = self.settings.per_tool - len(slot.ready) - slot.starting
        room = self.settings.total - self._in_pool()
        if wanted > 0 and room < wanted:
            room += self._evict(wanted - room, keep=slot)
        for _ in range(max(0, min(wanted, room))):
            slot.starting += 1
            task = asyncio.get_running_loop().create_task(self._start(key, slot))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start(self, key: PoolKey, slot: _Slot) -> None:
        try:
            if slot.starter is not None:
                process = await slot.starter()
            else:
                process = await spawn_process(
                    key.argv, env=dict(key.env), cwd=Path(key.cwd), status=key.status
                )
        except (ProcessStartError, ToolError, OSError) as exc:
            # The call that wanted it starts its own process and reports the error itself; a
            # tool that keeps failing to start is no longer pre-started.
            _log.debug("%s: could not pre-start a process: %s", key.tool_id, exc)
            self._note_death(key, slot)
            return
        finally:
            slot.starting -= 1
        if self._closed:
            self._discard(process)
            return
        slot.ready.append(_Ready(process, time.monotonic()))
        self._schedule_sweep()

    def _evict(self, count: int, *, keep: _Slot) -> int:
        """Make room for a key in use: stop up to ``count`` of the oldest ready processes of
        other keys (a one-off workspace's, say). Returns how many were stopped."""
        candidates = sorted(
            (slot.ready[0].since, id(slot), slot)
            for slot in self._slots.values()
            if slot is not keep and slot.ready
        )
        stopped = 0
        for _, _, slot in candidates:
            while slot.ready and stopped < count:
                self._discard(slot.ready.popleft().process)
                stopped += 1
            if stopped >= count:
                break
        return stopped

    # -- idle expiry ------------------------------------------------------------------------------

    def _schedule_sweep(self) -> None:
        if self._sweep is None and not self._closed:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(self.settings.idle_timeout, self._expire)

    def _expire(self) -> None:
        self._sweep = None
        now = time.monotonic()
        cutoff = now - self.settings.idle_timeout
        oldest: float | None = None
        for key, slot in list(self._slots.items()):
            while slot.ready and slot.ready[0].since <= cutoff:
                self._discard(slot.ready.popleft().process)
            if not slot.ready and not slot.starting and not slot.calls and not slot.given_up:
                del self._slots[key]  # a key not in use any more (a one-off workspace)
            if slot.ready:
                since = slot.ready[0].since
                oldest = since if oldest is None else min(oldest, since)
        if oldest is not None and not self._closed:
            delay = oldest + self.settings.idle_timeout - now
            self._sweep = asyncio.get_running_loop().call_later(max(delay, 0.01), self._expire)
