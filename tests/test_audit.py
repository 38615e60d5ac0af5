"""The SQLite audit log: what reaches the disk, batching, failures, queries, retention, stats
and the ``toolgate audit`` commands."""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from toolgate import tool
from toolgate.audit import MARKER, AuditRecord, sqlite_rows
from toolgate.audit import sqlite_log as sqlite_log_module
from toolgate.audit import sqlite_schema as audit_schema
from toolgate.audit.rollup import PERCENTILE_ERROR
from toolgate.audit.sqlite_log import SQLiteAuditLog
from toolgate.cli.audit import audit_app, parse_time
from toolgate.errors import ErrorCode
from toolgate.model import CallOutcome, CallStatus, Tool
from toolgate.model.stats import ToolStats, counts_as_failure
from toolgate.pipeline.observers import FinishedCall


@tool(id="demo:send_mail", redact=["args.body", "args.customer_email", "result.items.*.token"])
def send_mail(body: str, customer_email: str, subject: str) -> dict[str, Any]:
    """Send a mail to a customer."""
    return {}


@tool(id="demo:read")
def read(path: str) -> str:
    """Read a file."""
    return path


SEND: Tool = send_mail.tool
READ: Tool = read.tool

SECRET = "sk-live-SUPERSECRET-4242"
BODY = "Dear customer, your diagnosis is confidential"
EMAIL = "jane.doe@example.org"
TOKEN = "tok-ITEM-7777"


def finished(
    tool_obj: Tool | None = None,
    *,
    tool_id: str | None = None,
    arguments: dict[str, Any] | None = None,
    status: CallStatus = CallStatus.OK,
    code: ErrorCode | None = None,
    message: str | None = None,
    content: Any = None,
    duration: float = 0.01,
    agent: str | None = "agent-a",
    started_at: float | None = None,
    secrets: tuple[str, ...] = (),
    call_id: str = "call-1",
    **outcome: Any,
) -> FinishedCall:
    """A finished call, built directly."""
    tool_obj = READ if tool_obj is None and tool_id is None else tool_obj
    tid = tool_id or (tool_obj.id if tool_obj is not None else "x:y")
    return FinishedCall(
        call_id=call_id,
        tool_id=tid,
        tool=tool_obj,
        arguments=arguments if arguments is not None else {"path": "/tmp/a"},
        agent=agent,
        session_id="sess-1",
        workspace="/work/space",
        started_at=time.time() if started_at is None else started_at,
        outcome=CallOutcome(
            status=status,
            tool_id=tid,
            call_id=call_id,
            content=content,
            code=code,
            message=message,
            duration=duration,
            **outcome,
        ),
        secrets=secrets,
    )


@pytest.fixture
def log(tmp_path: Path) -> Any:
    audit = SQLiteAuditLog(tmp_path / "audit.db", flush_interval=0.05, retention_days=None)
    yield audit
    audit.close()


# -- nothing secret reaches the disk -----------------------------------------------------------


