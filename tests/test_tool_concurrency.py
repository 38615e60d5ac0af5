"""One slow tool never starves the others: per-tool running slots and a bounded queue, through the
``Gateway`` API, a configured gateway (toolgate.yaml) and ``toolgate serve`` over HTTP.

The slow tools wait on an event (a file, across processes) instead of sleeping: each test knows
the slow calls are still running when it checks the others, without timing anything.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from folder_tools import write_tool
from gateway_support import gateway_with
from serve_support import serving
from toolgate import CallOutcome, ErrorCode, Gateway, tool
from toolgate.config import load_config
from toolgate.config.build import build_gateway
from toolgate.pipeline.concurrency import ConcurrencyLimit, ConcurrencySettings

# -- helpers -------------------------------------------------------------------------------------


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """What the slow tools wait for; set at the end of every test so no thread is left waiting."""
    event = threading.Event()
    yield event
    event.set()


def slow_and_fast(release: threading.Event, *, timeout: float = 30) -> list[Any]:
    @tool(namespace="t", timeout=timeout)
    def slow() -> str:
        """Waits until the test lets it finish."""
        release.wait(30)
        return "slow done"

    @tool(namespace="t")
    def fast() -> str:
        """Answers at once."""
        return "fast"

    return [slow, fast]


def limited(running: int, waiting: int, **tools: ConcurrencyLimit) -> ConcurrencySettings:
    return ConcurrencySettings(ConcurrencyLimit(running, waiting), tools=dict(tools))


async def until(condition: object, what: str, seconds: float = 20) -> None:
    """Wait (generously) for ``condition()``; the bound only catches a hang."""
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.01)


def tool_threads(tool_id: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(f"toolgate-{tool_id}_"))


def assert_busy_at_once(outcome: CallOutcome, tool_id: str, running: int, waiting: int) -> None:
    assert outcome.code is ErrorCode.BUSY, outcome
    message = outcome.message or ""
    assert f"Tool {tool_id} is busy" in message
    assert f"at most {running} call" in message and f"{waiting} may wait" in message
    assert "running and waiting now" in message
    assert "did not run; retry later" in message


# -- the Gateway API -----------------------------------------------------------------------------


async def test_a_flood_past_the_limit_and_queue_is_refused_busy_at_once(
    release: threading.Event,
) -> None:
    with gateway_with(concurrency=limited(2, 3)) as gateway:
        gateway.add(slow_and_fast(release))
        calls = [asyncio.create_task(gateway.call("t:slow")) for _ in range(9)]
        # The four past 2 running + 3 waiting end while the others are still held.
        await until(lambda: sum(c.done() for c in calls) == 4, "four calls refused")
        refused = [c.result() for c in calls if c.done()]
        for outcome in refused:
            assert_busy_at_once(outcome, "t:slow", 2, 3)
            assert outcome.metadata["concurrency"] == {
                "running": 2,
                "waiting": 3,
                "refused": "full",
            }
        load = gateway.load("t:slow")
        assert load is not None
        assert (load.running, load.waiting, load.busy) == (2, 3, 4)
        status = gateway.status("t:slow").to_dict()
        assert status["load"] == {
            "running": 2,
            "waiting": 3,
            "runningLimit": 2,
            "waitingLimit": 3,
            "busy": 4,
        }
        assert status["phase"] == "Ready"  # busy is load, not a failure of the tool
        release.set()
        finished = await asyncio.gather(*calls)
        assert sum(o.ok for o in finished) == 5
        assert all(o.content == "slow done" for o in finished if o.ok)


async def test_an_unrelated_tool_answers_while_a_slow_one_is_flooded(
    release: threading.Event,
) -> None:
    # The defaults (16 running, 64 waiting). Before, 120 such calls took every thread of the
    # shared pool of 32, and the fast tool's call waited behind them.
    with Gateway() as gateway:
        gateway.add(slow_and_fast(release))
        calls = [asyncio.create_task(gateway.call("t:slow")) for _ in range(120)]
        await until(lambda: sum(c.done() for c in calls) == 120 - 16 - 64, "the excess refused")
        fast = await gateway.call("t:fast")
        assert fast.ok and fast.content == "fast"
        assert gateway.call_sync("t:fast").content == "fast"  # inline, its own thread
        # All the while, the slow tool's calls still run (or wait): none has finished.
        assert not release.is_set()
        assert all(c.result().code is ErrorCode.BUSY for c in calls if c.done())
        load = gateway.load("t:slow")
        assert load is not None and (load.running, load.waiting) == (16, 64)
        assert tool_threads("t:slow") == 16  # its own threads, no more than its limit
        release.set()
        outcomes = await asyncio.gather(*calls)
    assert sum(o.ok for o in outcomes) == 80


async def test_a_timed_out_sync_call_keeps_its_slot_until_its_thread_returns(
    release: threading.Event,
) -> None:
    with gateway_with(concurrency=limited(1, 0)) as gateway:
        gateway.add(slow_and_fast(release, timeout=0.3))
        first = await gateway.call("t:slow")
        assert first.code is ErrorCode.TIMEOUT
        # Its thread still runs: the tool's one slot is still taken, no second thread starts.
        again = await gateway.call("t:slow")
        assert_busy_at_once(again, "t:slow", 1, 0)
        load = gateway.load("t:slow")
        assert load is not None and load.running == 1
        assert tool_threads("t:slow") == 1
        assert (await gateway.call("t:fast")).content == "fast"  # other tools are not held
        release.set()  # the hanging thread returns: its slot is free again
        await until(lambda: gateway.load("t:slow").running == 0, "the slot given back")  # type: ignore[union-attr]
        later = await gateway.call("t:slow")
        assert later.ok and later.content == "slow done"


async def test_a_call_that_waits_longer_than_the_timeout_ends_busy(
    release: threading.Event,
) -> None:
    with gateway_with(concurrency=limited(1, 1)) as gateway:
        gateway.add(slow_and_fast(release, timeout=0.3))
        holder = asyncio.create_task(gateway.call("t:slow"))
        await until(lambda: gateway.load("t:slow") is not None, "the first call running")
        waited = await gateway.call("t:slow")
        assert waited.code is ErrorCode.BUSY, waited
        message = waited.message or ""
        assert "Tool t:slow is busy" in message and "waited 0.3 s" in message
        assert "did not run; retry later" in message
        assert waited.metadata["concurrency"]["refused"] == "expired"
        assert (await holder).code is ErrorCode.TIMEOUT
        load = gateway.load("t:slow")
        assert load is not None and (load.waiting, load.busy) == (0, 1)


async def test_a_cancelled_waiting_call_leaves_the_queue(release: threading.Event) -> None:
    with gateway_with(concurrency=limited(1, 1)) as gateway:
        gateway.add(slow_and_fast(release))
        holder = asyncio.create_task(gateway.call("t:slow"))
        waiter = asyncio.create_task(gateway.call("t:slow"))
        await until(lambda: getattr(gateway.load("t:slow"), "waiting", 0) == 1, "one waiting")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        load = gateway.load("t:slow")
        assert load is not None and (load.running, load.waiting) == (1, 0)
        # Its place is free: the next call waits instead of being refused, and runs.
        queued = asyncio.create_task(gateway.call("t:slow"))
        await until(lambda: getattr(gateway.load("t:slow"), "waiting", 0) == 1, "queued again")
        release.set()
        assert [o.content for o in await asyncio.gather(holder, queued)] == ["slow done"] * 2


def test_call_sync_inline_counts_against_the_limit_and_waits_in_the_queue(
    release: threading.Event,
) -> None:
    with gateway_with(concurrency=limited(1, 1)) as gateway:
        gateway.add(slow_and_fast(release))
        results: list[CallOutcome] = []
        first = threading.Thread(target=lambda: results.append(gateway.call_sync("t:slow")))
        first.start()
        deadline = time.monotonic() + 20
        while gateway.load("t:slow") is None or gateway.load("t:slow").running == 0:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        second = threading.Thread(target=lambda: results.append(gateway.call_sync("t:slow")))
        second.start()
        while gateway.load("t:slow").waiting == 0:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert_busy_at_once(gateway.call_sync("t:slow"), "t:slow", 1, 1)
        release.set()
        first.join(20)
        second.join(20)
        assert [o.content for o in results] == ["slow done"] * 2


# -- configuration --------------------------------------------------------------------------------

TOOLS_PY = '''
import os, time
from pathlib import Path
from toolgate import tool

GO = Path(os.environ["GO_FILE"])


def _wait() -> str:
    while not GO.exists():
        time.sleep(0.02)
    return "done"


@tool(namespace="slow")
def wait() -> str:
    """Waits until the test creates the file GO_FILE."""
    return _wait()


@tool(namespace="slow")
def other() -> str:
    """Also waits for GO_FILE."""
    return _wait()


@tool(namespace="quick")
def ping() -> str:
    """Answers at once."""
    return "pong"
'''

CONFIG = """python:
  - ./tools.py
