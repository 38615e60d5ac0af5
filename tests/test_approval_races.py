"""Attacks on the decision-only approval flow (issue 23): a person's decision is recorded, the
agent's call runs it — and neither a burst of retries nor a dismissed form may change what runs.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway_support import gateway_with
from test_mcp_server_helpers import bearer, configured_server, text_of
from toolgate import tool
from toolgate.model import ApprovalStatus

RUNS: list[str] = []


def _slow_check_asking_a_person(payload: Any) -> dict[str, Any]:
    time.sleep(0.2)  # a security check takes a moment: retries overlap while it runs
    return {
        "allowed": False,
        "requiresApproval": True,
        "permissionType": "file_write",
        "permissionKey": "notes.txt",
    }


@tool(
    namespace="fs",
    effect="local_write",
    calls_per_minute=1,
    security_check=_slow_check_asking_a_person,
)
async def write(path: str) -> str:
    """Write a file."""
    RUNS.append(path)
    await asyncio.sleep(0.1)
    return "written"


@pytest.mark.slow
async def test_a_burst_of_retries_after_always_runs_the_call_once_within_its_rate_limit(
    tmp_path: Path,
) -> None:
    """Retries pass the rate limit uncounted only as the decided call: the one that runs it.
    Those that turn out to be new calls (the request taken meanwhile, an "always" grant) are
    counted — 1 call per minute here, used by the agent's first call."""
    RUNS.clear()
    call = {"path": "notes.txt"}
    with gateway_with(approver="queue", state_path=tmp_path / "state.db") as gateway:
        gateway.add(write)
        assert gateway.approvals is not None
        first = await gateway.call("fs:write", call, agent="bot", workspace="/ws")
        assert first.approval is not None
        gateway.approvals.decide(first.approval.id, "always", by="alice")

        async def retry(index: int) -> str:
            await asyncio.sleep(index * 0.004)
            outcome = await gateway.call("fs:write", call, agent="bot", workspace="/ws")
            return f"{outcome.status}/{outcome.code}"

        answers = collections.Counter(await asyncio.gather(*(retry(i) for i in range(40))))
        assert answers["ok/None"] == 1, answers
        assert len(RUNS) == 1
        later = await gateway.call("fs:write", call, agent="bot", workspace="/ws")
        assert later.code == "rate_limited" and len(RUNS) == 1


LOG: list[str] = []


@tool(namespace="x", effect="external_write")
async def transfer(amount: int) -> str:
    """Transfer money in two steps."""
    LOG.append("debit")
    await asyncio.sleep(0.5)
    LOG.append("credit")
    return "done"


@pytest.mark.slow
async def test_dismissing_the_form_never_cuts_an_approved_run_in_half(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A handshake-era client shows the approval form; a person approves in the web UI
    meanwhile; the waiting call runs the approved call — and the user closing the now stale
    form while it runs does not cancel it."""
    LOG.clear()
    with configured_server(tmp_path, monkeypatch) as running:
        running.gateway.add(transfer)
        approvals = running.gateway.approvals
        assert approvals is not None
        asked, release = anyio.Event(), anyio.Event()

        async def user_who_closes_the_form(context: Any, params: Any) -> types.ElicitResult:
            asked.set()
            await release.wait()
            return types.ElicitResult(action="cancel")

        client = Client(
            streamable_http_client(running.url, http_client=bearer("alice-key")),
            mode="legacy",
            elicitation_callback=user_who_closes_the_form,
        )
        async with client as mcp:
            results: list[Any] = []

            async def call() -> None:
                results.append(await mcp.call_tool("x__transfer", {"amount": 100}))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    group.start_soon(call)
                    await asked.wait()
                    (request,) = approvals.pending()
                    approvals.decide(request.id, "approve", by="web ui")
                    while "debit" not in LOG:
                        await anyio.sleep(0.02)
                    release.set()  # the form is closed while the tool runs
        assert LOG == ["debit", "credit"]
        assert not results[0].is_error and text_of(results[0]) == "done"
        assert approvals.get(request.id).status is ApprovalStatus.DELIVERED


SLOW_RUNS: list[int] = []


@tool(namespace="x", effect="external_write")
async def slow_send(n: int) -> str:
    """Send, slowly."""
    SLOW_RUNS.append(n)
    await asyncio.sleep(0.2)
    return f"sent {n}"


async def test_two_callers_waiting_on_one_request_get_its_outcome_once(tmp_path: Path) -> None:
    """Two waiters (two sessions of the agent) on one request: one runs the approved call and
    gets its outcome; the other gets nothing — never a second run, never a new request."""
    SLOW_RUNS.clear()
    with gateway_with(approver="queue", state_path=tmp_path / "state.db") as gateway:
        gateway.add(slow_send)
        approvals = gateway.approvals
        assert approvals is not None
        first = await gateway.call("x:slow_send", {"n": 1})
        assert first.approval is not None
        waiters = [asyncio.ensure_future(approvals.wait(first.approval, 10)) for _ in range(2)]
        await asyncio.sleep(0.05)
        approvals.decide(first.approval.id, "approve", by="alice")
        got = await asyncio.gather(*waiters)
        assert sorted(outcome is None for outcome in got) == [False, True]
        assert SLOW_RUNS == [1] and approvals.pending() == []


async def test_a_waiting_caller_collects_a_run_the_person_started_and_only_once(
    tmp_path: Path,
) -> None:
    """A person approves with --run while the agent's call waits: the waiting call gets that
    run's outcome, and the agent's next identical call asks anew instead of collecting it
    again."""
    SLOW_RUNS.clear()
    with gateway_with(approver="queue", state_path=tmp_path / "state.db") as gateway:
        gateway.add(slow_send)
        approvals = gateway.approvals
        assert approvals is not None
        first = await gateway.call("x:slow_send", {"n": 2})
        assert first.approval is not None
        waiter = asyncio.ensure_future(approvals.wait(first.approval, 10))
        await asyncio.sleep(0.05)
        approvals.decide(first.approval.id, "approve", by="alice")
        ran = await approvals.run(first.approval.id)  # what 'approve --run' does
        got = await waiter
        assert ran.ok and got is not None and got.content == "sent 2"
        again = await gateway.call("x:slow_send", {"n": 2})
        assert again.approval is not None and again.approval.id != first.approval.id
        assert SLOW_RUNS == [2]