def test_secrets_and_redacted_values_never_reach_any_file(tmp_path: Path) -> None:
    db = tmp_path / "home" / "audit.db"
    jsonl = tmp_path / "home" / "audit.jsonl"
    audit = SQLiteAuditLog(db, jsonl_path=jsonl, flush_interval=0.05)
    arguments = {"body": BODY, "customer_email": EMAIL, "subject": f"key {SECRET}"}
    ok = finished(
        SEND,
        arguments=arguments,
        content={"items": [{"token": TOKEN, "n": 1}], "echo": SECRET, "note": f"sent {BODY}"},
        visualization={"type": "markdown", "content": f"to {EMAIL}: {BODY} ({SECRET})"},
        secrets=(SECRET,),
        metadata={"idempotency": {"key": f"mail-{EMAIL}"}, "approval": {"id": "apr_1"}},
    )
    failed = finished(
        SEND,
        call_id="call-2",
        arguments=arguments,
        status=CallStatus.ERROR,
        code=ErrorCode.TOOL_ERROR,
        message=f"smtp refused {EMAIL}; stderr tail: {BODY} auth={SECRET}",
        detail=f"Traceback: send({BODY!r}, {EMAIL!r}) with {SECRET}",
        secrets=(SECRET,),
    )
    audit.observe(ok)
    audit.observe(failed)
    assert audit.flush(5)
    records = audit.query()
    assert len(records) == 2
    assert audit.healthy and audit.lost == 0

    files = [p for p in db.parent.iterdir() if p.is_file()]
    assert db in files and jsonl in files
    assert any(p.name.endswith("-wal") for p in files)  # WAL mode: records sit in the WAL
    for path in files:
        raw = path.read_bytes()
        for value in (SECRET, BODY, EMAIL, TOKEN):
            assert value.encode() not in raw, f"{value!r} found in {path.name}"
    assert MARKER.encode() in jsonl.read_bytes()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(jsonl.stat().st_mode) == 0o600

    audit.close()  # checkpoints the WAL into the database file
    raw = db.read_bytes()
    assert SECRET.encode() not in raw and BODY.encode() not in raw and EMAIL.encode() not in raw

    by_call = {r.call_id: r for r in records}
    assert by_call["call-1"].args == {
        "body": MARKER,
        "customer_email": MARKER,
        "subject": "key " + MARKER,
    }
    assert by_call["call-1"].result["items"] == [{"token": MARKER, "n": 1}]
    assert by_call["call-1"].approval_id == "apr_1"
    assert by_call["call-1"].idempotency_key == f"mail-{MARKER}"
    assert by_call["call-2"].message is not None and MARKER in by_call["call-2"].message
    lines = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert {line["call_id"] for line in lines} == {"call-1", "call-2"}


def test_every_outcome_is_recorded_with_its_approval(log: SQLiteAuditLog) -> None:
    log.observe(finished(status=CallStatus.OK, call_id="ok"))
    log.observe(
        finished(
            status=CallStatus.ERROR,
            code=ErrorCode.FORBIDDEN,
            message="denied by allowed_agents",
            call_id="forbidden",
        )
    )
    log.observe(
        finished(
            status=CallStatus.PENDING_APPROVAL,
            message="Approval pending",
            metadata={"approval": {"id": "apr_9"}},
            call_id="pending",
        )
    )
    log.observe(finished(metadata={"approval": {"grant": "grt_1"}}, call_id="granted"))
    log.observe(
        finished(
            tool_id="nope:missing",
            tool_obj=None,
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_NOT_FOUND,
            call_id="missing",
        )
    )
    assert log.flush(5)
    records = {r.call_id: r for r in log.query()}
    assert set(records) == {"ok", "forbidden", "pending", "granted", "missing"}
    assert records["pending"].approval_id == "apr_9"
    assert records["pending"].approval_decision == "pending"
    assert records["granted"].approval_decision == "granted"
    assert records["forbidden"].code == "forbidden" and records["forbidden"].result is None
    assert records["missing"].definition_hash is None
    assert records["ok"].definition_hash == READ.definition_hash
    assert records["ok"].session == "sess-1" and records["ok"].workspace == "/work/space"


# -- batching and the queue -----------------------------------------------------------------


def test_many_records_are_written_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = SQLiteAuditLog(
        tmp_path / "audit.db", batch_size=500, flush_interval=10.0, retention_days=None
    )
    sizes: list[int] = []
    original = audit._write_records

    def counting(records: list[AuditRecord]) -> None:
        sizes.append(len(records))
        original(records)

    monkeypatch.setattr(audit, "_write_records", counting)
    for i in range(3000):
        audit.observe(finished(call_id=f"c{i}", started_at=1_000_000.0 + i))
    assert audit.flush(10)
    assert audit.count() == 3000 and audit.written == 3000 and audit.lost == 0
    assert max(sizes) <= 500
    assert len(sizes) < 100  # batched, not one transaction per record
    newest = audit.query(limit=1)[0]
    assert newest.call_id == "c2999"
    audit.close()


