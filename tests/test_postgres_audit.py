"""The audit log in a real PostgreSQL database: the SQLite log's behaviour tests again, the
durable acknowledgement, health figures shared by replicas, and a database that goes away.

The behaviour tests imported from ``test_audit`` run here unchanged against PostgreSQL (the
``log`` fixture below replaces theirs): the queries and statistics are one SQL for both engines.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from postgres_support import drop_database, scratch_database, upgraded_database
from test_audit import (  # noqa: F401 - collected here again, against PostgreSQL
    _random_calls,
    finished,
    test_a_call_that_cannot_be_recorded_loses_only_its_record,
    test_a_lone_surrogate_in_a_result_does_not_cost_the_batch,
    test_a_record_that_cannot_be_serialized_loses_only_itself,
    test_an_infinite_duration_reads_back_as_infinity,
    test_every_outcome_is_recorded_with_its_approval,
    test_export_jsonl,
    test_health_figures_match_the_records_for_any_window,
    test_pruning_keeps_the_figures_exact_for_the_records_left,
    test_pruning_removes_the_summary_of_what_it_removes,
    test_query_filters_and_paging,
    test_stats_percentiles_and_the_failure_rule,
    test_text_no_store_can_hold_costs_no_record_of_the_batch,
)
from toolgate import CallStatus, ErrorCode, Gateway, tool
from toolgate.model import CallOutcome

pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")

from gateway_support import gateway_with
from toolgate.audit.postgres_log import PostgresAuditLog
from toolgate.audit.record import AuditRecord
from toolgate.stores.postgres_db import PostgresDatabase
from toolgate.stores.postgres_schema import upgrade

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A database of this module, at the current schema."""
    with upgraded_database() as url:
        yield url


@pytest.fixture(autouse=True)
def _empty_audit(request: pytest.FixtureRequest) -> None:
    if "pg_url" not in request.fixturenames:
        return
    db = PostgresDatabase(request.getfixturevalue("pg_url"), max_size=1)
    with db.write() as conn:
        conn.execute("TRUNCATE audit_records, audit_minutes, audit_durations")
    db.close()


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresDatabase]:
    db = PostgresDatabase(pg_url)
    yield db
    db.close()


@pytest.fixture
def log(pg: PostgresDatabase) -> Iterator[PostgresAuditLog]:
    """The audit log of the shared tests above, in PostgreSQL."""
    audit = PostgresAuditLog(pg, flush_interval=0.05, retention_days=None)
    yield audit
    audit.close()


