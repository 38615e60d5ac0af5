"""One slow tool never delays another: a fast tool's latency while a slow one is flooded.

    python bench/isolation.py                   # 300 × a time.sleep(3) tool; ~25 s
    python bench/isolation.py --flood 300 --sleep 3 --samples 200

Three rows, measured in the same run, each on a fresh gateway holding two sync Python tools,
``bench:slow`` (``time.sleep(--sleep)``) and ``bench:fast`` (returns at once), both called
through the async API (``await gateway.call``, so a sync tool runs in a worker thread):

* **unloaded** — ``bench:fast`` alone, ``--samples`` calls one after the other;
* **before** — the same while ``--flood`` calls of ``bench:slow`` are in flight, on a gateway
  built like the one before per-tool isolation: no effective per-tool limit (10,000 running,
  none waiting) and every sync tool's calls in one shared pool of 32 threads (the old
  ``Gateway(max_threads=32)``), emulated by handing the Python backend one shared executor;
* **after** — the same flood on a gateway with the defaults (16 running, 64 waiting per tool,
  each tool its own threads).

The fast tool's ``--samples`` calls start one after another, evenly over 60 % of ``--sleep``
seconds, each its own task (as independent agents call), right after the flood is sent: each
starts while the first slow calls still sleep. p50/p99 of their latency in milliseconds, and the
flood's outcomes by code.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolgate import Gateway, GatewaySettings, ImplementationKind, tool
from toolgate.backends.python import PythonBackend
from toolgate.model import Tool
from toolgate.pipeline.concurrency import ConcurrencyLimit, ConcurrencySettings


class _SharedPool:
    """The old design: every sync tool's calls in one pool (``Gateway(max_threads=32)``)."""

    def __init__(self, threads: int) -> None:
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="toolgate-tool")

    def executor(self, tool: Tool) -> ThreadPoolExecutor:
        return self.pool

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


def _gateway(sleep: float, *, before: bool) -> Gateway:
    @tool(namespace="bench", timeout=sleep * 20)
    def slow() -> str:
        """Sleeps."""
        time.sleep(sleep)
        return "slept"

    @tool(namespace="bench")
    def fast() -> int:
        """Answers at once."""
        return 1

    if not before:
        gateway = Gateway()
    else:
        gateway = Gateway(
            GatewaySettings(concurrency=ConcurrencySettings(ConcurrencyLimit(10_000, 0)))
        )
        backend = gateway._backends[ImplementationKind.PYTHON]
        assert isinstance(backend, PythonBackend)
        shared = _SharedPool(32)
        backend._threads = shared  # type: ignore[assignment]
        gateway._threads = shared  # type: ignore[assignment]  # closed with the gateway
    gateway.add([slow, fast])
    return gateway


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


async def _fast_calls(gateway: Gateway, samples: int, window: float) -> list[float]:
    """``samples`` calls of ``bench:fast``, one started every ``window / samples`` seconds
    (each its own task, as independent agents would call), and how long each took."""

    async def one() -> float:
        started = time.perf_counter()
        outcome = await gateway.call("bench:fast")
        assert outcome.ok, outcome
        return time.perf_counter() - started

    calls = []
    for _ in range(samples):
        calls.append(asyncio.create_task(one()))
        await asyncio.sleep(window / samples)
    return list(await asyncio.gather(*calls))


async def _row(args: argparse.Namespace, *, before: bool | None) -> dict[str, Any]:
    gateway = _gateway(args.sleep, before=bool(before))
    window = args.sleep * 0.6  # every fast call starts while the first slow calls still sleep
    try:
        await _fast_calls(gateway, 20, 0.02)  # warm-up: threads started, plans compiled
        if before is None:
            timings = await _fast_calls(gateway, args.samples, window)
            return {"timings": timings, "flood": Counter()}
        flood_started = time.perf_counter()
        flood = [asyncio.create_task(gateway.call("bench:slow")) for _ in range(args.flood)]
        timings = await _fast_calls(gateway, args.samples, window)
        # The last fast call started before any slow call could have finished.
        overlapped = max(0.0, time.perf_counter() - flood_started - max(timings)) < args.sleep
        outcomes = await asyncio.gather(*flood)
        codes = Counter(str(o.code) if o.code is not None else "ok" for o in outcomes)
        return {"timings": timings, "flood": codes, "overlapped": overlapped}
    finally:
        await gateway.aclose()


async def _main(args: argparse.Namespace) -> int:
    rows = [
        ("unloaded", await _row(args, before=None)),
        (f"before (shared pool of 32, {args.flood} × sleep {args.sleep:g} s)", None),
        (f"after (16 running + 64 waiting per tool, {args.flood} × sleep {args.sleep:g} s)", None),
    ]
    rows[1] = (rows[1][0], await _row(args, before=True))
    rows[2] = (rows[2][0], await _row(args, before=False))
    print(
        f"bench:fast, {args.samples} calls started over {args.sleep * 0.6:g} s "
        "(await gateway.call), latency in ms"
    )
    print(f"{'row':<68} {'p50':>9} {'p99':>9}  flood outcomes")
    for name, row in rows:
        assert row is not None
        p50, p99 = _percentiles(row["timings"])
        flood = ", ".join(f"{code} {count}" for code, count in sorted(row["flood"].items()))
        note = "" if row.get("overlapped", True) else "  (flood had ended: not overlapped)"
        print(f"{name:<68} {p50:>9.2f} {p99:>9.2f}  {flood or '-'}{note}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=300, help="concurrent slow calls (300)")
    parser.add_argument("--sleep", type=float, default=3.0, help="seconds a slow call sleeps (3)")
    parser.add_argument("--samples", type=int, default=200, help="fast calls timed per row (200)")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