def test_a_full_queue_counts_losses_without_blocking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = SQLiteAuditLog(tmp_path / "audit.db", queue_size=10, flush_interval=0.01)
    entered, release = threading.Event(), threading.Event()
    original = audit._write_records

    def stuck(records: list[AuditRecord]) -> None:
        entered.set()
        release.wait(10)
        original(records)

    monkeypatch.setattr(audit, "_write_records", stuck)
    audit.observe(finished(call_id="first"))
    assert entered.wait(5)  # the writer is stuck on the first batch
    # Observing never waits for the stuck writer: a caller thread gets through all 100.
    caller = threading.Thread(
        target=lambda: [audit.observe(finished(call_id=f"c{i}")) for i in range(100)]
    )
    caller.start()
    caller.join(10)
    assert not caller.is_alive()
    assert audit.lost == 90
    # Calls are being dropped: the log says so, and the gateway fails closed meanwhile.
    assert not audit.healthy
    assert "queue is full" in (audit.last_error or "")
    release.set()
    assert audit.flush(5)
    assert audit.count() == 11
    audit.observe(finished(call_id="caught-up"))
    assert audit.flush(5) and audit.healthy  # the writer caught up: healthy again
    audit.close()
    audit.observe(finished(call_id="after-close"))
    assert audit.lost == 91


# -- a failing store ---------------------------------------------------------------------------


def test_an_unusable_path_is_unhealthy_and_observe_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    audit = SQLiteAuditLog(blocker / "audit.db", flush_interval=0.01)
    assert not audit.healthy
    assert audit.last_error is not None
    for i in range(5):
        audit.observe(finished(call_id=f"c{i}"))
    assert audit.flush(5)
    assert audit.lost == 5
    assert not audit.healthy
    audit.close()


def test_a_failing_write_is_counted_until_a_later_write_succeeds(
    log: SQLiteAuditLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.observe(finished(call_id="fine"))
    assert log.flush(5) and log.healthy
    monkeypatch.setattr(
        sqlite_rows, "_insert_statement", lambda rows: "INSERT INTO no_such_table VALUES (?)"
    )
    log.observe(finished(call_id="lost-1"))
    log.observe(finished(call_id="lost-2"))
    assert log.flush(5)
    assert not log.healthy
    assert log.lost == 2
    assert "no_such_table" in (log.last_error or "")
    monkeypatch.undo()
    log.observe(finished(call_id="back"))
    assert log.flush(5)
    assert log.healthy
    assert [r.call_id for r in log.query()] == ["back", "fine"]


def test_a_call_that_cannot_be_recorded_loses_only_its_record(log: SQLiteAuditLog) -> None:
    bad = finished(call_id="bad", content={"x": object()})  # not JSON: serialized via str()
    log.observe(bad)
    log.observe(finished(call_id="good"))
    assert log.flush(5)
    assert {r.call_id for r in log.query()} == {"bad", "good"}
    assert log.lost == 0


@pytest.mark.parametrize("per_statement", [100, 3, 1])
def test_batches_round_trip_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_statement: int
) -> None:
    # Multi-row statements, a last one with fewer rows, and one row per statement.
    monkeypatch.setattr(sqlite_rows, "ROWS_PER_STATEMENT", per_statement)
    audit = SQLiteAuditLog(tmp_path / "audit.db", flush_interval=0.05, retention_days=None)
    started = [1_795_246_109.888_091_8, 1_000_000.000_000_1, 2.5e-7]
    contents: list[Any] = [
        {"nested": [1, 2.5, None, True, "é€😀", {"k": 'line\nbreak "quoted"'}]},
        "plain text",
        12345678901234567890,
    ]
    for i, (at, content) in enumerate(zip(started, contents, strict=True)):
        audit.observe(
            finished(
                call_id=f"c{i}",
                started_at=at,
                content=content,
                duration=1.2e-05 * (i + 1),
                arguments={"path": f"/tmp/ü{i}", "n": i},
            )
        )
    audit.observe(
        finished(
            call_id="failed",
            status=CallStatus.ERROR,
            code=ErrorCode.TIMEOUT,
            message="Tool took too long",
            agent=None,
        )
    )
    assert audit.flush(5)
    records = {r.call_id: r for r in audit.query(limit=10)}
    for i, (at, content) in enumerate(zip(started, contents, strict=True)):
        record = records[f"c{i}"]
        assert record.time == at  # floats survive bit for bit
        assert record.duration == 1.2e-05 * (i + 1)
        assert record.result == content
        assert record.args == {"path": f"/tmp/ü{i}", "n": i}
        assert record.status == "ok" and record.code is None and record.agent == "agent-a"
    failed = records["failed"]
    assert (failed.status, failed.code, failed.message) == (
        "error",
        "timeout",
        "Tool took too long",
    )
    assert failed.agent is None and failed.result is None
    assert audit.lost == 0 and audit.healthy
    audit.close()