def _rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Rows read on a connection of its own: what another replica would see."""
    db = PostgresDatabase(url, max_size=1)
    try:
        with db.read() as conn:
            return list(conn.execute(sql, params).fetchall())
    finally:
        db.close()


@tool(effect="read_only")
def lookup(term: str) -> str:
    """Look a term up."""
    return f"found {term}"


@tool(effect="external_write")
def publish(text: str) -> str:
    """Publish a text to the world."""
    return f"published {text}"


@tool(effect="read_only")
def broken() -> str:
    """Always fails."""
    raise RuntimeError("the disk is on fire")


def _gateway(url: str, tmp_path: Path) -> Gateway:
    gateway = gateway_with(state_database=PostgresDatabase(url), audit_path=tmp_path / "audit.db")
    for function in (lookup, publish, broken):
        gateway.add(function, namespace="local")
    return gateway


# -- what only PostgreSQL text needs -------------------------------------------------------------


def test_nul_characters_and_lone_surrogates_are_stored_escaped(log: PostgresAuditLog) -> None:
    log.observe(finished(call_id="victim"))
    log.observe(
        finished(
            call_id="odd",
            status=CallStatus.ERROR,
            code=ErrorCode.INVALID_ARGUMENTS,
            message="a: 'nul\x00here \ud800' is not of type 'integer'",
            agent="agent-\udcff",
            content={"text": "nul\x00in json"},
        )
    )
    assert log.flush(5)
    records = {r.call_id: r for r in log.query()}
    assert set(records) == {"victim", "odd"}
    assert records["odd"].message == "a: 'nul\\x00here \\ud800' is not of type 'integer'"
    assert records["odd"].agent == "agent-\\udcff"
    assert log.lost == 0 and log.healthy


def test_a_large_batch_is_written_by_one_copy_and_reads_back(log: PostgresAuditLog) -> None:
    for i in range(5000):
        log.observe(finished(call_id=f"c{i}", started_at=1_000.0 + i))
    assert log.flush(30)
    assert log.count() == 5000 and log.written == 5000
    assert [r.call_id for r in log.query(limit=2)] == ["c4999", "c4998"]
    assert [r.call_id for r in log.query(limit=None, offset=4998)] == ["c1", "c0"]


# -- through the gateway -------------------------------------------------------------------------


def test_a_call_is_answered_only_once_its_record_is_committed(pg_url: str, tmp_path: Path) -> None:
    with _gateway(pg_url, tmp_path) as gateway:
        assert type(gateway.audit).__name__ == "PostgresAuditLog"
        for term in ("a", "b", "c"):
            outcome = gateway.call_sync("local:lookup", {"term": term})
            assert outcome.ok and "audit" not in outcome.metadata
            # No flush: another connection sees the record the moment the call is answered.
            rows = _rows(
                pg_url, "SELECT status FROM audit_records WHERE call_id = ?", outcome.call_id
            )
            assert rows == [{"status": "ok"}]

        async def many() -> list[CallOutcome]:
            calls = [gateway.call("local:lookup", {"term": f"t{i}"}) for i in range(40)]
            return list(await asyncio.gather(*calls))

        outcomes = asyncio.run(many())
        ids = [outcome.call_id for outcome in outcomes]
        rows = _rows(pg_url, "SELECT call_id FROM audit_records WHERE call_id = ANY(?)", ids)
        assert {row["call_id"] for row in rows} == set(ids)
        # A tool that is not there is recorded (and acknowledged) as well.
        missing = gateway.call_sync("local:nothing")
        assert missing.code is ErrorCode.TOOL_NOT_FOUND
        assert _rows(
            pg_url, "SELECT 1 AS one FROM audit_records WHERE call_id = ?", missing.call_id
        )
    assert not (tmp_path / "audit.db").exists()  # nothing is kept beside the shared log


def test_health_figures_count_the_calls_of_every_replica(pg_url: str, tmp_path: Path) -> None:
    with _gateway(pg_url, tmp_path / "a") as first, _gateway(pg_url, tmp_path / "b") as second:
        for i in range(3):
            assert first.call_sync("local:lookup", {"term": str(i)}).ok
        assert second.call_sync("local:broken").code is ErrorCode.TOOL_ERROR
        assert second.call_sync("local:lookup", {"term": "x"}).ok
        for gateway in (first, second):
            assert gateway.status("local:lookup").total_calls_7d == 4
            failed = gateway.status("local:broken")
            assert failed.total_calls_7d == 1 and failed.failure_rate_7d == 1.0
            assert "disk is on fire" in (failed.last_error or "")
            assert {r.call_id for r in gateway.audit.query(tool_id="local:lookup")} == {
                r.call_id for r in first.audit.query(tool_id="local:lookup")
            }


def test_a_database_that_goes_away_is_reported_to_the_caller_and_fails_closed(
    tmp_path: Path,
) -> None:
    with scratch_database() as url:
        db = PostgresDatabase(url)
        upgrade(db)
        db.close()
        with _gateway(url, tmp_path) as gateway:
            assert gateway.call_sync("local:lookup", {"term": "before"}).ok
            drop_database(url)
            # The read-only call runs, and its caller hears that it was not recorded.
            unrecorded = gateway.call_sync("local:lookup", {"term": "during"})
            assert unrecorded.ok
            assert unrecorded.metadata["audit"] == "not recorded: the audit log could not write it"
            assert "PostgreSQL" in (gateway.audit.last_error or "")  # the details: operators'
            assert "toolgate_test" not in unrecorded.metadata["audit"]  # never the database
            assert gateway.audit is not None and not gateway.audit.healthy
            # A tool with effects outside never runs unaudited.
            refused = gateway.call_sync("local:publish", {"text": "hello"})
            assert refused.code is ErrorCode.UNAVAILABLE
            assert "audit log cannot record" in (refused.message or "")


def test_a_call_a_durable_log_never_stored_is_never_reported_recorded(
    pg: PostgresDatabase,
) -> None:
    log = PostgresAuditLog(pg, retention_days=None)
    log.observe(finished(call_id="kept"))
    assert log.recorded_sync("kept", 10) is None
    assert log.recorded_sync("never-observed", 1) == "the audit log never received it"
    log.close()
    log.observe(finished(call_id="after-close"))
    assert log.recorded_sync("after-close", 1) == "the audit log is closed"
    assert log.lost == 1


def test_upgrading_a_database_with_records_fills_the_summary(
    log: PostgresAuditLog, pg: PostgresDatabase
) -> None:
    # A database written before the summary tables existed: schema 0005 with records.
    now = time.time()
    for call in _random_calls(11, now, 1500):
        log.observe(call)
    assert log.flush(10)
    since = now - 4 * 3600
    written = log.all_stats(since)
    with pg.write() as conn:
        conn.execute("DROP TABLE audit_minutes, audit_durations")
        conn.execute("UPDATE alembic_version SET version_num = '0005'")
    assert upgrade(pg) == (5, 6)
    assert log.all_stats(since) == written


def test_replicas_adding_to_the_same_figures_lose_nothing(pg: PostgresDatabase) -> None:
    # Four writers, small batches (one WITH statement) mixed with large ones (COPY, then the
    # summary), on the same tools and minutes: their row locks meet in opposite orders, and
    # PostgreSQL breaks the deadlock by rolling one back, which is then written again.
    now = time.time()
    tools = [f"t:{i}" for i in range(40)]

    def batch(rng: random.Random) -> list[AuditRecord]:
        return [
            AuditRecord(
                time=now - rng.random() * 600,
                call_id=uuid.uuid4().hex,
                tool_id=rng.choice(tools),
                status=rng.choice(["ok", "error"]),
                code="tool_error",
                message="m",
                duration=rng.random(),
            )
            for _ in range(rng.choice([5, 300]))
        ]

    logs = [PostgresAuditLog(pg, retention_days=None) for _ in range(4)]
    try:

        def write(log: PostgresAuditLog, seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(12):
                log._write_records(batch(rng))

        threads = [threading.Thread(target=write, args=(log, i)) for i, log in enumerate(logs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [log.lost for log in logs] == [0, 0, 0, 0]
        figures = logs[0].all_stats(now - 3600)
        assert sum(s.total for s in figures.values()) == logs[0].count()
    finally:
        for log in logs:
            log.close()
