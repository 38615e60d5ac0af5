"""``toolgate.Client`` against a real ``toolgate serve`` (a subprocess, one per module): the
remote gateway the framework adapters use, with the same behaviour as the in-process one."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from integrations_served import ServedToolgate, served_toolgate
from toolgate import CallStatus, Client

pytestmark = pytest.mark.slow

__all__ = ["served_toolgate"]  # the fixture, imported for pytest


@pytest.fixture
async def client(served_toolgate: ServedToolgate) -> AsyncIterator[Client]:
    async with Client(
        served_toolgate.url,
        key=served_toolgate.agent_key,
        approver_key=served_toolgate.operator_key,
    ) as remote:
        yield remote


def _sent(served: ServedToolgate, marker: str) -> list[str]:
    return [line for line in served.sent_lines() if marker in line]


async def test_a_pending_call_approved_with_the_cli_runs_once_on_retry(
    served_toolgate: ServedToolgate, client: Client
) -> None:
    assert client.agent == "planner"
    arguments = {"to": "ada@example.com", "body": "hello from the pending test"}
    first = await client.call(
        "demo:send_email", arguments, tool_call_id="c1", idempotency_key="s1:c1"
    )
    assert first.status is CallStatus.PENDING_APPROVAL
    assert first.approval is not None and first.approval.id.startswith("apr_")
    assert _sent(served_toolgate, "pending test") == []  # nothing ran while it waits

    served_toolgate.approve(first.approval.id)
    assert _sent(served_toolgate, "pending test") == []  # the decision ran nothing

    retried = await client.call(
        "demo:send_email", arguments, tool_call_id="c1", idempotency_key="s1:c1"
    )
    assert retried.status is CallStatus.OK, retried.text
    assert retried.text == "sent to ada@example.com"
    assert _sent(served_toolgate, "pending test") == ["ada@example.com|hello from the pending test"]
    again = await client.call(
        "demo:send_email", arguments, tool_call_id="c1", idempotency_key="s1:c1"
    )
    assert again.status is CallStatus.OK
    assert again.metadata["idempotency"]["replayed"] is True
    assert len(_sent(served_toolgate, "pending test")) == 1  # the body ran once

    decided = await client.approval(first.approval.id)
    assert decided.agent == "planner"
    assert decided.decided_by == "alice"
    records = served_toolgate.audit(
        tool="demo:send_email", agent="planner", status="ok", wait_for=2
    )
    ran = [r for r in records if r["approval_id"] == first.approval.id]
    assert [r["approval_decision"] for r in ran] == ["approve"]  # the run, as planner
