"""Guarantee edge cases found in review: approvals meet rate limits, denials are audited, spilled
results and echoed secrets stay redacted wherever anything is kept, a lost audit file is noticed."""

from __future__ import annotations

from pathlib import Path

from gateway_support import gateway_with
from toolgate import ToolContext, tool
from toolgate.errors import ErrorCode

SECRET = "sk-live-REVIEW-4242-abcdef"


@tool(namespace="r", effect="external_write", approval=True, calls_per_minute=1)
def send(text: str) -> str:
    """Send a message."""
    return f"sent {text}"


@tool(namespace="r", effect="external_write", approval=True)
def post(text: str) -> str:
    """Post a message."""
    return f"posted {text}"


@tool(namespace="r", effect="read_only", redact=["result.token"])
def dump(size: int) -> dict[str, str]:
    """Return a large document with a token in it."""
    return {"token": "BIG-TOKEN-ABCDEF-1234", "data": "x" * size}


@tool(namespace="r", effect="read_only", secrets=["api_key"], idempotency_key="{{ args.n }}")
def echo_key(n: int, ctx: ToolContext) -> str:
    """Echo the key back (a badly written tool)."""
    return f"key={ctx.secrets['api_key']} n={n}"


@tool(namespace="r", effect="external_write", approval=False)
def note(text: str) -> str:
    """Write a note somewhere."""
    return text


def test_an_approved_call_is_not_counted_against_its_rate_limit_twice(tmp_path: Path) -> None:
    with gateway_with(approver="queue", state_path=tmp_path / "state.db") as gateway:
        gateway.add(send)
        pending = gateway.call_sync("r:send", {"text": "hi"}, agent="a")
        assert pending.approval is not None
        assert gateway.approvals is not None
        gateway.approvals.decide(pending.approval.id, "approve", by="alice")
        # The agent's retry runs the approved call: the limit (1 per minute) was used by the
        # agent's request, and the retry of the same call is not counted again.
        ran = gateway.call_sync("r:send", {"text": "hi"}, agent="a")
        assert ran.ok, ran
        assert ran.content == "sent hi"
        # The limit holds for new calls.
        again = gateway.call_sync("r:send", {"text": "other"}, agent="a")
        assert again.code is ErrorCode.RATE_LIMITED


def test_denials_and_always_allow_decisions_are_audited(tmp_path: Path) -> None:
    with gateway_with(
        approver="queue", state_path=tmp_path / "state.db", audit_path=tmp_path / "audit.db"
    ) as gateway:
        gateway.add(post)
        assert gateway.approvals is not None and gateway.audit is not None
        first = gateway.call_sync("r:post", {"text": "no"}, agent="a")
        assert first.approval is not None
        gateway.approvals.decide(first.approval.id, "deny", by="alice")
        # The denial is audited when it is decided, whether or not the agent calls again.
        denied = gateway.approvals.result(first.approval.id)
        assert denied is not None and denied.code is ErrorCode.USER_REJECTION
        second = gateway.call_sync("r:post", {"text": "yes"}, agent="a")
        assert second.approval is not None
        gateway.approvals.decide(second.approval.id, "always", by="alice")
        ran = gateway.call_sync("r:post", {"text": "yes"}, agent="a")  # the retry runs it
        assert ran.ok
        gateway.audit.flush()
        records = gateway.audit.query(tool_id="r:post")
        decisions = sorted((r.approval_decision, r.code or r.status) for r in records)
        assert ("deny", "user_rejection") in decisions
        assert ("always", "ok") in decisions
        assert next(r for r in records if r.approval_decision == "deny").args == {"text": "no"}


def test_a_spilled_result_keeps_its_redacted_paths_out_of_the_audit_log(tmp_path: Path) -> None:
    with gateway_with(
        audit_path=tmp_path / "audit.db",
        audit_jsonl=tmp_path / "audit.jsonl",
        overflow_limit=2000,
        preview_chars=500,
        spill_dir=tmp_path / "spill",
    ) as gateway:
        gateway.add(dump)
        outcome = gateway.call_sync("r:dump", {"size": 5000})
        assert outcome.ok and outcome.overflow is not None
        assert gateway.audit is not None
        gateway.audit.flush()
    for name in ("audit.db", "audit.jsonl"):
        for path in tmp_path.glob(f"{name}*"):
            assert b"BIG-TOKEN-ABCDEF-1234" not in path.read_bytes(), path


def test_echoed_secrets_are_not_kept_in_the_state_database(tmp_path: Path) -> None:
    state = tmp_path / "state.db"
    with gateway_with(secrets={"api_key": SECRET}, state_path=state, approver="queue") as gateway:
        gateway.add(echo_key)
        first = gateway.call_sync("r:echo_key", {"n": 1})
        assert first.ok
        replay = gateway.call_sync("r:echo_key", {"n": 1})
        assert replay.metadata["idempotency"]["replayed"] is True
        assert SECRET not in str(replay.content)
    for path in tmp_path.glob("state.db*"):
        assert SECRET.encode() not in path.read_bytes(), path


def test_a_removed_audit_database_is_noticed_and_recreated(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with gateway_with(audit_path=path) as gateway:
        gateway.add(note)
        assert gateway.audit is not None
        assert gateway.call_sync("r:note", {"text": "one"}).ok
        gateway.audit.flush()
        for file in tmp_path.glob("audit.db*"):
            file.unlink()
        assert gateway.call_sync("r:note", {"text": "two"}).ok
        gateway.audit.flush()
        assert path.exists()
        assert "removed or replaced" in (gateway.audit.last_error or "")
        assert [r.args for r in gateway.audit.query(tool_id="r:note")] == [{"text": "two"}]


def test_an_unreadable_audit_database_leaves_the_status_readable(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    path.write_bytes(b"this is not a database" * 100)
    with gateway_with(audit_path=path) as gateway:
        gateway.add(note)
        status = gateway.status("r:note")
        assert status.total_calls_7d == 0
        assert status.reason is not None and "no statistics" in status.reason


@tool(namespace="r", effect="read_only", secrets=["api_key"])
def leaky(ctx: ToolContext, email: str) -> str:
    """Fail and echo what it got (a badly written tool)."""
    raise RuntimeError(f"cannot reach {email} with {ctx.secrets['api_key']}")


def test_in_memory_statistics_keep_errors_redacted() -> None:
    with gateway_with(secrets={"api_key": SECRET}) as gateway:
        gateway.add(leaky)
        assert gateway.call_sync("r:leaky", {"email": "x@example.org"}).code is ErrorCode.TOOL_ERROR
        last_error = gateway.status("r:leaky").last_error or ""
        assert SECRET not in last_error and "[REDACTED]" in last_error


def test_a_secret_cut_by_the_edge_of_a_text_is_masked() -> None:
    from toolgate.redaction import MARKER, redact_edges

    assert redact_edges(SECRET[12:] + " and more", [SECRET]) == f"{MARKER} and more"
    assert redact_edges("tail ends with sk-live-RE", [SECRET]) == f"tail ends with {MARKER}"
    assert redact_edges("nothing to see", [SECRET]) == "nothing to see"