@pytest.mark.parametrize("per_statement", [100, 1])
def test_a_lone_surrogate_in_a_text_column_is_stored_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_statement: int
) -> None:
    # The gateway's own validation message echoes a bad argument: an agent sending "\ud800"
    # must not make the other calls of the batch vanish from the log.
    monkeypatch.setattr(sqlite_rows, "ROWS_PER_STATEMENT", per_statement)
    audit = SQLiteAuditLog(tmp_path / "audit.db", flush_interval=0.05, retention_days=None)
    audit.observe(finished(call_id="victim"))
    audit.observe(
        finished(
            call_id="odd",
            status=CallStatus.ERROR,
            code=ErrorCode.INVALID_ARGUMENTS,
            message="a: '\ud800' is not of type 'integer'",
            agent="agent-\udcff",
        )
    )
    assert audit.flush(5)
    records = {r.call_id: r for r in audit.query()}
    assert set(records) == {"victim", "odd"}
    assert records["odd"].message == "a: '\\ud800' is not of type 'integer'"
    assert records["odd"].agent == "agent-\\udcff"
    assert audit.lost == 0 and audit.healthy
    audit.close()


def test_a_record_that_cannot_be_serialized_loses_only_itself(log: SQLiteAuditLog) -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    log.observe(finished(call_id="before"))
    log.observe(finished(call_id="loop", content=circular))
    log.observe(finished(call_id="after"))
    assert log.flush(5)
    assert {r.call_id for r in log.query()} == {"before", "after"}
    assert log.lost == 1
    assert "loop" in (log.last_error or "")


def test_a_lone_surrogate_in_a_result_does_not_cost_the_batch(log: SQLiteAuditLog) -> None:
    # Not encodable as UTF-8: the JSON of the result escapes it, the other records are written.
    log.observe(finished(call_id="odd", content={"text": "half a pair: \ud800"}))
    log.observe(finished(call_id="fine"))
    assert log.flush(5)
    records = {r.call_id: r for r in log.query()}
    assert set(records) == {"odd", "fine"}
    assert records["odd"].result == {"text": "half a pair: \ud800"}
    assert log.lost == 0 and log.healthy


# -- queries, retention and stats ------------------------------------------------------------


def test_query_filters_and_paging(log: SQLiteAuditLog) -> None:
    base = 1_700_000_000.0
    for i in range(10):
        log.observe(
            finished(
                SEND if i % 2 else READ,
                arguments={"body": "b", "customer_email": "e", "subject": "s"}
                if i % 2
                else {"path": "/p"},
                agent="alice" if i < 5 else "bob",
                status=CallStatus.ERROR if i % 3 == 0 else CallStatus.OK,
                code=ErrorCode.TOOL_ERROR if i % 3 == 0 else None,
                started_at=base + i,
                call_id=f"c{i}",
            )
        )
    assert log.flush(5)
    assert [r.call_id for r in log.query(limit=3)] == ["c9", "c8", "c7"]
    assert [r.call_id for r in log.query(limit=3, offset=3)] == ["c6", "c5", "c4"]
    assert {r.call_id for r in log.query(tool_id="demo:send_mail")} == {
        "c1",
        "c3",
        "c5",
        "c7",
        "c9",
    }
    assert {r.call_id for r in log.query(agent="alice", status="error")} == {"c0", "c3"}
    assert {r.call_id for r in log.query(code="tool_error")} == {"c0", "c3", "c6", "c9"}
    assert [r.call_id for r in log.query(since=base + 2, until=base + 5)] == ["c4", "c3", "c2"]
    assert log.count(agent="bob") == 5
    out = log.query(tool_id="demo:read", limit=None)
    assert len(out) == 5


