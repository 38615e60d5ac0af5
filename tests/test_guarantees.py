"""Gateway guarantees through the public API: access policy, audit of every outcome, redaction,
audit failure behaviour, health phases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from toolgate import CallOutcome, CallStatus, ErrorCode, Gateway, ToolContext, ToolError, tool
from toolgate.formats.resource.policy import load_policy
from toolgate.health import Phase
from toolgate.model import ApprovalStatus
from toolgate.model.policy import AccessPolicy

SECRET = "sk-live-0123456789abcdef"


@tool(namespace="crm", effect="read_only", allowed_agents=["support/triage", "support/lead"])
def lookup(customer: str) -> str:
    """Look up a customer."""
    return f"found {customer}"


@tool(namespace="crm", effect="read_only", denied_namespaces=["sandbox"])
def search(query: str) -> str:
    """Search."""
    return f"results for {query}"


@tool(namespace="billing", effect="read_only")
def invoices(customer: str) -> list[str]:
    """List invoices."""
    return [f"{customer}-1"]


def deny_billing_for_interns() -> AccessPolicy:
    return load_policy(
        {
            "apiVersion": "joch.dev/v1alpha1",
            "kind": "Policy",
            "metadata": {"name": "interns-no-billing"},
            "spec": {
                "appliesTo": {"selector": {"matchLabels": {"team": "interns"}}},
                "rules": [
                    {
                        "when": {"tool.namespace": "billing"},
                        "action": "deny",
                        "reason": "interns do not see billing",
                    },
                    {"when": {"tool.id": "crm:search"}, "require": {"approval": "human"}},
                ],
            },
        },
        source="test-policy",
    )


@pytest.fixture
def gateway() -> Any:
    with gateway_with(
        policies=[deny_billing_for_interns()],
        agent_labels={"interns/ada": {"team": "interns"}},
    ) as gw:
        gw.add(lookup, search, invoices)
        yield gw


# -- access policy ---------------------------------------------------------------------------------


def _looks_unknown(outcome: CallOutcome, tool_id: str) -> None:
    """A tool the agent may not call does not exist for it: the answer of an unknown tool."""
    assert outcome.code is ErrorCode.TOOL_NOT_FOUND, outcome
    assert (outcome.message or "").startswith(f"There is no tool named {tool_id!r}.")
    assert outcome.detail is None and not outcome.metadata


def test_allowed_agents(gateway: Gateway) -> None:
    assert gateway.call_sync("crm:lookup", {"customer": "x"}, agent="support/triage").ok
    denied = gateway.call_sync("crm:lookup", {"customer": "x"}, agent="marketing/bot")
    _looks_unknown(denied, "crm:lookup")
    assert "listed agents" not in (denied.message or "")
    _looks_unknown(gateway.call_sync("crm:lookup", {"customer": "x"}), "crm:lookup")


def test_denied_namespaces(gateway: Gateway) -> None:
    assert gateway.call_sync("crm:search", {"query": "q"}, agent="prod/bot").ok
    denied = gateway.call_sync("crm:search", {"query": "q"}, agent="sandbox/bot")
    _looks_unknown(denied, "crm:search")
    assert "'sandbox'" not in (denied.message or "")


def test_a_policy_deny_beats_what_the_tool_allows(gateway: Gateway) -> None:
    assert gateway.call_sync("billing:invoices", {"customer": "c"}, agent="support/lead").ok
    denied = gateway.call_sync("billing:invoices", {"customer": "c"}, agent="interns/ada")
    _looks_unknown(denied, "billing:invoices")
    # Neither the rule nor other tools leak into the message.
    assert "interns" not in (denied.message or "") and "crm:" not in (denied.message or "")


def test_a_policy_can_require_approval(gateway: Gateway) -> None:
    outcome = gateway.call_sync("crm:search", {"query": "q"}, agent="interns/ada")
    assert outcome.code is ErrorCode.USER_REJECTION  # no approver configured on this gateway
    assert "interns-no-billing" in (outcome.message or "")
    with gateway_with(
        policies=[deny_billing_for_interns()],
        approver="queue",
        agent_labels={"interns/ada": {"team": "interns"}},
    ) as queued:
        queued.add(search)
        pending = queued.call_sync("crm:search", {"query": "q"}, agent="interns/ada")
        assert pending.status is CallStatus.PENDING_APPROVAL
        assert queued.call_sync("crm:search", {"query": "q"}, agent="prod/bot").ok


@pytest.mark.parametrize("agent", [None, "support/triage", "sandbox/bot", "interns/ada", "x/y"])
def test_listing_equals_calling(gateway: Gateway, agent: str | None) -> None:
    listed = {t.id for t in gateway.list_tools(agent=agent)}
    arguments = {
        "crm:lookup": {"customer": "c"},
        "crm:search": {"query": "q"},
        "billing:invoices": {"customer": "c"},
    }
    callable_ids = {
        tool_id
        for tool_id, args in arguments.items()
        if gateway.call_sync(tool_id, args, agent=agent).code is not ErrorCode.TOOL_NOT_FOUND
    }
    assert listed == callable_ids


def test_policy_resources_are_validated_with_field_names() -> None:
    with pytest.raises(ValueError, match=r"p\.yaml: spec\.rules\.0"):
        load_policy(
            {
                "apiVersion": "joch.dev/v1alpha1",
                "kind": "Policy",
                "metadata": {"name": "p"},
                "spec": {"rules": [{"when": {"tool.colour": "red"}, "action": "deny"}]},
            },
            source="p.yaml",
        )


# -- audit -----------------------------------------------------------------------------------------


@tool(
    namespace="mail",
    effect="read_only",
    secrets=["MAIL_TOKEN"],
    redact=["args.body", "args.recipients.*.email", "result.token"],
)
def send_preview(
    subject: str, body: str, recipients: list[dict[str, str]], ctx: ToolContext
) -> dict[str, Any]:
    """Preview a mail (read only)."""
    if subject == "fail":
        raise ToolError(f"refused: {body} (token {ctx.secrets['MAIL_TOKEN']})")
    return {"ok": True, "token": "t-123456", "echo": ctx.secrets["MAIL_TOKEN"]}


def audited(tmp_path: Path, **options: Any) -> Gateway:
    return gateway_with(
        audit_path=tmp_path / "audit.db",
        secrets={"MAIL_TOKEN": SECRET},
        **options,
    )


def test_every_outcome_is_audited_and_redacted_everywhere(tmp_path: Path) -> None:
    @tool(namespace="mail", effect="external_write")
    def send(to: str) -> str:
        """Send a mail."""
        return "sent"

    recipients = [{"email": "ada@example.org", "name": "Ada"}]
    with audited(tmp_path, approver="queue", state_path=tmp_path / "state.db") as gateway:
        gateway.add(send_preview, send, lookup)
        ok = gateway.call_sync(
            "mail:send_preview",
            {"subject": "hi", "body": "confidential body text", "recipients": recipients},
            agent="support/triage",
            session_id="s1",
        )
        failed = gateway.call_sync(
            "mail:send_preview",
            {"subject": "fail", "body": "confidential body text", "recipients": recipients},
        )
        invalid = gateway.call_sync("mail:send_preview", {"subject": 1})
        forbidden = gateway.call_sync("crm:lookup", {"customer": "c"}, agent="nobody")
        missing = gateway.call_sync("mail:nope", {})
        pending = gateway.call_sync("mail:send", {"to": "x"})
        assert pending.approval is not None
        decided = gateway.approvals.decide(pending.approval.id, "approve", by="bob")  # type: ignore[union-attr]
        assert decided.status is ApprovalStatus.APPROVED  # recorded only: the retry runs it
        approved = gateway.call_sync("mail:send", {"to": "x"})
        assert gateway.audit is not None and gateway.audit.flush(10)
        records = gateway.audit.query(limit=None)
    assert ok.ok and failed.code is ErrorCode.TOOL_ERROR and approved.ok
    by_call = {record.call_id: record for record in records}
    for outcome in (ok, failed, invalid, forbidden, missing, pending, approved):
        assert outcome.call_id in by_call, outcome
    record = by_call[ok.call_id]
    assert record.agent == "support/triage" and record.session == "s1"
    assert record.args["body"] == "[REDACTED]"
    assert record.args["recipients"][0]["email"] == "[REDACTED]"
    assert record.args["recipients"][0]["name"] == "Ada"
    assert record.result["token"] == "[REDACTED]"
    assert SECRET not in str(record.result)
    assert by_call[approved.call_id].approval_id == pending.approval.id
    raw = b"".join(
        path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith("audit")
    )
    for needle in (SECRET, "confidential body text", "ada@example.org", "t-123456"):
        assert needle.encode() not in raw, needle


def test_tools_above_local_write_fail_closed_when_the_audit_log_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool(namespace="mail", effect="communication", approval=False)
    def notify(text: str) -> str:
        """Notify a person."""
        return "notified"

    with audited(tmp_path) as gateway:
        gateway.add(notify, lookup)
        assert gateway.audit is not None
        assert gateway.call_sync("mail:notify", {"text": "a"}).ok
        monkeypatch.setattr(type(gateway.audit), "healthy", property(lambda self: False))
        down = gateway.call_sync("mail:notify", {"text": "b"})
        assert down.code is ErrorCode.UNAVAILABLE and "audit log" in (down.message or "")
        # Read-only tools keep working.
        assert gateway.call_sync("crm:lookup", {"customer": "c"}, agent="support/lead").ok


# -- health ----------------------------------------------------------------------------------------


def test_phase_transitions(tmp_path: Path) -> None:
    state = {"fail": False}

    @tool(namespace="svc", effect="read_only")
    def flaky() -> str:
        """Flaky."""
        if state["fail"]:
            raise ToolError("upstream down")
        return "fine"

    with Gateway() as gateway:
        gateway.add(flaky)
        for _ in range(5):
            gateway.call_sync("svc:flaky")
        status = gateway.status("svc:flaky")
        assert status.phase is Phase.READY and status.total_calls_7d == 5
        assert status.failure_rate_7d == 0 and status.p50 is not None
        state["fail"] = True
        for _ in range(5):
            gateway.call_sync("svc:flaky")
        degraded = gateway.status("svc:flaky")
        assert degraded.phase is Phase.DEGRADED
        assert degraded.failure_rate_7d == 0.5 and "upstream down" in (degraded.last_error or "")
        # Caller mistakes are not the tool's failures.
        for _ in range(20):
            gateway.call_sync("svc:flaky", {"unexpected": 1})
        assert gateway.status("svc:flaky").failure_rate_7d == pytest.approx(5 / 30)
        gateway.add_tool_folder(tmp_path / "none")  # no folders: nothing changes
        entry = gateway.registry.get("svc:flaky")
        assert entry is not None
        from toolgate.registry import RegisteredTool

        gateway.registry.replace(RegisteredTool(entry.tool, entry.binding, "runtime missing"))
        assert gateway.status("svc:flaky").phase is Phase.UNAVAILABLE
        broken = tmp_path / "tools" / "broken"
        broken.mkdir(parents=True)
        (broken / "tool.md").write_text("not front matter", encoding="utf-8")
        gateway.add_tool_folder(tmp_path / "tools")
        failed = [s for s in gateway.statuses() if s.phase is Phase.FAILED]
        assert failed and "broken" in failed[0].tool_id


def test_status_comes_from_the_audit_log_across_restarts(tmp_path: Path) -> None:
    with audited(tmp_path) as gateway:
        gateway.add(lookup)
        for _ in range(3):
            gateway.call_sync("crm:lookup", {"customer": "c"}, agent="support/lead")
    with audited(tmp_path) as restarted:
        restarted.add(lookup)
        assert restarted.status("crm:lookup").total_calls_7d == 3
        assert restarted.status("crm:lookup").to_dict()["totalCalls7d"] == 3


# -- rate limits and idempotency, as the gateway wires them ----------------------------------------


def test_daily_limits_hold_across_a_restart(tmp_path: Path) -> None:
    @tool(namespace="svc", effect="read_only", calls_per_day=3)
    def ping() -> str:
        """Ping."""
        return "pong"

    with gateway_with(state_path=tmp_path / "state.db") as gateway:
        gateway.add(ping)
        assert [gateway.call_sync("svc:ping").ok for _ in range(2)] == [True, True]
    with gateway_with(state_path=tmp_path / "state.db") as restarted:
        restarted.add(ping)
        assert restarted.call_sync("svc:ping").ok
        limited = restarted.call_sync("svc:ping")
        assert limited.code is ErrorCode.RATE_LIMITED and "Retry in" in (limited.message or "")


def test_idempotent_replay_through_the_gateway(tmp_path: Path) -> None:
    runs: list[str] = []

    @tool(namespace="pay", effect="read_only", idempotency_key="charge-{{ args.order | lower }}")
    def charge(order: str, amount: int) -> str:
        """Charge an order."""
        runs.append(order)
        return f"charged {amount}"

    with gateway_with(state_path=tmp_path / "state.db") as gateway:
        gateway.add(charge)
        first = gateway.call_sync("pay:charge", {"order": "A1", "amount": 5})
        again = gateway.call_sync("pay:charge", {"order": "A1", "amount": 5})
        # Same key (the template lowers the order), other arguments: a conflict, not a replay.
        conflict = gateway.call_sync("pay:charge", {"order": "a1", "amount": 5})
    assert first.ok and again.content == first.content and runs == ["A1"]
    assert again.metadata["idempotency"]["replayed"] is True
    assert conflict.code is ErrorCode.IDEMPOTENCY_CONFLICT
