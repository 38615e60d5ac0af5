"""Redaction: paths (nested, ``*`` over keys and list items), secrets and echoed values."""

from __future__ import annotations

import copy
from typing import Any

from toolgate import tool
from toolgate.audit import MARKER, record_from, redact, redact_text, redact_values
from toolgate.errors import ErrorCode
from toolgate.model import CallOutcome, CallStatus
from toolgate.pipeline.observers import FinishedCall


def test_nested_paths_are_masked_and_the_input_is_untouched() -> None:
    args = {"body": "hello there", "to": {"email": "a@example.com", "name": "Ann"}, "n": 3}
    before = copy.deepcopy(args)
    out = redact(args, ["args.body", "args.to.email"], prefix="args")
    assert out == {"body": MARKER, "to": {"email": MARKER, "name": "Ann"}, "n": 3}
    assert args == before


def test_star_matches_any_key_and_any_list_item() -> None:
    result = {
        "items": [{"token": "tok-1111", "id": 1}, {"token": "tok-2222", "id": 2}],
        "accounts": {"a": {"pin": "9999"}, "b": {"pin": "8888"}},
    }
    removed: set[str] = set()
    out = redact(
        result,
        ["result.items.*.token", "result.accounts.*.pin", "args.ignored"],
        prefix="result",
        removed=removed,
    )
    assert out["items"] == [{"token": MARKER, "id": 1}, {"token": MARKER, "id": 2}]
    assert out["accounts"] == {"a": {"pin": MARKER}, "b": {"pin": MARKER}}
    assert removed == {"tok-1111", "tok-2222", "9999", "8888"}


def test_a_list_index_and_a_whole_subtree() -> None:
    value = {"rows": [["x", "first-secret"], ["y", "second"]], "meta": {"deep": {"k": "value"}}}
    removed: set[str] = set()
    out = redact(value, ["args.rows.0.1", "args.meta"], prefix="args", removed=removed)
    assert out == {"rows": [["x", MARKER], ["y", "second"]], "meta": MARKER}
    assert removed == {"first-secret", "value"}


def test_a_path_equal_to_the_prefix_masks_everything() -> None:
    assert redact({"a": 1}, ["result"], prefix="result") == MARKER


def test_paths_that_do_not_exist_change_nothing() -> None:
    value = {"a": "text", "b": [1, 2]}
    assert redact(value, ["args.zzz.*.q", "args.a.deeper"], prefix="args") == value


def test_secrets_are_masked_inside_strings_and_keys() -> None:
    secret = "s3cr3t-value"
    value = {"note": f"token={secret};", f"key-{secret}": [f"{secret}{secret}", "clean"]}
    out = redact(value, [], prefix="args", secrets=[secret])
    assert out == {"note": f"token={MARKER};", f"key-{MARKER}": [MARKER + MARKER, "clean"]}


def test_short_values_are_not_searched_for() -> None:
    assert redact_text("a bad abc", ["a", "abc"]) == "a bad abc"
    assert redact_text("the pass word", ["pass"]) == f"the {MARKER} word"


def test_longer_values_win_over_their_substrings() -> None:
    assert redact_text("key=abcdefgh", ["abcd", "abcdefgh"]) == f"key={MARKER}"


def test_redact_values_masks_numbers_that_contain_a_value() -> None:
    assert redact_values({"pin": 12345678, "ok": 7, "flag": True}, ["12345678"]) == {
        "pin": MARKER,
        "ok": 7,
        "flag": True,
    }


def _outcome(**kwargs: Any) -> CallOutcome:
    base: dict[str, Any] = {"status": CallStatus.OK, "tool_id": "demo:send", "call_id": "c1"}
    return CallOutcome(**{**base, **kwargs})


def test_record_masks_echoes_in_the_message_the_stderr_tail_and_visualization() -> None:
    @tool(id="demo:send", redact=["args.body", "result.token"])
    def send(body: str, to: str) -> dict[str, str]:
        """Send a message."""
        return {"token": "x"}

    body = "the quarterly numbers are bad"
    failed = FinishedCall(
        call_id="c1",
        tool_id="demo:send",
        tool=send.tool,
        arguments={"body": body, "to": "bob"},
        agent="agent-1",
        session_id=None,
        workspace=None,
        started_at=1000.0,
        outcome=_outcome(
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_ERROR,
            message=f"the script failed: cannot send {body!r}",
            detail=f"stderr: Traceback ... ValueError: {body}",
        ),
    )
    record = record_from(failed)
    assert record.args == {"body": MARKER, "to": "bob"}
    assert body not in (record.message or "") and MARKER in (record.message or "")
    assert body not in (record.detail or "")
    assert record.result is None

    ok = FinishedCall(
        call_id="c2",
        tool_id="demo:send",
        tool=send.tool,
        arguments={"body": "short note here", "to": "bob"},
        agent=None,
        session_id=None,
        workspace=None,
        started_at=1000.0,
        outcome=_outcome(
            content={"token": "tok-abcdef", "status": "sent"},
            visualization={"type": "markdown", "content": "sent with tok-abcdef: short note here"},
        ),
    )
    record = record_from(ok)
    assert record.result == {"token": MARKER, "status": "sent"}
    assert record.visualization == {"type": "markdown", "content": f"sent with {MARKER}: {MARKER}"}


def test_record_masks_echoed_secrets_everywhere() -> None:
    @tool(id="demo:api")
    def api(query: str) -> str:
        """Call an API."""
        return query

    secret = "sk-live-0123456789"
    call = FinishedCall(
        call_id="c3",
        tool_id="demo:api",
        tool=api.tool,
        arguments={"query": f"use {secret}"},
        agent=None,
        session_id=None,
        workspace=None,
        started_at=1.0,
        outcome=_outcome(
            tool_id="demo:api",
            content={"echo": secret, secret: 1},
            metadata={"note": f"auth {secret}", "idempotency": {"key": secret}},
        ),
        secrets=(secret,),
    )
    record = record_from(call)
    assert secret not in repr(record.to_dict())
    assert record.idempotency_key == MARKER
    assert record.result == {"echo": MARKER, MARKER: 1}


def test_log_args_and_log_result_off() -> None:
    @tool(id="demo:quiet", log_args=False, log_result=False, redact=["args.pw"])
    def quiet(pw: str) -> str:
        """Quiet."""
        return "done"

    call = FinishedCall(
        call_id="c4",
        tool_id="demo:quiet",
        tool=quiet.tool,
        arguments={"pw": "hunter22"},
        agent=None,
        session_id=None,
        workspace=None,
        started_at=1.0,
        outcome=_outcome(
            tool_id="demo:quiet",
            content="done",
            visualization={"type": "markdown", "content": "x"},
            metadata={"echo": "pw was hunter22"},
        ),
    )
    record = record_from(call)
    assert record.args is None and record.result is None and record.visualization is None
    assert record.metadata == {"echo": f"pw was {MARKER}"}
    assert record.definition_hash == quiet.tool.definition_hash
