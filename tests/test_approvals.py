"""The approval engine through the public Python API: requests, decisions, grants, approvers."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from toolgate import (
    ApprovalSpec,
    CallStatus,
    ConfirmationSpec,
    ErrorCode,
    Fact,
    Gateway,
    SideEffect,
    tool,
)
from toolgate.errors import ApprovalClosedError
from toolgate.model import ApprovalRequest, ApprovalStatus, Decision, SecurityVerdict
from toolgate.pipeline.approval_policy import ApprovalPolicy, ApprovalRule
from toolgate.registry import RegisteredTool

RUNS: list[dict[str, Any]] = []


@tool(namespace="gh", effect="external_write", title="Create GitHub issue")
def create_issue(repository: str, title: str) -> dict[str, Any]:
    """Create an issue."""
    RUNS.append({"repository": repository, "title": title})
    return {"url": f"https://example.org/{repository}/issues/{len(RUNS)}"}


@pytest.fixture(autouse=True)
def _reset_runs() -> None:
    RUNS.clear()


@pytest.fixture
def gateway(tmp_path: Path) -> Any:
    with gateway_with(approver="queue", state_path=tmp_path / "state.db") as gw:
        gw.add(create_issue)
        yield gw


ARGS = {"repository": "acme/app", "title": "Crash on start"}


def pending(gw: Gateway, arguments: dict[str, Any] = ARGS, **where: Any) -> ApprovalRequest:
    outcome = gw.call_sync("gh:create_issue", arguments, **where)
    assert outcome.status is CallStatus.PENDING_APPROVAL, outcome
    assert outcome.approval is not None
    assert outcome.approval.id in outcome.text  # the agent is told which request waits
    return outcome.approval


# -- the request -----------------------------------------------------------------------------------


def test_a_call_that_needs_approval_returns_a_request_and_does_not_run(gateway: Gateway) -> None:
    request = pending(gateway, workspace="/ws", agent="bot")
    assert RUNS == []
    assert request.title == "Create GitHub issue" and request.risk == "medium"
    assert request.facts == (("repository", "acme/app"), ("title", "Crash on start"))
    assert dict(request.arguments) == ARGS
    assert request.workspace == "/ws" and request.agent == "bot"
    assert request.expires_at - request.created_at == pytest.approx(300)
    assert [r.id for r in gateway.approvals.pending()] == [request.id]  # type: ignore[union-attr]


def test_a_retried_pending_call_attaches_to_the_same_request(gateway: Gateway) -> None:
    first = pending(gateway)
    second = pending(gateway)
    assert second.id == first.id
    assert len(gateway.approvals.pending()) == 1  # type: ignore[union-attr]


def test_approve_once_records_the_decision_and_the_retry_runs_it_once(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway, agent="bot")
    decided = approvals.decide(request.id, "approve", by="alice")
    assert decided.id == request.id and decided.status is ApprovalStatus.APPROVED
    assert decided.decided_by == "alice"
    # The decision ran nothing: there is no outcome until the agent's retry runs it.
    assert RUNS == [] and approvals.result(request.id) is None
    # Replaying the decision does not run it either.
    with pytest.raises(ApprovalClosedError, match="already decided"):
        approvals.decide(request.id, "approve", by="alice")
    assert RUNS == []
    # The agent's retry runs the approved call, once, as that agent.
    retry = gateway.call_sync("gh:create_issue", ARGS, agent="bot")
    assert retry.ok and len(RUNS) == 1
    assert retry.metadata["approval"] == {"id": request.id, "decision": "approve"}
    assert approvals.result(request.id).content == retry.content  # type: ignore[union-attr]
    assert approvals.get(request.id).status is ApprovalStatus.DELIVERED
    # After that, the same call asks anew.
    assert pending(gateway, agent="bot").id != request.id
    assert len(RUNS) == 1
    events = approvals.events(request.id)
    assert [event["kind"] for event in events][:3] == ["requested", "decided", "ran"]
    assert events[2]["actor"] == "bot"  # it ran as the agent that asked


def test_an_explicit_run_runs_once_and_the_retry_collects_the_result(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway)
    approvals.decide(request.id, "approve", by="alice")
    assert RUNS == []
    outcome = asyncio.run(approvals.run(request.id))  # a person asked to run it here
    assert outcome.ok and len(RUNS) == 1
    assert approvals.result(request.id).content == outcome.content  # type: ignore[union-attr]
    # Running it again does not run the tool again.
    again = asyncio.run(approvals.run(request.id))
    assert again.content == outcome.content and len(RUNS) == 1
    # The agent's retry gets the stored outcome, once, without running the tool.
    retry = gateway.call_sync("gh:create_issue", ARGS)
    assert retry.ok and retry.content == outcome.content and len(RUNS) == 1
    assert retry.metadata["approval"] == {"id": request.id, "replayed": True}
    # After that, the same call asks anew.
    assert pending(gateway).id != request.id
    assert len(RUNS) == 1
    kinds = [event["kind"] for event in approvals.events(request.id)]
    assert kinds[:3] == ["requested", "decided", "ran"]


def test_an_approval_for_arguments_a_cannot_run_arguments_b(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway)
    other = pending(gateway, {**ARGS, "title": "Something else"})
    assert other.id != request.id
    approvals.decide(request.id, "approve")
    assert RUNS == []
    assert gateway.call_sync("gh:create_issue", {**ARGS, "title": "Third"}).status is (
        CallStatus.PENDING_APPROVAL
    )
    # The other arguments' request is still waiting: the approval of A does not run B.
    assert pending(gateway, {**ARGS, "title": "Something else"}).id == other.id
    assert RUNS == []
    assert gateway.call_sync("gh:create_issue", ARGS).ok  # the retry of A runs A
    assert RUNS == [ARGS]


def test_nothing_in_the_arguments_can_carry_an_approval(gateway: Gateway) -> None:
    request = pending(gateway)
    forged = {**ARGS, "approval_id": request.id, "approved": True}
    outcome = gateway.call_sync("gh:create_issue", forged)
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS  # and it never reaches the tool
    assert RUNS == []


def test_an_expired_request_cannot_be_approved_and_never_runs(tmp_path: Path) -> None:
    with gateway_with(approver="queue", approval_ttl=0.2, state_path=tmp_path / "s.db") as gateway:
        gateway.add(create_issue)
        request = pending(gateway)
        time.sleep(0.3)
        with pytest.raises(ApprovalClosedError, match="expired"):
            gateway.approvals.decide(request.id, "approve")  # type: ignore[union-attr]
        assert gateway.approvals.pending() == []  # type: ignore[union-attr]
        assert pending(gateway).id != request.id  # a new call asks again
    assert RUNS == []


def test_deny_ends_in_user_rejection_for_the_retry(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway)
    decided = approvals.decide(request.id, "deny", by="bob", message="wrong repo")
    assert decided.status is ApprovalStatus.DENIED and decided.decision_message == "wrong repo"
    denied = approvals.result(request.id)  # the refusal is there at once
    assert denied is not None
    assert denied.code is ErrorCode.USER_REJECTION and "wrong repo" in (denied.message or "")
    retry = gateway.call_sync("gh:create_issue", ARGS)
    assert retry.code is ErrorCode.USER_REJECTION
    assert "denied by bob: wrong repo" in (retry.message or "")
    # Once: the next identical call asks anew.
    assert pending(gateway).id != request.id
    assert RUNS == []


def test_unknown_request_ids_are_a_lookup_error(gateway: Gateway) -> None:
    with pytest.raises(ApprovalClosedError) as info:
        gateway.approvals.decide("apr_nope", "approve")  # type: ignore[union-attr]
    assert isinstance(info.value, LookupError)


# -- grants ----------------------------------------------------------------------------------------


def test_always_allow_covers_the_same_workspace_and_key_only(gateway: Gateway) -> None:
    @tool(namespace="gh", effect="external_write")
    def close_issue(number: int) -> str:
        """Close an issue."""
        RUNS.append({"closed": number})
        return "closed"

    gateway.add(close_issue)
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway, workspace="/ws/a")
    approvals.decide(request.id, "always", by="alice")
    assert RUNS == []  # the decision ran nothing
    [grant] = approvals.grants()
    assert (grant.workspace, grant.tool_id, grant.granted_by) == (
        "/ws/a",
        "gh:create_issue",
        "alice",
    )
    # The agent's retry runs the approved call itself.
    retry = gateway.call_sync("gh:create_issue", ARGS, workspace="/ws/a")
    assert (
        retry.ok
        and retry.metadata["approval"] == {"id": request.id, "decision": "always"}
        and len(RUNS) == 1
    )
    # Same workspace, other arguments: no prompt.
    again = gateway.call_sync("gh:create_issue", {**ARGS, "title": "B"}, workspace="/ws/a")
    assert again.ok and again.metadata["approval"] == {"grant": grant.id}
    # Another workspace, or another tool: asks.
    assert pending(gateway, workspace="/ws/b").workspace == "/ws/b"
    other_tool = gateway.call_sync("gh:close_issue", {"number": 1}, workspace="/ws/a")
    assert other_tool.status is CallStatus.PENDING_APPROVAL
    assert len(RUNS) == 2


def test_a_changed_tool_definition_voids_grants_and_requests(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway)
    approvals.decide(request.id, "always")
    assert RUNS == []
    assert gateway.call_sync("gh:create_issue", ARGS).ok  # the retry runs it
    assert len(RUNS) == 1
    waiting = pending(gateway, {**ARGS, "title": "waiting"}, workspace="/elsewhere")
    approved = pending(gateway, {**ARGS, "title": "approved"}, workspace="/elsewhere")
    approvals.decide(approved.id, "approve")  # approved, not yet run by the retry
    entry = gateway.registry.get("gh:create_issue")
    assert entry is not None
    changed = dataclasses.replace(entry.tool, description="Create an issue (now also labels it).")
    gateway.registry.replace(RegisteredTool(changed, entry.binding))
    # The grant was for the definition the person saw: it no longer applies.
    assert gateway.call_sync("gh:create_issue", {**ARGS, "title": "B"}).status is (
        CallStatus.PENDING_APPROVAL
    )
    with pytest.raises(ApprovalClosedError, match="changed"):
        approvals.decide(waiting.id, "approve")
    # An approval given for the old definition does not run the changed tool on the retry.
    retry = gateway.call_sync(
        "gh:create_issue", {**ARGS, "title": "approved"}, workspace="/elsewhere"
    )
    assert retry.status is CallStatus.PENDING_APPROVAL and retry.approval is not None
    assert retry.approval.id != approved.id
    assert len(RUNS) == 1


def test_grants_survive_a_restart_and_can_be_revoked(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with gateway_with(approver="queue", state_path=state) as gateway:
        gateway.add(create_issue)
        request = pending(gateway)
        gateway.approvals.decide(request.id, "always")  # type: ignore[union-attr]
    with gateway_with(approver="queue", state_path=state) as restarted:
        restarted.add(create_issue)
        approvals = restarted.approvals
        assert approvals is not None
        [grant] = approvals.grants()
        assert restarted.call_sync("gh:create_issue", {**ARGS, "title": "B"}).ok
        assert approvals.revoke(grant.id) is True
        assert approvals.revoke(grant.id) is False
        assert approvals.grants() == []
        assert restarted.call_sync("gh:create_issue", {**ARGS, "title": "C"}).status is (
            CallStatus.PENDING_APPROVAL
        )


# -- approvers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "runs", "code"),
    [
        ("approve", 1, None),
        (Decision.ALWAYS, 1, None),
        (("deny", "not today"), 0, ErrorCode.USER_REJECTION),
    ],
)
def test_a_callback_approver_decides_when_the_caller_waits(
    answer: Any, runs: int, code: ErrorCode | None
) -> None:
    seen: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> Any:
        seen.append(request)
        return answer

    with Gateway(approver=approver) as gateway:
        gateway.add(create_issue)
        outcome = gateway.call_sync("gh:create_issue", ARGS, wait_for_approval=5)
        assert outcome.code is code and len(RUNS) == runs
        assert seen[0].title == "Create GitHub issue"
        if code is not None:
            assert "not today" in (outcome.message or "")
        # Without waiting, the request is returned as pending and the approver is not asked.
        assert gateway.call_sync("gh:create_issue", {**ARGS, "title": "x"}).status in (
            CallStatus.PENDING_APPROVAL,
            CallStatus.OK,  # the "always" grant covers it
        )


async def test_an_async_approver_and_await_call(tmp_path: Path) -> None:
    async def approver(request: ApprovalRequest) -> str:
        await asyncio.sleep(0)
        return "approve"

    async with Gateway(approver=approver) as gateway:
        gateway.add(create_issue)
        outcome = await gateway.call("gh:create_issue", ARGS, wait_for_approval=5)
    assert outcome.ok and len(RUNS) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "approver",
    [
        lambda request: 1 / 0,
        lambda request: "yes please",
        lambda request: True,
        lambda request: time.sleep(2) or "approve",
    ],
    ids=["raises", "nonsense", "bool", "too slow"],
)
def test_an_approver_that_fails_or_hangs_denies(approver: Any) -> None:
    with Gateway(approver=approver) as gateway:
        gateway.add(create_issue)
        outcome = gateway.call_sync("gh:create_issue", ARGS, wait_for_approval=0.5)
    assert outcome.code is ErrorCode.USER_REJECTION
    assert "approver" in (outcome.message or "")
    assert RUNS == []


def test_waiting_on_the_queue_sees_a_decision_made_elsewhere(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None

    async def scenario() -> Any:
        waiter = asyncio.create_task(gateway.call("gh:create_issue", ARGS, wait_for_approval=10))
        while not approvals.pending():
            await asyncio.sleep(0.02)
        [request] = approvals.pending()
        approvals.decide(request.id, "approve", by="web")
        return await waiter

    outcome = asyncio.run(scenario())
    assert outcome.ok and len(RUNS) == 1


# -- confirmation ----------------------------------------------------------------------------------


def test_build_confirmation_and_templates() -> None:
    @tool(
        namespace="gh",
        effect="external_write",
        build_confirmation=lambda args: {
            "title": f"Create an issue in {args['repository']}",
            "riskLabel": "high",
            "facts": [{"label": "Repository", "value": args["repository"]}],
        },
    )
    def built(repository: str) -> str:
        """Built."""
        return "ok"

    @tool(
        namespace="gh",
        effect="communication",
        approval=ApprovalSpec(
            confirmation=ConfirmationSpec(
                title="Send to {{ args.to }}",
                facts=(
                    Fact("Recipient", "{{ args.to }}"),
                    Fact("Words", "{{ args.text | wordcount }}"),
                ),
            )
        ),
    )
    def templated(to: str, text: str) -> str:
        """Templated."""
        return "sent"

    with Gateway(approver="queue") as gateway:
        gateway.add(built, templated)
        first = gateway.call_sync("gh:built", {"repository": "acme/app"}).approval
        second = gateway.call_sync("gh:templated", {"to": "ada", "text": "hi there"}).approval
    assert first is not None and second is not None
    assert (first.title, first.risk, first.facts) == (
        "Create an issue in acme/app",
        "high",
        (("Repository", "acme/app"),),
    )
    assert (second.title, second.risk) == ("Send to ada", "medium")
    assert second.facts == (("Recipient", "ada"), ("Words", "2"))


@pytest.mark.parametrize(
    "spec",
    [
        {"build_confirmation": lambda args: 1 / 0},
        {"build_confirmation": lambda args: "not a mapping"},
        {"approval": ApprovalSpec(confirmation=ConfirmationSpec(title="{{ args.missing }}"))},
        {
            "approval": ApprovalSpec(
                confirmation=ConfirmationSpec(
                    title="{{ ''.__class__.__mro__[1].__subclasses__() }}"
                )
            )
        },
    ],
    ids=["raises", "bad-return", "undefined", "sandbox-escape"],
)
def test_a_confirmation_that_fails_is_a_denial(spec: dict[str, Any]) -> None:
    @tool(namespace="x", effect="external_write", **spec)
    def act(value: str = "") -> str:
        """Act."""
        RUNS.append({})
        return "done"

    with Gateway(approver="queue") as gateway:
        gateway.add(act)
        outcome = gateway.call_sync("x:act", {})
    assert outcome.code is ErrorCode.USER_REJECTION
    assert "confirmation could not be built" in (outcome.message or "")
    assert RUNS == []


# -- Python security checks and the ask-a-person verdict -------------------------------------------


@pytest.mark.parametrize(
    ("verdict", "expected"),
    [
        ({"allowed": True}, "ok"),
        ({"allowed": True, "requiresApproval": True}, "ok"),
        ({"allowed": False, "message": "outside the repo"}, ErrorCode.SECURITY_BLOCKED),
        (
            SecurityVerdict(False, True, "file_write", "/etc/hosts", "wants /etc/hosts"),
            "pending",
        ),
    ],
)
def test_python_security_checks_have_the_four_outcomes(verdict: Any, expected: Any) -> None:
    received: list[dict[str, Any]] = []

    def check(payload: dict[str, Any]) -> Any:
        received.append(payload)
        return verdict

    @tool(namespace="fs", effect="local_write", security_check=check)
    def write(path: str) -> str:
        """Write."""
        RUNS.append({"path": path})
        return "written"

    with Gateway(approver="queue") as gateway:
        gateway.add(write)
        outcome = gateway.call_sync("fs:write", {"path": "x"}, workspace="/ws")
    assert received[0]["path"] == "x" and received[0]["args"] == {"path": "x"}
    assert received[0]["workspacePath"] == "/ws"
    if expected == "ok":
        assert outcome.ok
    elif expected == "pending":
        assert outcome.status is CallStatus.PENDING_APPROVAL and outcome.approval is not None
        assert outcome.approval.permission.type == "file_write"
        assert outcome.approval.permission.key == "/etc/hosts"
        assert outcome.approval.security_message == "wants /etc/hosts"
    else:
        assert outcome.code is expected


def test_always_allow_for_a_security_key_covers_that_key_only() -> None:
    def check(payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "allowed": False,
            "requiresApproval": True,
            "permissionType": "file_write",
            "permissionKey": payload["path"],
        }

    @tool(namespace="fs", effect="local_write", security_check=check)
    def write(path: str) -> str:
        """Write."""
        RUNS.append({"path": path})
        return "written"

    with Gateway(approver="queue") as gateway:
        gateway.add(write)
        approvals = gateway.approvals
        assert approvals is not None
        request = gateway.call_sync("fs:write", {"path": "a.txt"}).approval
        assert request is not None
        approvals.decide(request.id, "always")
        assert RUNS == []  # the decision ran nothing
        retried = gateway.call_sync("fs:write", {"path": "a.txt"})  # the retry runs it
        assert retried.ok and retried.metadata["approval"] == {
            "id": request.id,
            "decision": "always",
        }
        assert len(RUNS) == 1
        granted = gateway.call_sync("fs:write", {"path": "a.txt"})  # same key: no prompt, runs
        assert granted.ok and "grant" in granted.metadata["approval"]
        other = gateway.call_sync("fs:write", {"path": "b.txt"})
        assert other.status is CallStatus.PENDING_APPROVAL  # another key asks
    assert [run["path"] for run in RUNS] == ["a.txt", "a.txt"]


@pytest.mark.parametrize(
    "check",
    [lambda payload: 1 / 0, lambda payload: "yes", lambda payload: time.sleep(1) or {}],
    ids=["raises", "lies", "hangs"],
)
def test_a_failing_python_security_check_denies(check: Any) -> None:
    @tool(namespace="fs", security_check=check)
    def act() -> str:
        """Act."""
        RUNS.append({})
        return "done"

    entry_tool = dataclasses.replace(
        act.tool,
        security_check=dataclasses.replace(act.tool.security_check, timeout=0.3),  # type: ignore[arg-type]
    )
    with Gateway() as gateway:
        gateway.registry.add(RegisteredTool(entry_tool, act.binding))
        outcome = gateway.call_sync("fs:act")
    assert outcome.code is ErrorCode.SECURITY_BLOCKED
    assert RUNS == []


# -- operator policy -------------------------------------------------------------------------------


def _tool(level: str, required: bool | None = None, tool_id: str = "crm:create") -> Any:
    @tool(id=tool_id, effect=level, approval=required)
    def f() -> None:
        """F."""

    return f.tool


def test_operator_rules_can_only_make_approval_stricter_unless_they_override() -> None:
    read = _tool("read_only")
    write = _tool("external_write")
    assert ApprovalPolicy([ApprovalRule(True, namespace="crm")]).requires_approval(read)
    assert ApprovalPolicy([ApprovalRule(False, level=SideEffect.EXTERNAL_WRITE)]).requires_approval(
        write
    )
    waived = ApprovalPolicy([ApprovalRule(False, tool="crm:create", override=True)])
    assert waived.requires_approval(write) is False
    # The most specific rule wins; among equals, requiring wins.
    mixed = ApprovalPolicy(
        [
            ApprovalRule(True, level=SideEffect.EXTERNAL_WRITE),
            ApprovalRule(False, tool="crm:create", override=True),
        ]
    )
    assert mixed.requires_approval(write) is False
    both = ApprovalPolicy(
        [
            ApprovalRule(True, tool="crm:create"),
            ApprovalRule(False, tool="crm:create", override=True),
        ]
    )
    assert both.requires_approval(write) is True
    with pytest.raises(ValueError, match="exactly one"):
        ApprovalRule(True, tool="a:b", namespace="a")


def test_approval_rules_reach_the_gateway() -> None:
    @tool(namespace="crm", effect="read_only")
    def lookup() -> str:
        """Lookup."""
        return "found"

    with gateway_with(approver="queue", approval_rules=[ApprovalRule(True, namespace="crm")]) as gw:
        gw.add(lookup)
        assert gw.call_sync("crm:lookup").status is CallStatus.PENDING_APPROVAL


async def test_two_racing_retries_run_an_approved_call_once(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = (await gateway.call("gh:create_issue", ARGS)).approval
    assert request is not None
    approvals.decide(request.id, "approve")
    assert RUNS == []
    first, second = await asyncio.gather(
        gateway.call("gh:create_issue", ARGS), gateway.call("gh:create_issue", ARGS)
    )
    statuses = sorted(str(o.status) for o in (first, second))
    assert statuses == ["ok", "pending_approval"]  # one runs it, the other does not
    assert len(RUNS) == 1
    assert approvals.get(request.id).status is ApprovalStatus.DELIVERED


async def test_two_racing_retries_collect_an_explicitly_run_outcome_once(
    gateway: Gateway,
) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    request = (await gateway.call("gh:create_issue", ARGS)).approval
    assert request is not None
    approvals.decide(request.id, "approve")
    assert (await approvals.run(request.id)).ok and len(RUNS) == 1
    first, second = await asyncio.gather(
        gateway.call("gh:create_issue", ARGS), gateway.call("gh:create_issue", ARGS)
    )
    statuses = sorted(str(o.status) for o in (first, second))
    assert statuses == ["ok", "pending_approval"]  # one collects, the other asks anew
    assert len(RUNS) == 1
    assert approvals.get(request.id).status is ApprovalStatus.DELIVERED


async def test_a_decision_made_elsewhere_while_the_approver_is_asked_wins() -> None:
    import threading

    asked = threading.Event()
    release = threading.Event()

    class SlowApprover:
        name = "carol"

        def __call__(self, request: ApprovalRequest) -> str:
            asked.set()
            release.wait(5)
            return "deny"  # too late: someone already approved it

    async with Gateway(approver=SlowApprover()) as gateway:
        gateway.add(create_issue)
        approvals = gateway.approvals
        assert approvals is not None
        waiter = asyncio.create_task(gateway.call("gh:create_issue", ARGS, wait_for_approval=5))
        await asyncio.to_thread(asked.wait, 5)
        [request] = approvals.pending()
        approvals.decide(request.id, "approve", by="dave")
        release.set()
        outcome = await waiter
        assert approvals.get(request.id).decided_by == "dave"
    assert outcome.ok and len(RUNS) == 1


def test_the_approver_can_say_who_decided() -> None:
    class Named:
        name = "erin"

        def __call__(self, request: ApprovalRequest) -> str:
            return "approve"

    with Gateway(approver=Named()) as gateway:
        gateway.add(create_issue)
        outcome = gateway.call_sync("gh:create_issue", ARGS, wait_for_approval=5)
        approval_id = outcome.metadata["approval"]["id"]
        assert gateway.approvals.get(approval_id).decided_by == "erin"  # type: ignore[union-attr]


# -- review findings -------------------------------------------------------------------------------


def test_a_relative_workspace_is_resolved_so_a_grant_stays_in_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder_a, folder_b = tmp_path / "a", tmp_path / "b"
    folder_a.mkdir()
    folder_b.mkdir()
    with Gateway(approver="queue") as gateway:
        gateway.add(create_issue)
        approvals = gateway.approvals
        assert approvals is not None
        monkeypatch.chdir(folder_a)
        request = pending(gateway, workspace=".")
        assert request.workspace == str(folder_a)
        approvals.decide(request.id, "always")
        monkeypatch.chdir(folder_b)
        elsewhere = gateway.call_sync("gh:create_issue", ARGS, workspace=".")
        # Neither the grant nor the approved request: nothing runs in folder b.
        assert elsewhere.status is CallStatus.PENDING_APPROVAL
        assert elsewhere.approval is not None and elsewhere.approval.id != request.id
        assert RUNS == []
        monkeypatch.chdir(folder_a)
        here = gateway.call_sync("gh:create_issue", ARGS, workspace=".")  # the retry in folder a
        assert here.ok and here.metadata["approval"] == {"id": request.id, "decision": "always"}
    assert len(RUNS) == 1


async def test_a_decision_racing_the_agents_retry_runs_the_call_once(gateway: Gateway) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    for decision in ("approve", "always"):
        RUNS.clear()
        arguments = {**ARGS, "title": decision}
        request = (await gateway.call("gh:create_issue", arguments)).approval
        assert request is not None
        decided, retried = await asyncio.gather(
            asyncio.to_thread(approvals.decide, request.id, decision),
            gateway.call("gh:create_issue", arguments),
        )
        assert decided.status is ApprovalStatus.APPROVED
        # The retry either came first (still pending: nothing ran) or ran the approved call.
        if retried.status is CallStatus.PENDING_APPROVAL:
            assert RUNS == [] and retried.approval is not None
            assert retried.approval.id == request.id
            retried = await gateway.call("gh:create_issue", arguments)
        assert retried.ok and len(RUNS) == 1, decision
        assert retried.metadata["approval"] == {"id": request.id, "decision": decision}
        assert approvals.get(request.id).status is ApprovalStatus.DELIVERED
        if decision == "approve":  # once: the same call asks anew
            again = await gateway.call("gh:create_issue", arguments)
            assert again.status is CallStatus.PENDING_APPROVAL and len(RUNS) == 1


async def test_an_explicit_run_racing_the_agents_retry_runs_the_call_once(
    gateway: Gateway,
) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    for decision in ("approve", "always"):
        RUNS.clear()
        arguments = {**ARGS, "title": decision}
        request = (await gateway.call("gh:create_issue", arguments)).approval
        assert request is not None
        approvals.decide(request.id, decision)
        ran, retried = await asyncio.gather(
            approvals.run(request.id), gateway.call("gh:create_issue", arguments)
        )
        assert ran.ok and len(RUNS) == 1, decision
        # The retry either ran it (and the run got its outcome) or was told it is running.
        assert retried.ok or retried.status is CallStatus.PENDING_APPROVAL
        if retried.status is CallStatus.PENDING_APPROVAL:
            collected = await gateway.call("gh:create_issue", arguments)
            assert collected.ok and collected.metadata["approval"]["replayed"] is True
        assert len(RUNS) == 1, decision


def test_changing_a_python_tools_code_ends_its_grants() -> None:
    def first_version(repository: str, title: str) -> str:
        """Create an issue."""
        RUNS.append({"v": 1})
        return "v1"

    def second_version(repository: str, title: str) -> str:
        """Create an issue."""
        RUNS.append({"v": 2})
        return "EVIL"

    one = tool(first_version, id="gh:create", effect="external_write")
    two = tool(second_version, id="gh:create", effect="external_write")
    assert one.tool.definition_hash != two.tool.definition_hash
    with Gateway(approver="queue") as gateway:
        gateway.add(one)
        request = pending_for(gateway, "gh:create")
        gateway.approvals.decide(request.id, "always")  # type: ignore[union-attr]
        assert RUNS == []
        assert gateway.call_sync("gh:create", ARGS).ok  # the retry runs version one
        gateway.remove("gh:create")
        gateway.add(two)
        changed = gateway.call_sync("gh:create", {**ARGS, "title": "again"})
        assert changed.status is CallStatus.PENDING_APPROVAL
    assert RUNS == [{"v": 1}]


def pending_for(gateway: Gateway, tool_id: str) -> ApprovalRequest:
    outcome = gateway.call_sync(tool_id, ARGS)
    assert outcome.approval is not None, outcome
    return outcome.approval


def test_rules_accept_level_names_as_strings() -> None:
    rule = ApprovalRule(True, level="local_write")  # type: ignore[arg-type]
    assert ApprovalPolicy([rule]).requires_approval(_tool("local_write"))


async def test_concurrent_identical_calls_share_one_request(gateway: Gateway) -> None:
    outcomes = await asyncio.gather(*(gateway.call("gh:create_issue", ARGS) for _ in range(8)))
    ids = {o.approval.id for o in outcomes if o.approval is not None}
    assert len(ids) == 1 and len(gateway.approvals.pending()) == 1  # type: ignore[union-attr]


def test_a_confirmation_builder_that_hangs_is_a_denial(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgate.pipeline import approval as approval_stage

    monkeypatch.setattr(approval_stage, "CONFIRMATION_TIMEOUT", 0.2)

    @tool(namespace="x", effect="external_write", build_confirmation=lambda a: time.sleep(2))
    def slow() -> str:
        """Slow to confirm."""
        return "ran"

    with Gateway(approver="queue") as gateway:
        gateway.add(slow)
        outcome = gateway.call_sync("x:slow")
    assert outcome.code is ErrorCode.USER_REJECTION
    assert "could not be built" in (outcome.message or "")


@tool(namespace="ops", effect="external_write")
def deploy(target: str) -> str:
    """Deploy, answering with the dashboard's address (credentials included, as some do)."""
    RUNS.append({"target": target})
    return f"deployed; see https://ops:hunter2@dash.example/{target}"