def test_export_jsonl(log: SQLiteAuditLog, tmp_path: Path) -> None:
    for i in range(4):
        log.observe(finished(call_id=f"c{i}", started_at=100.0 + i))
    assert log.flush(5)
    target = tmp_path / "out.jsonl"
    assert log.export_jsonl(target, since=101.0) == 3
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["call_id"] for line in lines] == ["c3", "c2", "c1"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_prune_deletes_records_older_than_the_retention(tmp_path: Path) -> None:
    audit = SQLiteAuditLog(tmp_path / "audit.db", retention_days=7, flush_interval=0.05)
    now = time.time()
    day = 86_400.0
    for i, age in enumerate((0.5, 3, 6.9, 7.1, 30)):
        audit.observe(finished(call_id=f"age{i}", started_at=now - age * day))
    assert audit.flush(5)
    assert audit.prune(now) == 2
    assert {r.call_id for r in audit.query()} == {"age0", "age1", "age2"}
    audit.close()

    keep = SQLiteAuditLog(tmp_path / "audit.db", retention_days=None)
    assert keep.prune(now + 365 * day) == 0
    keep.close()


def test_the_writer_prunes_on_its_own(tmp_path: Path) -> None:
    audit = SQLiteAuditLog(
        tmp_path / "audit.db", retention_days=1, flush_interval=0.02, prune_interval=0.05
    )
    audit.observe(finished(call_id="old", started_at=time.time() - 2 * 86_400))
    audit.observe(finished(call_id="new"))
    assert audit.flush(5)
    deadline = time.monotonic() + 5
    while audit.count() != 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [r.call_id for r in audit.query()] == ["new"]
    audit.close()


def test_stats_percentiles_and_the_failure_rule(log: SQLiteAuditLog) -> None:
    now = time.time()
    # 20 successful calls of 1..20 ms.
    for i in range(1, 21):
        log.observe(finished(READ, duration=i / 1000, started_at=now - 100 + i, call_id=f"ok{i}"))
    # The caller's mistakes: counted in total, never failures.
    for i, code in enumerate(sorted(sqlite_log_module.NOT_TOOL_FAILURES)):
        log.observe(
            finished(
                READ,
                status=CallStatus.ERROR,
                code=ErrorCode(code),
                message="caller mistake",
                duration=0.0,
                started_at=now - 50 + i,
                call_id=f"mistake{i}",
            )
        )
    # Two tool failures; the newer one is the last error.
    log.observe(
        finished(
            READ,
            status=CallStatus.ERROR,
            code=ErrorCode.TIMEOUT,
            message="timed out",
            duration=0.5,
            started_at=now - 30,
            call_id="timeout",
        )
    )
    log.observe(
        finished(
            READ,
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_ERROR,
            message="disk on fire",
            duration=0.03,
            started_at=now - 20,
            call_id="boom",
        )
    )
    log.observe(finished(READ, status=CallStatus.PENDING_APPROVAL, started_at=now - 10))
    # An old failure outside the window, and another tool.
    log.observe(
        finished(
            READ,
            status=CallStatus.ERROR,
            code=ErrorCode.CRASHED,
            started_at=now - 30 * 86_400,
            call_id="old",
        )
    )
    log.observe(finished(SEND, arguments={}, duration=0.2, started_at=now - 5, call_id="send"))
    assert log.flush(5)

    since = now - 7 * 86_400
    stats = log.stats("demo:read", since=since)
    # pending is not finished: not counted
    assert stats.total == 20 + len(sqlite_log_module.NOT_TOOL_FAILURES) + 2
    assert stats.failures == 2
    assert stats.failure_rate == pytest.approx(2 / stats.total)
    # Durations of the 22 calls that ran: 1..20 ms, 30 ms, 500 ms (nearest rank, read from
    # the duration buckets: within half a bucket).
    assert stats.p50 == pytest.approx(0.011, rel=PERCENTILE_ERROR)
    assert stats.p95 == pytest.approx(0.03, rel=PERCENTILE_ERROR)
    assert stats.last_error == "[tool_error] disk on fire"
    assert stats.last_error_code == "tool_error"
    assert stats.last_error_at == pytest.approx(now - 20)

    everything = log.all_stats(since)
    assert set(everything) == {"demo:read", "demo:send_mail"}
    assert everything["demo:read"] == stats
    assert everything["demo:send_mail"].total == 1
    assert everything["demo:send_mail"].p50 == everything["demo:send_mail"].p95
    assert everything["demo:send_mail"].p50 == pytest.approx(0.2, rel=PERCENTILE_ERROR)
    assert everything["demo:send_mail"].last_error is None

    unused = log.stats("demo:nothing", since=since)
    assert unused.total == 0 and unused.p50 is None and unused.failure_rate == 0.0


def _random_calls(seed: int, now: float, count: int) -> list[FinishedCall]:
    """``count`` calls of three tools over the last three hours, in time order, with every
    kind of end (caller mistakes, tool failures, pending approvals) and spread durations."""
    rng = random.Random(seed)
    calls = []
    for i in range(count):
        at = now - 3 * 3600 + 3 * 3600 * i / count + rng.random()
        kind = rng.random()
        status, code = CallStatus.OK, None
        if kind < 0.15:
            status, code = CallStatus.ERROR, rng.choice([ErrorCode.TIMEOUT, ErrorCode.TOOL_ERROR])
        elif kind < 0.25:
            status, code = CallStatus.ERROR, ErrorCode.INVALID_ARGUMENTS
        elif kind < 0.3:
            status = CallStatus.PENDING_APPROVAL
        calls.append(
            finished(
                tool_id=rng.choice(["a:one", "a:two", "b:three"]),
                status=status,
                code=code,
                message=None if code is None else f"failure {i}",
                duration=rng.choice([0.0, rng.lognormvariate(-4, 1.5)]),
                started_at=at,
                call_id=f"c{i}",
            )
        )
    return calls


def _exact_stats(calls: list[FinishedCall], tool_id: str, since: float) -> ToolStats:
    """The health figures of ``tool_id`` computed from every call (what the summary must
    give: counts and last error exact; percentiles over the window's whole hours)."""
    mine = [c for c in calls if c.tool_id == tool_id and c.outcome.status != "pending_approval"]
    window = [c for c in mine if c.started_at >= since]
    failed = [c for c in window if counts_as_failure(c.outcome)]
    hour_start = since // 3600 * 3600
    ran = sorted(
        c.outcome.duration
        for c in mine
        if c.started_at >= hour_start
        and (c.outcome.status is CallStatus.OK or counts_as_failure(c.outcome))
    )

    def rank(pct: int) -> float | None:
        return ran[(len(ran) * pct + 99) // 100 - 1] if ran else None

    last = failed[-1] if failed else None
    return ToolStats(
        total=len(window),
        failures=len(failed),
        p50=rank(50),
        p95=rank(95),
        last_error=None if last is None else f"[{last.outcome.code}] {last.outcome.message}",
        last_error_at=None if last is None else last.started_at,
        last_error_code=None if last is None else str(last.outcome.code),
    )


def _assert_close(got: ToolStats, want: ToolStats) -> None:
    assert (got.total, got.failures, got.last_error, got.last_error_code) == (
        want.total,
        want.failures,
        want.last_error,
        want.last_error_code,
    )
    assert got.last_error_at == (
        None if want.last_error_at is None else pytest.approx(want.last_error_at)
    )
    for field in ("p50", "p95"):
        exact = getattr(want, field)
        assert getattr(got, field) == (
            None if exact is None else pytest.approx(exact, rel=PERCENTILE_ERROR)
        ), field


def test_health_figures_match_the_records_for_any_window(log: SQLiteAuditLog) -> None:
    # Many batches (the writer adds each to the summary rows already there), and windows
    # starting anywhere: mid-minute, on a minute, mid-hour, before every record.
    now = time.time()
    calls = _random_calls(7, now, 3000)
    for start in range(0, len(calls), 250):
        for call in calls[start : start + 250]:
            log.observe(call)
        assert log.flush(10)
    windows = [now - 4 * 3600, now - 7000.5, now - 3600, (now - 1800) // 60 * 60, now - 61.25]
    for since in windows:
        everything = log.all_stats(since)
        for tool_id in ("a:one", "a:two", "b:three"):
            want = _exact_stats(calls, tool_id, since)
            _assert_close(log.stats(tool_id, since=since), want)
            _assert_close(everything.get(tool_id, ToolStats()), want)


def test_pruning_removes_the_summary_of_what_it_removes(log: SQLiteAuditLog) -> None:
    now = time.time()
    log.observe(finished(READ, started_at=now - 3 * 86_400, call_id="old", duration=5.0))
    log.observe(finished(READ, started_at=now - 60, call_id="new", duration=0.01))
    assert log.flush(5)
    assert log.stats(READ.id, since=now - 7 * 86_400).total == 2
    log.retention_days = 1
    assert log.prune(now) == 1
    after = log.stats(READ.id, since=now - 7 * 86_400)
    assert after.total == 1 and after.p95 == pytest.approx(0.01, rel=PERCENTILE_ERROR)


def test_text_no_store_can_hold_costs_no_record_of_the_batch(log: SQLiteAuditLog) -> None:
    # A lone surrogate (an agent can send "\\ud800" in JSON arguments a tool echoes into its
    # error, or call a tool id holding one) and a NUL once failed the summary's upsert, which
    # rolled back the whole batch: every caller's record in it was lost.
    now = time.time()
    log.observe(finished(READ, started_at=now - 2, call_id="good"))
    log.observe(
        finished(
            tool_id="demo:echo\ud800",
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_ERROR,
            message="no such file /etc/x\ud800 \x00",
            started_at=now - 1,
            call_id="odd",
        )
    )
    assert log.flush(10)
    assert log.lost == 0 and log.healthy
    assert {r.call_id for r in log.query()} == {"good", "odd"}
    assert log.stats(READ.id, since=now - 60).total == 1
    odd = log.all_stats(now - 60)["demo:echo\\ud800"]
    assert odd.failures == 1 and odd.last_error == "[tool_error] no such file /etc/x\\ud800 \\x00"


def test_pruning_keeps_the_figures_exact_for_the_records_left(log: SQLiteAuditLog) -> None:
    # Pruning goes by whole minutes: a minute holding records on both sides of the retention's
    # edge is kept whole, so its counts and last error are those of records still there.
    now = time.time()
    cutoff = now - 86_400
    edge = (cutoff // 60) * 60 + 30  # the middle of the cutoff's minute
    log.observe(
        finished(
            READ,
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_ERROR,
            message="old failure",
            started_at=edge - 20,
            call_id="before",
        )
    )
    log.observe(finished(READ, started_at=edge + 20, call_id="after"))
    log.observe(finished(READ, started_at=edge - 120, call_id="gone"))
    assert log.flush(5)
    log.retention_days = 1
    log.prune(now)
    left = log.query(tool_id=READ.id)
    stats = log.stats(READ.id, since=now - 7 * 86_400)
    assert stats.total == len(left) and "gone" not in {r.call_id for r in left}
    failed = [r for r in left if r.status == "error"]
    assert stats.failures == len(failed)
    assert (stats.last_error is None) == (not failed)


def test_an_infinite_duration_reads_back_as_infinity(log: SQLiteAuditLog) -> None:
    now = time.time()
    log.observe(finished(READ, duration=0.01, started_at=now - 2, call_id="a"))
    log.observe(finished(READ, duration=math.inf, started_at=now - 1, call_id="b"))
    assert log.flush(5)
    stats = log.stats(READ.id, since=now - 60)
    assert stats.p50 == pytest.approx(0.01, rel=PERCENTILE_ERROR) and stats.p95 == math.inf


def test_opening_an_older_database_fills_the_summary_from_its_records(tmp_path: Path) -> None:
    # Written by this toolgate, then made to look like one written before the summary tables
    # existed (schema 1): opening it again rebuilds them from the records, to the same figures.
    path = tmp_path / "audit.db"
    now = time.time()
    with SQLiteAuditLog(path, retention_days=None) as log:
        for call in _random_calls(3, now, 2000):
            log.observe(call)
        # Before 1970: the backfill must floor as the writer does (SQL's CAST truncates).
        log.observe(finished(READ, started_at=-30.5, call_id="early"))
        assert log.flush(10)
        since = now - 4 * 3600
        written = log.all_stats(since)
        early = log.all_stats(-3600.0)[READ.id]
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE audit_minutes; DROP TABLE audit_durations; PRAGMA user_version = 1;"
    )
    conn.close()
    with SQLiteAuditLog(path, retention_days=None) as log:
        assert log.all_stats(since) == written
        assert log.all_stats(-3600.0)[READ.id] == early
        assert log.stats(READ.id, since=0.0).total == early.total - 1
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == audit_schema.SCHEMA_VERSION
    conn.close()


# -- toolgate audit ---------------------------------------------------------------------------


@pytest.fixture
def filled_db(tmp_path: Path) -> Path:
    path = tmp_path / "audit.db"
    audit = SQLiteAuditLog(path)
    now = time.time()
    audit.observe(finished(call_id="recent-ok", started_at=now - 60))
    audit.observe(
        finished(
            call_id="recent-err",
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_ERROR,
            message="it broke",
            agent="bob",
            started_at=now - 30,
        )
    )
    audit.observe(finished(call_id="old", started_at=now - 3 * 86_400))
    audit.flush(5)
    audit.close()
    return path


def test_cli_list_json_with_filters(filled_db: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(audit_app, ["list", "--db", str(filled_db), "--json", "--since", "-1d"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["call_id"] for r in data] == ["recent-err", "recent-ok"]

    result = runner.invoke(
        audit_app, ["list", "--db", str(filled_db), "--json", "--status", "tool_error"]
    )
    assert [r["call_id"] for r in json.loads(result.stdout)] == ["recent-err"]

    result = runner.invoke(
        audit_app, ["list", "--db", str(filled_db), "--json", "--agent", "bob", "--limit", "1"]
    )
    assert [r["call_id"] for r in json.loads(result.stdout)] == ["recent-err"]


def test_cli_list_table(filled_db: Path) -> None:
    result = CliRunner().invoke(audit_app, ["list", "--db", str(filled_db), "--tool", "demo:read"])
    assert result.exit_code == 0, result.output
    assert "recent-err" in result.stdout and "tool_error" in result.stdout
    assert "3 records" in result.stdout


def test_cli_export(filled_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "export.jsonl"
    result = CliRunner().invoke(
        audit_app, ["export", "--db", str(filled_db), "--output", str(target), "--until", "-1d"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["call_id"] for line in lines] == ["old"]

    result = CliRunner().invoke(audit_app, ["export", "--db", str(filled_db)])
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 3


def test_cli_errors_and_an_empty_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    result = runner.invoke(audit_app, ["list", "--db", str(tmp_path / "x.db"), "--since", "soon"])
    assert result.exit_code == 2
    result = runner.invoke(audit_app, ["list", "--db", str(tmp_path / "x.db"), "--status", "meh"])
    assert result.exit_code == 2

    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "home"))
    result = runner.invoke(audit_app, ["list"])
    assert result.exit_code == 0 and "No audit records" in result.stdout
    assert not (tmp_path / "home" / "audit.db").exists()  # reading never creates the log

    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is not a database" * 100)
    result = runner.invoke(audit_app, ["list", "--db", str(broken)])
    assert result.exit_code == 1


def test_parse_time() -> None:
    assert parse_time("-1h", "--since", now=10_000.0) == 6_400.0
    assert parse_time("7d", "--since", now=1_000_000.0) == 1_000_000.0 - 7 * 86_400
    assert parse_time("2024-01-01T00:00:00+00:00", "--since") == 1_704_067_200.0


def test_the_database_is_private(log: SQLiteAuditLog) -> None:
    assert log.path is not None
    assert stat.S_IMODE(os.stat(log.path).st_mode) == 0o600


@pytest.mark.slow
def test_db_upgrade_brings_an_old_audit_database_to_the_current_schema(
    run_cli: Any, toolgate_home: Path
) -> None:
    # An audit.db from before its first migration (user_version 0, no table).
    sqlite3.connect(toolgate_home / "audit.db").close()
    result = run_cli("db", "upgrade", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["engine"] == "sqlite"
    with sqlite3.connect(toolgate_home / "audit.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == audit_schema.SCHEMA_VERSION
        conn.execute("SELECT COUNT(*) FROM audit_records").fetchone()


def test_text_no_store_can_hold_reads_the_same_from_the_records_and_the_summary(
    log: SQLiteAuditLog,
) -> None:
    # A window starting inside a minute reads that minute's part from the records, the rest
    # from the summary rows: the same error must read the same from both (it once showed a raw
    # NUL from the records and an escaped one from the summary, depending on the clock).
    minute_middle = (time.time() // 60) * 60 - 30
    log.observe(
        finished(
            tool_id="demo:echo\x00",
            status=CallStatus.ERROR,
            code=ErrorCode.TOOL_ERROR,
            message="no such file /etc/x\ud800 \x00",
            started_at=minute_middle,
            call_id="odd",
        )
    )
    assert log.flush(10)
    from_records = log.all_stats(minute_middle - 10)
    from_summary = log.all_stats(minute_middle - 100)
    assert from_records == from_summary
    assert from_records["demo:echo\\x00"].last_error == (
        "[tool_error] no such file /etc/x\\ud800 \\x00"
    )
