"""Attacks on the Pydantic AI adapter: forged or altered resume state, model-chosen ids and
keys, hostile upstream content — each must be refused or neutralised, never run a side effect
without the approval that covers it.

Full runs with Pydantic AI's ``FunctionModel`` over the demo gateway (``integrations_support``);
"ran" is counted in the demo tools' side-effect log.
"""

from __future__ import annotations

from pydantic_ai import DeferredToolRequests, DeferredToolResults

from integrations_served import served_toolgate
from integrations_support import Setup, sent_lines
from test_integration_pydantic_ai import (
    EMAIL,
    Script,
    agent_for,
    approval_id,
    paused,
    setup,
)
from toolgate.integrations.pydantic_ai import (
    ToolgateToolset,
    idempotency_key,
    record_decisions,
)

__all__ = ["served_toolgate", "setup"]  # fixtures, imported for pytest


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
    assert idempotency_key("a:b", "c", "demo:note", {}) != idempotency_key(
        "a", "b:c", "demo:note", {}
    )
    # Bounded and hashable whatever the ids hold (a lone surrogate from a provider's JSON).
    odd = idempotency_key("s", "\ud800" * 300, "demo:note", {})
    assert odd is not None and len(odd) <= 200
    plain = idempotency_key("s", "call_1", "demo:note", {"text": "a"})
    assert plain is not None and plain.startswith("s:call_1:")