def test_the_outcome_an_approved_retry_stores_is_kept_without_url_credentials(
    gateway: Gateway,
) -> None:
    approvals = gateway.approvals
    assert approvals is not None
    gateway.add(deploy)
    request = gateway.call_sync("ops:deploy", {"target": "prod"}).approval
    assert request is not None
    approvals.decide(request.id, "approve", by="alice")
    ran = gateway.call_sync("ops:deploy", {"target": "prod"})
    assert ran.ok and len(RUNS) == 1
    kept = approvals.result(request.id)  # what people see on the request's page and the API
    assert kept is not None and "hunter2" not in str(kept.content)


def test_an_always_decision_landing_during_the_retrys_lookup_closes_the_request(
    gateway: Gateway,
) -> None:
    """The retry found the request pending, then the "always" decision stored its grant: the
    retry runs the call as the request's run, so the request is not left approved (and
    runnable once more) behind it."""
    approvals = gateway.approvals
    assert approvals is not None
    request = pending(gateway)
    store = approvals.store
    find_grant = store.find_grant

    def decided_meanwhile(**key: Any) -> Any:
        if approvals.get(request.id).status is ApprovalStatus.PENDING:
            approvals.decide(request.id, "always", by="alice")
        return find_grant(**key)

    store.find_grant = decided_meanwhile  # type: ignore[method-assign]
    ran = gateway.call_sync("gh:create_issue", ARGS)
    assert ran.ok and len(RUNS) == 1
    assert ran.metadata["approval"] == {"id": request.id, "decision": "always"}
    assert approvals.get(request.id).status is ApprovalStatus.DELIVERED
