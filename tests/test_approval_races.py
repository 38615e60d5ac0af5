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
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from test_mcp_server_helpers import bearer, configured_server, text_of
from toolgate import Gateway, tool
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


async def test_a_burst_of_retries_after_always_runs_the_call_once_within_its_rate_limit(
    tmp_path: Path,
) -> None:
    """Retries pass the rate limit uncounted only as the decided call: the one that runs it.
    Those that turn out to be new calls (the request taken meanwhile, an "always" grant) are
    counted — 1 call per minute here, used by the agent's first call."""
    RUNS.clear()
    call = {"path": "notes.txt"}
    with Gateway(approver="queue", state_path=tmp_path / "state.db") as gateway:
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