concurrency:
  default: {running: 3, waiting: 5}
  tools:
    "slow:*": {running: 2}
    slow:wait: {waiting: 1}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (tmp_path / "toolgate.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


async def test_limits_come_from_toolgate_yaml_per_tool_and_per_namespace(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go = project / "go"
    monkeypatch.setenv("GO_FILE", str(go))
    loaded = load_config(project / "toolgate.yaml")
    gateway = build_gateway(loaded, home=project / "home", approver=None, audit="off")
    try:
        go.touch()  # nothing waits: one call each, to see the limits they got
        for tool_id in ("slow:wait", "slow:other", "quick:ping"):
            assert (await gateway.call(tool_id)).ok
        limits = {
            tool_id: (load.running_limit, load.waiting_limit)
            for tool_id in ("slow:wait", "slow:other", "quick:ping")
            if (load := gateway.load(tool_id)) is not None
        }
        # The tool's own entry wins over its namespace's; what neither sets is the default's.
        assert limits == {"slow:wait": (2, 1), "slow:other": (2, 5), "quick:ping": (3, 5)}
        go.unlink()
        calls = [asyncio.create_task(gateway.call("slow:wait")) for _ in range(5)]
        await until(lambda: sum(c.done() for c in calls) == 2, "two refused")
        for outcome in (c.result() for c in calls if c.done()):
            assert_busy_at_once(outcome, "slow:wait", 2, 1)
        go.touch()
        assert sum(o.ok for o in await asyncio.gather(*calls)) == 3
    finally:
        go.touch()
        gateway.close()


def test_a_bad_pattern_in_toolgate_yaml_is_named(tmp_path: Path) -> None:
    from toolgate.errors import ConfigError

    (tmp_path / "toolgate.yaml").write_text(
        "concurrency:\n  tools:\n    nocolon: {running: 2}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"concurrency\.tools.*nocolon"):
        load_config(tmp_path / "toolgate.yaml")
    (tmp_path / "toolgate.yaml").write_text(
        "concurrency:\n  default: {running: 0}\n", encoding="utf-8"
    )
    with pytest.raises(ConfigError, match=r"concurrency\.default\.running"):
        load_config(tmp_path / "toolgate.yaml")


@pytest.mark.slow
def test_toolgate_serve_refuses_the_flood_and_keeps_answering_the_others(
    project: Path,
) -> None:
    go = project / "go"
    env = {**os.environ, "TOOLGATE_HOME": str(project / "home"), "GO_FILE": str(go)}

    async def scenario(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as http:

            async def call(tool_id: str) -> dict[str, object]:
                answer = await http.post(f"/v1/tools/{tool_id}/call", json={"arguments": {}})
                assert answer.status_code == 200, answer.text
                body: dict[str, object] = answer.json()
                return body

            calls = [asyncio.create_task(call("slow:wait")) for _ in range(6)]
            await until(lambda: sum(c.done() for c in calls) == 3, "three refused", 60)
            for body in (c.result() for c in calls if c.done()):
                assert body["status"] == "error" and body["code"] == "busy", body
                message = str(body["message"])
                assert "Tool slow:wait is busy" in message and "at most 2 calls" in message
                assert "1 may wait" in message and "retry later" in message
            assert (await call("quick:ping"))["text"] == "pong"
            # The flooded tool's calls are all still held: none of them finished.
            assert not go.exists() and sum(c.done() for c in calls) == 3
            statuses = (await http.get("/v1/status")).json()["tools"]
            load = next(s for s in statuses if s["tool"] == "slow:wait")["load"]
            assert (load["running"], load["waiting"], load["busy"]) == (2, 1, 3)
            go.touch()
            done = await asyncio.gather(*calls)
            assert sum(body["status"] == "ok" for body in done) == 3

    try:
        with serving(project, env) as (url, _):
            asyncio.run(scenario(url))
    finally:
        go.touch()


# -- script tools ---------------------------------------------------------------------------------

WAIT_SCRIPT = 'cat >/dev/null\nwhile [ ! -e "$GO_FILE" ]; do sleep 0.02; done\necho \'{"ok": 1}\'\n'


@pytest.fixture
def script_root(tmp_path: Path) -> Path:
    root = tmp_path / "tools"
    write_tool(root, "wait", WAIT_SCRIPT, env=["GO_FILE"])
    write_tool(root, "quick", "cat >/dev/null; echo '{\"quick\": 1}'")
    return root


def _script_gateway(root: Path, go: Path, **options: object) -> Gateway:
    environ = {"PATH": os.environ["PATH"], "GO_FILE": str(go)}
    return gateway_with(tool_folders=[root], environ=environ, env_from_process=True, **options)  # type: ignore[arg-type]


async def test_script_tools_are_limited_the_same_way(script_root: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    settings = limited(16, 64, **{"local:wait": ConcurrencyLimit(running=1, waiting=1)})
    async with _script_gateway(script_root, go, concurrency=settings) as gateway:
        calls = [asyncio.create_task(gateway.call("local:wait")) for _ in range(4)]
        await until(lambda: sum(c.done() for c in calls) == 2, "two refused")
        for outcome in (c.result() for c in calls if c.done()):
            assert_busy_at_once(outcome, "local:wait", 1, 1)
        quick = await gateway.call("local:quick")
        assert quick.ok and quick.content == {"quick": 1}
        assert sum(c.done() for c in calls) == 2  # the flooded tool's calls are still held
        go.touch()
        assert sum(o.ok for o in await asyncio.gather(*calls)) == 2


async def test_scripts_concurrency_is_the_running_limit_of_script_tools_unless_named(
    script_root: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    go.touch()
    options = {"script_concurrency": 1, "concurrency": limited(16, 0)}
    async with _script_gateway(script_root, go, **options) as gateway:
        for tool_id in ("local:wait", "local:quick"):
            assert (await gateway.call(tool_id)).ok
            load = gateway.load(tool_id)
            assert load is not None and (load.running_limit, load.waiting_limit) == (1, 0)
    named = limited(16, 0, **{"local:*": ConcurrencyLimit(running=3)})
    async with _script_gateway(script_root, go, script_concurrency=1, concurrency=named) as gw:
        assert (await gw.call("local:wait")).ok
        load = gw.load("local:wait")
        assert load is not None and load.running_limit == 3  # the concurrency entry wins


# -- found by the review: keys, raised limits, async tools off the loop --------------------------


async def test_a_busy_call_gives_its_idempotency_key_up_so_the_retry_runs(
    release: threading.Event,
) -> None:
    ran: list[str] = []

    @tool(namespace="t", idempotency_key="{{ args.order }}")
    def charge(order: str) -> str:
        """Charges an order (waits until the test lets it finish)."""
        ran.append(order)
        release.wait(30)
        return f"charged {order}"

    with gateway_with(concurrency=limited(1, 0)) as gateway:
        gateway.add(charge)
        first = asyncio.create_task(gateway.call("t:charge", {"order": "o-1"}))
        await until(lambda: ran == ["o-1"], "the first order running")
        refused = await gateway.call("t:charge", {"order": "o-2"})
        assert refused.code is ErrorCode.BUSY
        release.set()
        assert (await first).ok
        # "It did not run; retry later": the retry with the same key runs, it is no replay.
        retried = await gateway.call("t:charge", {"order": "o-2"})
        assert retried.ok and retried.content == "charged o-2", retried
        assert retried.metadata["idempotency"]["replayed"] is False
        assert ran == ["o-1", "o-2"]


async def test_a_raised_running_limit_admits_the_waiting_calls_at_once(
    release: threading.Event,
) -> None:
    with gateway_with(concurrency=limited(1, 10)) as gateway:
        gateway.add(slow_and_fast(release))
        calls = [asyncio.create_task(gateway.call("t:slow")) for _ in range(5)]
        await until(lambda: getattr(gateway.load("t:slow"), "waiting", 0) == 4, "four waiting")
        slots = gateway._concurrency.slots(gateway.get_tool("t:slow"))
        slots.set_limits(4, 10)  # what declaring the tool again with a higher limit does
        load = gateway.load("t:slow")
        assert load is not None and (load.running, load.waiting) == (4, 1)
        release.set()
        assert all(o.ok for o in await asyncio.gather(*calls))


async def test_an_async_tool_run_in_a_thread_keeps_its_slot_until_the_thread_returns(
    release: threading.Event,
) -> None:
    @tool(namespace="t", timeout=0.3, run_in="thread")
    async def stuck() -> str:
        """Blocks its own loop until the test lets it finish."""
        release.wait(30)
        return "done"

    with gateway_with(concurrency=limited(2, 0)) as gateway:
        gateway.add(stuck)
        outcomes = await asyncio.gather(*(gateway.call("t:stuck") for _ in range(6)))
        codes = sorted(str(o.code) for o in outcomes)
        assert codes == ["busy"] * 4 + ["timeout"] * 2, codes
        # The two timed-out threads still run: the tool refuses instead of starting more.
        assert (await gateway.call("t:stuck")).code is ErrorCode.BUSY
        load = gateway.load("t:stuck")
        assert load is not None and load.running == 2
        release.set()
        await until(lambda: gateway.load("t:stuck").running == 0, "the slots given back")  # type: ignore[union-attr]
