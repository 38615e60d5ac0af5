"""A framework's tool call id and a caller's idempotency key, through ``Gateway.call`` and the
HTTP API: each tool call id has its own approval request, and a call named by a key runs once."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gateway_support import gateway_with
from http_api_support import ALICE_KEY, make_app
from integrations_support import approval_gateway, demo_tools, sent_lines
from toolgate import CallStatus

EMAIL = {"to": "ana@example.com", "body": "hello"}


async def test_two_calls_with_equal_arguments_and_their_own_ids_are_asked_for_apart(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        first = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="call_a")
        second = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="call_b")
        assert first.status is CallStatus.PENDING_APPROVAL
        assert second.status is CallStatus.PENDING_APPROVAL
        assert first.approval is not None and second.approval is not None
        assert first.approval.id != second.approval.id
        # Deciding b says nothing about a: a's retry is still pending, b's runs.
        await setup.tools.decide(second.approval.id, "deny", by="alice")
        await setup.tools.decide(first.approval.id, "approve", by="alice")
        again_b = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="call_b")
        again_a = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="call_a")
        assert again_b.code is not None and again_b.code.value == "user_rejection"
        assert again_a.status is CallStatus.OK
        assert sent_lines(setup) == ["ana@example.com|hello"]


async def test_a_retry_without_the_tool_call_id_does_not_take_a_named_calls_approval(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        named = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="call_a")
        assert named.approval is not None
        await setup.tools.decide(named.approval.id, "approve", by="alice")
        anonymous = await setup.tools.call("demo:send_email", EMAIL)
        assert anonymous.status is CallStatus.PENDING_APPROVAL
        assert sent_lines(setup) == []


async def test_a_call_named_by_a_key_runs_once_across_a_pause_and_two_resumes(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        named = {"tool_call_id": "call_a", "idempotency_key": "run-1:call_a"}
        asked = await setup.tools.call("demo:send_email", EMAIL, **named)
        assert asked.status is CallStatus.PENDING_APPROVAL and asked.approval is not None
        await setup.tools.decide(asked.approval.id, "approve", by="alice")
        ran = await setup.tools.call("demo:send_email", EMAIL, **named)
        replayed = await setup.tools.call("demo:send_email", EMAIL, **named)
        assert ran.status is CallStatus.OK
        assert replayed.status is CallStatus.OK
        assert replayed.metadata["idempotency"]["replayed"] is True
        assert replayed.metadata["idempotency"]["original_call_id"] == ran.call_id
        assert sent_lines(setup) == ["ana@example.com|hello"]


async def test_a_callers_key_with_other_arguments_is_a_conflict(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        first = await setup.tools.call("demo:note", {"text": "a"}, idempotency_key="k")
        other = await setup.tools.call("demo:note", {"text": "b"}, idempotency_key="k")
        assert first.status is CallStatus.OK
        assert other.code is not None and other.code.value == "idempotency_conflict"
        assert sent_lines(setup) == ["note|a"]


async def test_a_callers_key_is_per_agent(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        mine = await setup.gateway.call("demo:note", {"text": "a"}, agent="a", idempotency_key="k")
        theirs = await setup.gateway.call(
            "demo:note", {"text": "a"}, agent="b", idempotency_key="k"
        )
        assert mine.status is CallStatus.OK and theirs.status is CallStatus.OK
        assert "idempotency" not in theirs.metadata or not theirs.metadata["idempotency"].get(
            "replayed"
        )
        assert sent_lines(setup) == ["note|a", "note|a"]


async def test_a_read_only_tool_runs_every_time_whatever_the_key(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        first = await setup.tools.call("demo:lookup", {"city": "Oslo"}, idempotency_key="k")
        second = await setup.tools.call("demo:lookup", {"city": "Bergen"}, idempotency_key="k")
        assert first.status is CallStatus.OK and second.status is CallStatus.OK
        assert second.text == "sunny in Bergen"
        assert "idempotency" not in second.metadata


async def test_approval_needed_is_false_once_an_always_grant_covers_the_tool(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        assert await setup.tools.approval_needed("demo:send_email")
        assert not await setup.tools.approval_needed("demo:lookup")
        assert not await setup.tools.approval_needed("demo:no_such_tool")
        asked = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="call_a")
        assert asked.approval is not None
        await setup.tools.decide(asked.approval.id, "always", by="alice")
        assert not await setup.tools.approval_needed("demo:send_email")
        # The grant is per workspace: another folder is asked for again.
        assert await setup.tools.approval_needed("demo:send_email", workspace=str(tmp_path))


def test_approval_needed_is_false_when_nobody_could_be_asked(tmp_path: Path) -> None:
    # Without an approver such a call is denied at once: nobody is asked.
    with gateway_with() as gateway:
        gateway.add(demo_tools(tmp_path / "sent.log"))
        assert not gateway.approval_needed("demo:send_email", agent="planner")
        outcome = gateway.call_sync("demo:send_email", EMAIL, agent="planner")
        assert outcome.code is not None and outcome.code.value == "user_rejection"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tool_call_id", ""),
        ("tool_call_id", "x" * 201),
        ("idempotency_key", ""),
        ("tool_call_id", 7),
    ],
)
def test_the_http_api_refuses_a_malformed_call_name(
    tmp_path: Path, field: str, value: object
) -> None:
    with (
        approval_gateway(tmp_path) as setup,
        TestClient(
            make_app(setup.gateway), headers={"Authorization": f"Bearer {ALICE_KEY}"}
        ) as client,
    ):
        answer = client.post(
            "/v1/tools/demo:note/call", json={"arguments": {"text": "a"}, field: value}
        )
        assert answer.status_code == 422, answer.text
        assert field in answer.text
        assert sent_lines(setup) == []


def test_the_http_api_passes_the_tool_call_id_and_the_key_on(tmp_path: Path) -> None:
    with (
        approval_gateway(tmp_path) as setup,
        TestClient(
            make_app(setup.gateway), headers={"Authorization": f"Bearer {ALICE_KEY}"}
        ) as client,
    ):
        body = {"arguments": EMAIL, "tool_call_id": "call_a", "idempotency_key": "run:call_a"}
        asked = client.post("/v1/tools/demo:send_email/call", json=body)
        assert asked.status_code == 202
        other = client.post(
            "/v1/tools/demo:send_email/call", json={**body, "tool_call_id": "call_b"}
        )
        assert other.json()["approval"]["id"] != asked.json()["approval"]["id"]
        assert setup.gateway.approvals is not None
        setup.gateway.approvals.decide(asked.json()["approval"]["id"], "approve", by="alice")
        ran = client.post("/v1/tools/demo:send_email/call", json=body)
        replayed = client.post("/v1/tools/demo:send_email/call", json=body)
        assert ran.status_code == 200 and ran.json()["status"] == "ok"
        assert replayed.json()["status"] == "ok"
        assert sent_lines(setup) == ["ana@example.com|hello"]


async def test_the_same_tool_call_id_in_two_sessions_is_two_calls(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        one = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="c", session_id="s1")
        two = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="c", session_id="s2")
        assert one.approval is not None and two.approval is not None
        assert one.approval.id != two.approval.id
        await setup.tools.decide(one.approval.id, "approve", by="alice")
        other = await setup.tools.call("demo:send_email", EMAIL, tool_call_id="c", session_id="s2")
        assert other.status is CallStatus.PENDING_APPROVAL
        assert sent_lines(setup) == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"session_id": "s\udc80"}, "session_id"),
        ({"tool_call_id": "c\udc80"}, "tool_call_id"),
        ({"tool_call_id": "x" * 201}, "tool_call_id"),
        ({"idempotency_key": "k\x00"}, "idempotency_key"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"workspace": "/tmp/a\x00b"}, "workspace"),
    ],
)
async def test_a_call_whose_own_fields_are_not_text_is_refused_naming_the_field(
    tmp_path: Path, fields: dict[str, str], named: str
) -> None:
    # A lone surrogate (a JSON "\udc80" escape) cannot be stored or digested, a NUL names no
    # folder: the call is refused, never a crash, and nothing runs.
    with approval_gateway(tmp_path) as setup:
        outcome = await setup.gateway.call("demo:note", {"text": "a"}, agent="planner", **fields)
        assert outcome.code is not None and outcome.code.value == "invalid_arguments"
        assert named in (outcome.message or "")
        synced = setup.gateway.call_sync("demo:note", {"text": "a"}, agent="planner", **fields)
        assert synced.code is not None and synced.code.value == "invalid_arguments"
        assert sent_lines(setup) == []
        assert not setup.gateway.approval_needed("demo:send_email", workspace="/tmp/a\x00b")


@pytest.mark.parametrize(
    "arguments",
    [{"to": "a\udc80", "body": "b"}, {"to": "a", "body": {"x": ["\ud800"]}}, {"t\udc80": "a"}],
)
async def test_arguments_that_are_not_text_are_refused_before_anything_digests_them(
    tmp_path: Path, arguments: dict[str, object]
) -> None:
    with approval_gateway(tmp_path) as setup:
        outcome = await setup.gateway.call("demo:send_email", arguments, agent="planner")
        assert outcome.code is not None and outcome.code.value == "invalid_arguments"
        assert "not valid Unicode text" in (outcome.message or "")


async def test_request_approval_makes_the_calls_request_and_never_runs_it(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = setup.tools
        asked = await tools.request_approval(
            "demo:send_email", EMAIL, session_id="s", tool_call_id="c"
        )
        assert asked is not None and asked.status.value == "pending"
        # Asked again: the same request; the call itself attaches to it too.
        again = await tools.request_approval(
            "demo:send_email", EMAIL, session_id="s", tool_call_id="c"
        )
        assert again is not None and again.id == asked.id
        call = await tools.call("demo:send_email", EMAIL, session_id="s", tool_call_id="c")
        assert call.approval is not None and call.approval.id == asked.id
        await tools.decide(asked.id, "approve", by="alice")
        # Decided: shown as it stands, never taken — the call takes it and runs once.
        decided = await tools.request_approval(
            "demo:send_email", EMAIL, session_id="s", tool_call_id="c"
        )
        assert decided is not None and decided.status.value == "approved"
        assert sent_lines(setup) == []
        ran = await tools.call("demo:send_email", EMAIL, session_id="s", tool_call_id="c")
        assert ran.status is CallStatus.OK
        assert sent_lines(setup) == ["ana@example.com|hello"]


async def test_request_approval_is_none_when_nobody_would_be_asked(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = setup.tools
        assert await tools.request_approval("demo:lookup", {"city": "Oslo"}) is None
        assert await tools.request_approval("demo:nope", {}) is None
        assert await tools.request_approval("demo:send_email", {"to": 1}) is None  # invalid
        first = await tools.request_approval("demo:send_email", EMAIL, tool_call_id="a")
        assert first is not None
        await tools.decide(first.id, "always", by="alice")
        # A grant covers the tool now: nobody is asked, and nothing ran.
        assert await tools.request_approval("demo:send_email", EMAIL, tool_call_id="b") is None
        assert sent_lines(setup) == []


async def test_request_approval_is_none_when_the_call_would_replay_its_key(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = setup.tools
        keyed = {"session_id": "s", "tool_call_id": "k", "idempotency_key": "s:k"}
        asked = await tools.request_approval("demo:send_email", EMAIL, **keyed)
        assert asked is not None
        await tools.decide(asked.id, "approve", by="alice")
        ran = await tools.call("demo:send_email", EMAIL, **keyed)
        assert ran.status is CallStatus.OK
        # It ran under that key: the call replays it, so nobody is asked again.
        assert await tools.request_approval("demo:send_email", EMAIL, **keyed) is None
        assert setup.gateway.approvals is not None and setup.gateway.approvals.pending() == []
        # Other arguments under the key: a conflict the call reports — nobody is asked either.
        other = {**EMAIL, "body": "other"}
        assert await tools.request_approval("demo:send_email", other, **keyed) is None
        conflict = await tools.call("demo:send_email", other, **keyed)
        assert conflict.code is not None and conflict.code.value == "idempotency_conflict"
        # Without the key the same call is asked for as before.
        assert await tools.request_approval("demo:send_email", EMAIL, tool_call_id="k") is not None
        assert sent_lines(setup) == ["ana@example.com|hello"]
