"""Rate limits through the public API: per minute, per day, per agent, under concurrency, across a
restart, with the seconds until a retry can succeed."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway_support import Clock
from toolgate import ErrorCode, Gateway, tool
from toolgate.model import CallOutcome
from toolgate.pipeline import Stage
from toolgate.pipeline.rate_limit import RateLimitStage
from toolgate.stores.limits_memory import MemoryRateLimitStorage
from toolgate.stores.sqlite_limits import SQLiteRateLimitStorage

RUNS: list[str] = []
_RUNS_LOCK = threading.Lock()


@tool(namespace="t", calls_per_minute=10)
def ping(n: int = 0) -> int:
    """Answer a ping."""
    with _RUNS_LOCK:
        RUNS.append("ping")
    return n


@tool(namespace="t", calls_per_minute=10)
async def aping(n: int = 0) -> int:
    """Answer a ping, asynchronously."""
    await asyncio.sleep(0.001)
    RUNS.append("aping")
    return n


@tool(namespace="t", calls_per_minute=2, calls_per_day=3)
def send(text: str) -> str:
    """Send a message."""
    RUNS.append("send")
    return text


@tool(namespace="t", calls_per_day=3)
def daily() -> str:
    """A tool with a daily budget."""
    RUNS.append("daily")
    return "done"


@tool(namespace="t")
def free() -> str:
    """A tool without limits."""
    return "free"


@pytest.fixture(autouse=True)
def _reset_runs() -> None:
    RUNS.clear()


Build = Callable[..., Gateway]


@pytest.fixture
def limited() -> Iterator[Build]:
    """Builds gateways with this module's tools: ``limited(stage)`` with ``stage`` as the
    rate-limit stage, ``limited(clock=clock)`` with the gateway's own stage on ``clock``."""
    made: list[Gateway] = []

    def build(stage: RateLimitStage | None = None, *, clock: Clock | None = None) -> Gateway:
        gw = Gateway(stages=() if stage is None else [stage], clock=clock or time.time)
        gw.add(ping, aping, send, daily, free)
        made.append(gw)
        return gw

    yield build
    for gw in made:
        gw.close()


