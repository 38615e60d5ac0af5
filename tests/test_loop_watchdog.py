"""An async tool that never yields holds the event loop: its call still ends ``timeout`` at its
deadline, the loop watchdog names it (log and ``/metrics``), and ``@tool(run_in="thread")`` runs
such a tool off the serving loop so that ``/healthz`` keeps answering."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import httpx2
import pytest
import yaml

from serve_support import serving
from toolgate import Gateway, LoopWatchdog, tool
from toolgate._loop_watchdog import LoopStalls
from toolgate.errors import ErrorCode, ToolDefinitionError
from toolgate.model import CallStatus

pytestmark = pytest.mark.slow


def _spin(seconds: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        pass


async def test_an_async_tool_that_never_yields_ends_timeout_and_the_watchdog_names_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @tool(namespace="hog", timeout=0.3)
    async def spin() -> str:
        """Compute without ever awaiting."""
        _spin(1.0)
        return "ok"

    gateway = Gateway()
    gateway.add(spin)
    stalls = LoopStalls()
    with caplog.at_level(logging.WARNING, logger="toolgate.loop"):
        async with LoopWatchdog(0.2, stalls=stalls):
            outcome = await gateway.call("hog:spin", {})
    assert outcome.status is CallStatus.ERROR and outcome.code is ErrorCode.TIMEOUT, outcome
    assert "hog:spin" in (outcome.message or "") and "timeout of 0.3 s" in (outcome.message or "")
    warnings = [r.getMessage() for r in caplog.records if r.name == "toolgate.loop"]
    assert len(warnings) == 1, warnings
    assert f"tool hog:spin (call {outcome.call_id})" in warnings[0]
    assert 'run_in="thread"' in warnings[0]
    assert stalls.snapshot()["hog:spin"][0] == 1


async def test_a_loop_blocked_outside_any_tool_call_is_reported_as_such(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stalls = LoopStalls()
    watchdog = LoopWatchdog(0.2, stalls=stalls)
    with caplog.at_level(logging.INFO, logger="toolgate.loop"):
        async with watchdog:
            _spin(0.8)
            # The loop answers again: the stall's length is counted and logged.
            for _ in range(200):
                await asyncio.sleep(0.02)
                if stalls.snapshot()["(none)"][1] > 0:
                    break
        assert not watchdog.running  # stopped with its context
    messages = [r.getMessage() for r in caplog.records if r.name == "toolgate.loop"]
    assert any("no tool call was running" in m for m in messages), messages
    assert any("answered again after" in m for m in messages), messages
    count, seconds = stalls.snapshot()["(none)"]
    assert count == 1 and seconds > 0.2


async def test_a_quick_async_tool_is_not_reported() -> None:
    @tool(namespace="quick")
    async def nap() -> str:
        """Await briefly."""
        await asyncio.sleep(0.01)
        return "rested"

    gateway = Gateway()
    gateway.add(nap)
    stalls = LoopStalls()
    async with LoopWatchdog(0.5, stalls=stalls):
        outcome = await gateway.call("quick:nap", {})
    assert outcome.status is CallStatus.OK and outcome.content == "rested"
    assert stalls.snapshot() == {}


def test_run_in_accepts_loop_or_thread_only() -> None:
    with pytest.raises(ToolDefinitionError, match="run_in must be one of"):

        @tool(run_in="process")  # type: ignore[arg-type]
        async def elsewhere() -> None:
            """Nowhere."""


async def test_run_in_thread_keeps_the_loop_free_and_passes_results_and_errors() -> None:
    @tool(namespace="off", run_in="thread")
    async def compute(n: int) -> int:
        """Sum on its own loop."""
        await asyncio.sleep(0)
        return sum(range(n))

    @tool(namespace="off", run_in="thread")
    async def fail() -> None:
        """Raise on its own loop."""
        raise ValueError("no luck")

    gateway = Gateway()
    gateway.add(compute, fail)
    done = await gateway.call("off:compute", {"n": 10})
    assert done.status is CallStatus.OK and done.content == 45
    failed = await gateway.call("off:fail", {})
    assert failed.code is ErrorCode.TOOL_ERROR and "ValueError: no luck" in (failed.message or "")
    # The sync API reaches it too (through the gateway's loop thread).
    assert gateway.call_sync("off:compute", {"n": 4}).content == 6


TOOLS_PY = """
import pathlib
import time

from toolgate import tool


def spin(seconds):
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        pass


@tool(namespace="py", timeout=1)
async def spin_on_loop() -> str:
    \"\"\"Compute for 2.5 s without awaiting, on the serving loop.\"\"\"
    spin(2.5)
    return "ok"


@tool(namespace="py", timeout=1, run_in="thread")
async def spin_off_loop(marker: str) -> str:
    \"\"\"Compute for 6 s without awaiting, on a loop of its own; then leave a marker.\"\"\"
    spin(6)
    pathlib.Path(marker).write_text("done")
    return "ok"
"""


@pytest.fixture
def served(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    config = {"python": ["tools.py"], "serve": {"loop_blocked_after": 0.3}}
    (tmp_path / "toolgate.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}
    with serving(tmp_path, env) as (url, _):
        yield url


async def test_served_a_spinning_tool_ends_timeout_and_metrics_count_the_stall(
    served: str, tmp_path: Path
) -> None:
    async with httpx2.AsyncClient(base_url=served, timeout=60) as http:
        answer = await http.post("/v1/tools/py:spin_on_loop/call", json={"arguments": {}})
        assert answer.status_code == 200
        body = answer.json()
        assert body["status"] == "error" and body["code"] == "timeout", body
        metrics = (await http.get("/metrics")).text
        assert 'toolgate_event_loop_blocked_total{tool="py:spin_on_loop"} 1.0' in metrics, metrics

        # Off the loop: the call ends `timeout` at its deadline, and the server answers while
        # the tool still computes in its thread (its marker is not there yet).
        marker = tmp_path / "spun"
        answer = await http.post(
            "/v1/tools/py:spin_off_loop/call", json={"arguments": {"marker": str(marker)}}
        )
        assert answer.json()["code"] == "timeout", answer.json()
        health = await http.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert not marker.exists(), "the off-loop tool should still be computing"
        metrics = (await http.get("/metrics")).text
        assert 'toolgate_event_loop_blocked_total{tool="py:spin_off_loop"}' not in metrics
