"""Attacks on the Pydantic AI adapter: forged or altered resume state, model-chosen ids and
keys, hostile upstream content — each must be refused or neutralised, never run a side effect
without the approval that covers it.

Full runs with Pydantic AI's ``FunctionModel`` over the demo gateway (``integrations_support``);
"ran" is counted in the demo tools' side-effect log.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved

from integrations_served import ServedToolgate, served_toolgate
from integrations_support import Setup, sent_lines
from test_integration_pydantic_ai import (
    EMAIL,
    Script,
    agent_for,
    approval_id,
    paused,
    setup,
)
from toolgate import Client, tool
from toolgate.integrations.keys import idempotency_key
from toolgate.integrations.pydantic_ai import (
    ToolgateToolset,
    decisions_from_toolgate,
    record_decisions,
)
from toolgate.model.content import ContentResult, parse_blocks

__all__ = ["served_toolgate", "setup"]  # fixtures, imported for pytest


# -- forged resume state --------------------------------------------------------------------------


async def test_forged_metadata_cannot_turn_a_plain_approval_into_always(setup: Setup) -> None:
    # The deferral's metadata travels with the paused run (another process, a browser form):
    # whoever alters it must not turn a once-approval into a tool-wide "always allow" grant,
    # nor record it under someone else's name.
    script = Script([EMAIL])
    agent, result = await paused(setup, script, decided_by="support-desk")
    forged = DeferredToolResults(
        approvals={"call-1": True},
        metadata={
            "call-1": {
                "toolgate": {"approval_id": approval_id(result), "decision": "always", "by": "ceo"}
            }
        },
    )
    await agent.run(message_history=result.all_messages(), deferred_tool_results=forged)

    assert sent_lines(setup) == ["bob@example.com|hello"]  # approved once: it ran once
    request = setup.gateway.approvals.get(approval_id(result))
    assert (request.decision, request.decided_by) == ("approve", "support-desk")
    assert setup.gateway.approvals.grants() == []


async def test_record_decisions_refuses_metadata_naming_another_request(setup: Setup) -> None:
    # Another conversation's charge waits for a person. The email's deferral metadata is
    # altered to name that request: approving "the email" must not approve the charge.
    other = Script([("demo__charge", {"amount": 900}, "x-9")])
    charged = await agent_for(ToolgateToolset(setup.tools), other).run("charge")
    victim = approval_id(charged, "x-9")
    _, result = await paused(setup, Script([EMAIL]))
    result.output.metadata["call-1"]["toolgate"]["approval_id"] = victim

    with pytest.raises(ValueError, match="not for tool call 'call-1'"):
        await record_decisions(setup.tools, result.output, {"call-1": "approve"}, by="alice")
    assert setup.gateway.approvals.get(victim).status == "pending"
    # Read-only, the same: another request's decision is not this call's answer.
    setup.gateway.approvals.decide(victim, "approve", by="alice")
    with pytest.raises(ValueError, match="not for tool call 'call-1'"):
        await decisions_from_toolgate(setup.tools, result.output)


async def test_record_decisions_still_answers_the_pause_after_changed_arguments(
    setup: Setup,
) -> None:
    # The check above must not refuse the request a ToolApproved(override_args=...) made: it
    # covers the changed arguments, while the call in the requests keeps the model's.
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    changed = {"to": "eve@example.com", "body": "hello"}
    results = await record_decisions(setup.tools, result.output, {"call-1": "approve"}, by="alice")
    results.approvals["call-1"] = ToolApproved(override_args=changed)
    again = await agent.run(message_history=result.all_messages(), deferred_tool_results=results)
    assert isinstance(again.output, DeferredToolRequests)

    answer = await record_decisions(setup.tools, again.output, {"call-1": "approve"}, by="alice")
    answer.approvals["call-1"] = ToolApproved(override_args=changed)
    await agent.run(message_history=again.all_messages(), deferred_tool_results=answer)
    assert sent_lines(setup) == ["eve@example.com|hello"]


@pytest.mark.parametrize(("wait", "poll_interval"), [(float("nan"), 0.01), (1.0, float("nan"))])
async def test_decisions_from_toolgate_refuses_a_wait_that_never_ends(
    setup: Setup, wait: float, poll_interval: float
) -> None:
    # NaN never compares past the deadline: the loop polled forever (or, as the poll
    # interval, slept NaN seconds and spun).
    _, result = await paused(setup, Script([EMAIL]))
    with pytest.raises(ValueError, match="wait"):
        await asyncio.wait_for(
            decisions_from_toolgate(
                setup.tools, result.output, wait=wait, poll_interval=poll_interval
            ),
            timeout=10,  # only a guard against the hang itself, not a timing assertion
        )


# -- idempotency keys -----------------------------------------------------------------------------


async def test_a_colliding_session_and_tool_call_id_do_not_replay_another_sessions_call(
    setup: Setup,
) -> None:
    # Session "team:bob", call "c" and session "team", call "bob:c" must be two calls: else the
    # second replays the first's approved outcome without anyone approving it.
    args = {"to": "bob@example.com", "body": "hello"}
    first = Script([("demo__send_email", args, "c")])
    bobs = agent_for(ToolgateToolset(setup.tools, session_id="team:bob"), first)
    result = await bobs.run("email bob")
    results = await record_decisions(setup.tools, result.output, {"c": "approve"}, by="alice")
    await bobs.run(message_history=result.all_messages(), deferred_tool_results=results)
    assert first.seen["c"] == ("success", "sent to bob@example.com")

    second = Script([("demo__send_email", args, "bob:c")])
    teams = agent_for(ToolgateToolset(setup.tools, session_id="team"), second)
    again = await teams.run("email bob")
    assert isinstance(again.output, DeferredToolRequests)  # its own call: a person decides
    assert "bob:c" not in second.seen
    assert sent_lines(setup) == ["bob@example.com|hello"]


def test_idempotency_keys_are_unambiguous() -> None:
    assert idempotency_key("a:b", "demo:note", "c", {}) != idempotency_key(
        "a", "demo:note", "b:c", {}
    )
    # Bounded and hashable whatever the ids hold (a lone surrogate from a provider's JSON).
    odd = idempotency_key("s", "demo:note", "\ud800" * 300, {})
    assert odd is not None and len(odd) <= 200 and odd.isascii()
    plain = idempotency_key("s", "demo:note", "call_1", {"text": "a"})
    assert plain is not None and json.loads(plain)[:3] == ["s", "demo:note", "call_1"]


async def test_a_tool_call_id_that_is_not_utf8_pauses_and_resumes(setup: Setup) -> None:
    # A lone surrogate is valid in a provider's JSON; the gateway's request key could not
    # encode it, so the model was told "crashed, try again" forever.
    odd = "call-\ud800"
    script = Script([("demo__send_email", {"to": "bob@example.com", "body": "odd"}, odd)])
    agent = agent_for(ToolgateToolset(setup.tools), script)
    result = await agent.run("email bob")
    assert isinstance(result.output, DeferredToolRequests)

    results = await record_decisions(setup.tools, result.output, {odd: "approve"}, by="alice")
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)
    assert script.seen[odd] == ("success", "sent to bob@example.com")
    assert sent_lines(setup) == ["bob@example.com|odd"]


# -- what the model is handed ---------------------------------------------------------------------


async def test_an_image_block_of_another_media_type_does_not_crash_the_run(setup: Setup) -> None:
    # An upstream labels an image block "text/html" (buggy or hostile): the tool ran, the run
    # must go on, and the model reads toolgate's note instead of the bytes.
    data = base64.b64encode(b"<script>x</script>").decode()

    @tool(namespace="up", effect="read_only")
    def chart() -> Any:
        """A chart."""
        return ContentResult(
            parse_blocks(
                [
                    {"type": "text", "text": "the chart"},
                    {"type": "image", "data": data, "mimeType": "text/html"},
                    {"type": "audio", "data": data, "mimeType": "image/png"},
                ]
            )
        )

    setup.gateway.add(chart)
    script = Script([("up__chart", {}, "i-1")])
    result = await agent_for(ToolgateToolset(setup.tools), script).run("chart")

    assert result.output == "done"
    outcome, text = script.seen["i-1"]
    assert outcome == "success" and "the chart" in text and "text/html" in text
    assert data not in "".join(script.shown)


# -- against a real toolgate serve ----------------------------------------------------------------


@pytest.fixture
async def remote(served_toolgate: ServedToolgate) -> AsyncIterator[Client]:
    async with Client(served_toolgate.url, key=served_toolgate.agent_key) as client:
        yield client


@pytest.mark.slow
async def test_a_long_tool_call_id_pauses_and_resumes_against_a_served_gateway(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    # The HTTP API takes tool call ids of 1 to 200 characters; a provider's (or a hostile
    # model's) longer id must not end the run with the API's 422 — and must still find its
    # request on resume.
    marker = "long tool call id"
    long_id = "call-" + "x" * 400
    script = Script([("demo__send_email", {"to": "bob@example.com", "body": marker}, long_id)])
    agent = agent_for(ToolgateToolset(remote), script)
    result = await agent.run("email bob")
    assert isinstance(result.output, DeferredToolRequests)

    served_toolgate.approve(approval_id(result, long_id))
    results = await decisions_from_toolgate(remote, result.output)
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)
    assert script.seen[long_id] == ("success", "sent to bob@example.com")
    sent = [line for line in served_toolgate.sent_lines() if line.endswith("|" + marker)]
    assert sent == [f"bob@example.com|{marker}"]