def statuses(outcomes: list[CallOutcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for outcome in outcomes:
        label = str(outcome.code or outcome.status)
        counts[label] = counts.get(label, 0) + 1
    return counts


def make_stage(kind: str, tmp_path: Path, **options: Any) -> RateLimitStage:
    if kind == "memory":
        return RateLimitStage(**options)
    return RateLimitStage.sqlite(tmp_path / "state.db", **options)


# -- concurrency -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_50_concurrent_calls_with_a_limit_of_10_let_exactly_10_through(
    limited: Build, tmp_path: Path, kind: str
) -> None:
    gateway = limited(make_stage(kind, tmp_path))
    outcomes = await asyncio.gather(*(gateway.call("t:aping", {"n": i}) for i in range(50)))
    assert statuses(list(outcomes)) == {"ok": 10, "rate_limited": 40}
    assert len(RUNS) == 10


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_50_threads_calling_synchronously_let_exactly_10_through(
    limited: Build, tmp_path: Path, kind: str
) -> None:
    gateway = limited(make_stage(kind, tmp_path))
    barrier = threading.Barrier(25)

    def call(i: int) -> CallOutcome:
        if i < 25:
            barrier.wait()
        return gateway.call_sync("t:ping", {"n": i})

    with ThreadPoolExecutor(25) as pool:
        outcomes = list(pool.map(call, range(50)))
    assert statuses(outcomes) == {"ok": 10, "rate_limited": 40}
    assert len(RUNS) == 10


def test_two_gateways_sharing_one_database_share_the_limit(tmp_path: Path) -> None:
    """Like two processes: separate connections to the same file never exceed the limit."""
    path = tmp_path / "state.db"
    with (
        Gateway(stages=[RateLimitStage.sqlite(path)]) as one,
        Gateway(stages=[RateLimitStage.sqlite(path)]) as two,
    ):
        for gw in (one, two):
            gw.add(ping)

        def call(i: int) -> CallOutcome:
            return (one if i % 2 else two).call_sync("t:ping", {"n": i})

        with ThreadPoolExecutor(16) as pool:
            outcomes = list(pool.map(call, range(40)))
    assert statuses(outcomes) == {"ok": 10, "rate_limited": 30}


# -- windows and retry-after -----------------------------------------------------------------------


def test_the_refusal_says_when_a_retry_can_succeed(limited: Build) -> None:
    clock = Clock()
    gateway = limited(clock=clock)
    for _ in range(10):
        assert gateway.call_sync("t:ping").ok
    clock.now += 10
    refused = gateway.call_sync("t:ping")
    assert refused.code is ErrorCode.RATE_LIMITED
    assert "at most 10 calls per minute" in (refused.message or "")
    assert "Retry in 50 s" in (refused.message or "")
    assert refused.metadata["rate_limit"] == {
        "limit": 10,
        "per": "minute",
        "per_agent": False,
        "retry_after": 50,
    }
    clock.now += 49.5
    assert "Retry in 1 s" in (gateway.call_sync("t:ping").message or "")
    clock.now += 0.5  # the window has ended: the retry succeeds, as promised
    assert gateway.call_sync("t:ping").ok
    assert len(RUNS) == 11


def test_a_daily_limit_refuses_with_the_seconds_until_the_day_window_ends(
    limited: Build,
) -> None:
    clock = Clock()
    gateway = limited(clock=clock)
    for _ in range(3):
        assert gateway.call_sync("t:daily").ok
        clock.now += 3600
    refused = gateway.call_sync("t:daily")
    assert refused.code is ErrorCode.RATE_LIMITED
    assert refused.metadata["rate_limit"]["per"] == "day"
    assert refused.metadata["rate_limit"]["retry_after"] == 86400 - 3 * 3600
    clock.now += 86400 - 3 * 3600
    assert gateway.call_sync("t:daily").ok


def test_per_minute_and_per_day_together(limited: Build) -> None:
    clock = Clock()
    gateway = limited(clock=clock)
    assert [gateway.call_sync("t:send", {"text": "x"}).ok for _ in range(3)] == [
        True,
        True,
        False,
    ]
    refused = gateway.call_sync("t:send", {"text": "x"})
    assert refused.metadata["rate_limit"]["per"] == "minute"
    assert refused.metadata["rate_limit"]["retry_after"] == 60
    clock.now += 60
    assert gateway.call_sync("t:send", {"text": "x"}).ok  # the third call of the day
    clock.now += 60
    refused = gateway.call_sync("t:send", {"text": "x"})
    assert refused.metadata["rate_limit"]["per"] == "day"
    assert refused.metadata["rate_limit"]["retry_after"] == 86400 - 120
    assert len(RUNS) == 3


def test_calls_refused_by_the_daily_limit_do_not_spend_the_minute_budget() -> None:
    clock = Clock()
    storage = MemoryRateLimitStorage(clock=clock)
    stage = RateLimitStage(storage, clock=clock)
    with Gateway(stages=[stage]) as gw:
        gw.add(send)
        for _ in range(2):
            assert gw.call_sync("t:send", {"text": "x"}).ok
        clock.now += 60
        assert gw.call_sync("t:send", {"text": "x"}).ok  # the day is used up now
        for _ in range(5):
            assert gw.call_sync("t:send", {"text": "x"}).code is ErrorCode.RATE_LIMITED
        minute = stage._limits_for(send.tool.safety.rate_limit)[0]  # type: ignore[arg-type]
        assert storage.get(minute.item.key_for(*stage.identifiers("t:send", None))) == 1


def test_per_agent_limits_count_each_agent_separately(limited: Build) -> None:
    gateway = limited(RateLimitStage(per_agent=True))
    assert statuses([gateway.call_sync("t:ping", agent="a") for _ in range(12)]) == {
        "ok": 10,
        "rate_limited": 2,
    }
    refused = gateway.call_sync("t:ping", agent="a")
    assert "for agent a" in (refused.message or "")
    assert all(gateway.call_sync("t:ping", agent="b").ok for _ in range(10))


def test_without_per_agent_all_agents_share_the_limit(limited: Build) -> None:
    gateway = limited(RateLimitStage())
    for i in range(10):
        assert gateway.call_sync("t:ping", agent=f"agent-{i}").ok
    assert gateway.call_sync("t:ping", agent="another").code is ErrorCode.RATE_LIMITED


def test_tools_without_limits_are_not_counted(limited: Build) -> None:
    stage = RateLimitStage()
    gateway = limited(stage)
    assert all(gateway.call_sync("t:free").ok for _ in range(50))
    assert stage not in _plan_stages(gateway, "t:free")


def _plan_stages(gw: Gateway, tool_id: str) -> list[Stage]:
    entry = gw.registry.get(tool_id)
    assert entry is not None
    return [s for s in gw.pipeline.stages if s.applies_to(entry)]


# -- persistence -----------------------------------------------------------------------------------


def test_a_daily_limit_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "home" / "state.db"
    clock = Clock()
    stage = RateLimitStage.sqlite(path, clock=clock)
    with Gateway(stages=[stage]) as gw:
        gw.add(daily)
        assert [gw.call_sync("t:daily").ok for _ in range(2)] == [True, True]
        stage.close()
    assert path.stat().st_mode & 0o777 == 0o600
    clock.now += 7200
    stage = RateLimitStage.sqlite(path, clock=clock)
    with Gateway(stages=[stage]) as gw:  # a new process, the same database file
        gw.add(daily)
        assert gw.call_sync("t:daily").ok
        refused = gw.call_sync("t:daily")
        assert refused.code is ErrorCode.RATE_LIMITED
        assert refused.metadata["rate_limit"]["retry_after"] == 86400 - 7200
        stage.close()


def test_the_sqlite_storage_counts_atomically_and_expires_windows(tmp_path: Path) -> None:
    clock = Clock()
    with SQLiteRateLimitStorage(tmp_path / "c.db", clock=clock) as storage:
        assert storage.check()
        assert [storage.incr("k", 60) for _ in range(3)] == [1, 2, 3]
        assert storage.get("k") == 3
        assert storage.get_expiry("k") == clock.now + 60
        clock.now += 60
        assert storage.get("k") == 0
        assert storage.incr("k", 60) == 1  # a new window
        storage.clear("k")
        assert storage.get("k") == 0
    assert not storage.check()  # closed
