"""Batch timing: warm up, size the batches, time them with the GC off, summarize.

Each sample is one batch: ``batch time / batch size``, i.e. the mean cost of one call in that
batch, in nanoseconds. The report's median and p95 are taken over these per-batch figures, so the
p95 describes how noisy whole batches were, not the tail of single calls.

Awaited calls are timed inside the running event loop, and each batch ends with one
``await asyncio.sleep(0)`` so that the loop gets one turn per batch (≤ 0.1 µs per call here).

Calls that take milliseconds (script tools: one child process per call) are not batched:
:func:`time_each_async` times every call on its own, so each sample is one call (or, for a burst
of concurrent calls, the wall time of the whole burst), and a fixed number of samples is taken per
round instead of filling a time budget.
"""

from __future__ import annotations

import asyncio
import gc
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import repeat
from time import perf_counter_ns
from typing import Any

__all__ = ["Budget", "Samples", "Summary", "percentile", "summarize", "time_each_async"]


@dataclass
class Samples:
    """Per-call nanoseconds, one figure per timed batch, plus how they were taken."""

    per_call_ns: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)

    def extend(self, other: Samples) -> None:
        self.per_call_ns.extend(other.per_call_ns)
        self.batch_sizes.extend(other.batch_sizes)

    @property
    def calls(self) -> int:
        return sum(self.batch_sizes)


@dataclass(frozen=True)
class Budget:
    """How long one scenario may time in one round, and how that time is split into batches."""

    round_ns: int
    """Time for the timed batches of one round (the warm-up comes on top)."""
    batches: int = 20
    """Batches per round at least; the batch size is chosen so that they fill ``round_ns``.
    Fast calls hit ``max_batch`` first and then get more batches, until ``round_ns`` is spent."""
    max_batches: int = 400
    min_batch: int = 10
    max_batch: int = 1000
    warmup_ns: int = 30_000_000
    min_warmup_calls: int = 10

    def batch_size(self, per_call_ns: float) -> int:
        target = self.round_ns / self.batches
        return max(self.min_batch, min(self.max_batch, int(target / max(per_call_ns, 1.0))))

    # -- synchronous calls ----------------------------------------------------------------------

    def measure(self, call: Callable[[], Any]) -> Samples:
        """Warm up ``call``, then time batches of it in a plain ``for`` loop."""
        self._warm(call)
        gc.collect()
        size = self.batch_size(self._pilot(call))
        samples = Samples()
        first = perf_counter_ns()
        deadline, give_up = first + self.round_ns, first + 2 * self.round_ns
        while len(samples.per_call_ns) < self.max_batches:
            gc.disable()
            try:
                start = perf_counter_ns()
                for _ in repeat(None, size):
                    call()
                end = perf_counter_ns()
            finally:
                gc.enable()
            samples.per_call_ns.append((end - start) / size)
            samples.batch_sizes.append(size)
            if end >= deadline and len(samples.per_call_ns) >= self.batches:
                break
            if end > give_up:  # a much slower machine than the pilot suggested: stop early
                break
        return samples

    def _warm(self, call: Callable[[], Any]) -> None:
        start = perf_counter_ns()
        deadline = start + self.warmup_ns
        calls = 0
        while calls < self.min_warmup_calls or perf_counter_ns() < deadline:
            call()
            calls += 1

    @staticmethod
    def _pilot(call: Callable[[], Any], calls: int = 10) -> float:
        start = perf_counter_ns()
        for _ in repeat(None, calls):
            call()
        return (perf_counter_ns() - start) / calls

    # -- awaited calls (inside the running event loop) ------------------------------------------

    async def measure_async(self, call: Callable[[], Awaitable[Any]]) -> Samples:
        """Like :meth:`measure`, for ``await call()``, timed inside the already running loop."""
        await self._warm_async(call)
        gc.collect()
        size = self.batch_size(await self._pilot_async(call))
        samples = Samples()
        first = perf_counter_ns()
        deadline, give_up = first + self.round_ns, first + 2 * self.round_ns
        while len(samples.per_call_ns) < self.max_batches:
            gc.disable()
            try:
                start = perf_counter_ns()
                for _ in repeat(None, size):
                    await call()
                # One pass of the event loop per batch, inside the timed region, as in an
                # application: the loop's housekeeping (e.g. dropping cancelled timer handles
                # left by calls that never suspended) is then paid by the calls that caused it.
                await asyncio.sleep(0)
                end = perf_counter_ns()
            finally:
                gc.enable()
            samples.per_call_ns.append((end - start) / size)
            samples.batch_sizes.append(size)
            if end >= deadline and len(samples.per_call_ns) >= self.batches:
                break
            if end > give_up:
                break
        return samples

    async def _warm_async(self, call: Callable[[], Awaitable[Any]]) -> None:
        start = perf_counter_ns()
        deadline = start + self.warmup_ns
        calls = 0
        while calls < self.min_warmup_calls or perf_counter_ns() < deadline:
            await call()
            calls += 1

    @staticmethod
    async def _pilot_async(call: Callable[[], Awaitable[Any]], calls: int = 10) -> float:
        start = perf_counter_ns()
        for _ in repeat(None, calls):
            await call()
        return (perf_counter_ns() - start) / calls


async def time_each_async(
    call: Callable[[], Awaitable[Any]],
    *,
    samples: int,
    warmup: int = 3,
    size: int = 1,
    give_up_ns: int = 20_000_000_000,
) -> Samples:
    """Time ``samples`` awaits of ``call``, one sample each (no batching), after ``warmup``.

    For calls of a millisecond or more, where a clock read per call costs nothing in comparison:
    the median and p95 are then those of single calls. ``size`` is recorded as the batch size of
    every sample: 1 for one call, or the number of calls ``call`` makes concurrently (a burst, whose
    sample is then the wall time of the whole burst). Like :meth:`Budget.measure_async`, the GC is
    off inside each timed await and the loop gets one turn (``asyncio.sleep(0)``) inside the timed
    region. Stops early, with at least one sample, once ``give_up_ns`` have passed.
    """
    for _ in range(warmup):
        await call()
    gc.collect()
    out = Samples()
    first = perf_counter_ns()
    for _ in range(samples):
        gc.disable()
        try:
            start = perf_counter_ns()
            await call()
            await asyncio.sleep(0)
            end = perf_counter_ns()
        finally:
            gc.enable()
        out.per_call_ns.append(float(end - start))
        out.batch_sizes.append(size)
        if end - first > give_up_ns:
            break
    return out


def percentile(ordered: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of sorted data, linearly interpolated."""
    if not ordered:
        return math.nan
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Summary:
    """Microsecond statistics over the per-batch per-call figures."""

    median_us: float
    p95_us: float
    min_us: float
    mean_us: float
    batches: int
    calls: int
    batch_min: int
    batch_max: int


def summarize(samples: Samples) -> Summary:
    ordered = sorted(samples.per_call_ns)
    n = len(ordered)
    return Summary(
        median_us=percentile(ordered, 50) / 1000,
        p95_us=percentile(ordered, 95) / 1000,
        min_us=(ordered[0] if n else math.nan) / 1000,
        mean_us=(sum(ordered) / n if n else math.nan) / 1000,
        batches=n,
        calls=samples.calls,
        batch_min=min(samples.batch_sizes, default=0),
        batch_max=max(samples.batch_sizes, default=0),
    )
