"""Fewer durable round trips per call on the shared state, with the same guarantees.

On PostgreSQL (with Redis), a keyed call's outcome is committed by the statement that writes the
call's audit record (one flush where there were two), a lone ``call_sync`` caller commits its own
record, and the idempotency claim this thread just committed answers the audit reservation.
These tests hold the guarantees on real servers: every acknowledged call has its record and its
outcome, committed together; a replica killed while that commit waits keeps both or neither,
and the tool never runs twice; replicas racing one key run it once; and a write whose record
never comes is still committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from postgres_support import upgraded_database
from toolgate import CallOutcome, CallStatus, ErrorCode, Gateway, tool
from toolgate.pipeline.observers import FinishedCall

pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")

from toolgate.audit.postgres_log import PostgresAuditLog
from toolgate.stores.call_writes import STALE_AFTER
from toolgate.stores.idempotency import IdempotencyRecord, IdempotencyStatus
from toolgate.stores.postgres_db import PostgresDatabase
from toolgate.stores.sql_idempotency import SqlIdempotencyStore

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("TOOLGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")

RUNS: list[str] = []
_RUNS_LOCK = threading.Lock()


@tool(
    namespace="shop",
    effect="external_write",
    approval=False,
    idempotency_key="{{ args.order_id }}",
    calls_per_minute=10**9,
)
def charge(order_id: str) -> str:
    """Charge an order once."""
    with _RUNS_LOCK:
        RUNS.append(order_id)
    time.sleep(0.02)  # long enough for racing callers to meet the running claim
    return "charged " + order_id


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with upgraded_database() as url:
        yield url


@pytest.fixture(autouse=True)
def _fresh(pg_url: str) -> None:
    RUNS.clear()
    db = PostgresDatabase(pg_url, max_size=1)
    with db.write() as conn:
        conn.execute("TRUNCATE audit_records, audit_minutes, audit_durations, idempotency_keys")
    db.close()


def _redis() -> str | None:
    try:
        import redis

        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except Exception:  # noqa: BLE001 - no Redis here: the counters go to PostgreSQL
        return None
    return REDIS_URL


def _gateway(url: str, tmp_path: Path, *, function: Any = charge, **options: Any) -> Gateway:
    gateway = gateway_with(
        state_database=PostgresDatabase(url),
        audit_path=tmp_path / f"unused-{uuid.uuid4().hex}.db",
        redis_url=_redis(),
        **options,
    )
    gateway.add(function)
    assert isinstance(gateway.audit, PostgresAuditLog) and gateway.audit.durable
    return gateway


def _rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """Rows read on a connection of its own: what another replica would see."""
    db = PostgresDatabase(url, max_size=1)
    try:
        with db.read() as conn:
            return list(conn.execute(sql, params).fetchall())
    finally:
        db.close()


def _committed_together(url: str, outcome: CallOutcome) -> bool:
    """The call's record and its key's outcome exist, and one transaction wrote both."""
    records = _rows(
        url, "SELECT xmin::text AS tx FROM audit_records WHERE call_id = ?", outcome.call_id
    )
    keys = _rows(
        url,
        "SELECT xmin::text AS tx, status, outcome FROM idempotency_keys WHERE call_id = ?",
        outcome.call_id,
    )
    assert len(records) == 1, f"no record of acknowledged call {outcome.call_id}"
    assert len(keys) == 1 and keys[0]["status"] == "done", keys
    assert outcome.call_id in keys[0]["outcome"]
    return bool(records[0]["tx"] == keys[0]["tx"])


# -- every acknowledged call ----------------------------------------------------------------------


def test_every_acknowledged_keyed_call_has_its_record_and_outcome_from_one_commit(
    pg_url: str, tmp_path: Path
) -> None:
    with _gateway(pg_url, tmp_path) as gateway:
        # A lone synchronous caller (it commits its own record).
        alone = [gateway.call_sync("shop:charge", {"order_id": f"a{i}"}) for i in range(5)]
        # Concurrent threads (their records go through the writer, several per commit).
        with ThreadPoolExecutor(8) as pool:
            threaded = list(
                pool.map(
                    lambda i: gateway.call_sync("shop:charge", {"order_id": f"t{i}"}), range(24)
                )
            )

        # The async API on an event loop (the writer thread commits for it).
        async def many() -> list[CallOutcome]:
            calls = [gateway.call("shop:charge", {"order_id": f"c{i}"}) for i in range(16)]
            return list(await asyncio.gather(*calls))

        awaited = asyncio.run(many())
        outcomes = alone + threaded + awaited
        assert all(o.ok and "audit" not in o.metadata for o in outcomes), outcomes
        # Nothing acknowledged is missing, and each outcome rode with its record.
        assert all(_committed_together(pg_url, o) for o in outcomes)
        # The stored outcomes replay: the tool does not run again.
        again = gateway.call_sync("shop:charge", {"order_id": "a0"})
        assert again.ok and again.content == "charged a0"
        assert again.metadata["idempotency"]["replayed"] is True
        assert sorted(RUNS) == sorted(
            [f"a{i}" for i in range(5)]
            + [f"t{i}" for i in range(24)]
            + [f"c{i}" for i in range(16)]
        )


def test_without_a_durable_log_the_outcome_is_committed_by_itself(
    pg_url: str, tmp_path: Path
) -> None:
    with _gateway(pg_url, tmp_path) as gateway:
        assert gateway.audit is not None
        gateway.audit.durable = False  # nobody waits for records: nothing may wait on them
        outcome = gateway.call_sync("shop:charge", {"order_id": "n1"})
        assert outcome.ok
        # Readable at once by another replica, before the record is written.
        keys = _rows(
            pg_url, "SELECT status FROM idempotency_keys WHERE call_id = ?", outcome.call_id
        )
        assert keys == [{"status": "done"}]
        assert gateway.audit.flush(10)
        assert not _committed_together(pg_url, outcome)


# -- replicas racing one key ----------------------------------------------------------------------


def test_two_replicas_racing_one_key_run_it_once_and_every_caller_gets_its_outcome(
    pg_url: str, tmp_path: Path
) -> None:
    first, second = _gateway(pg_url, tmp_path), _gateway(pg_url, tmp_path)
    try:
        for round_ in range(6):
            order = f"race-{round_}"
            callers = 6
            barrier = threading.Barrier(callers)

            def call(i: int, order: str = order, barrier: threading.Barrier = barrier) -> Any:
                barrier.wait()
                return (first if i % 2 else second).call_sync("shop:charge", {"order_id": order})

            with ThreadPoolExecutor(callers) as pool:
                outcomes = list(pool.map(call, range(callers)))
            assert RUNS.count(order) == 1, RUNS
            assert all(o.ok and o.content == f"charged {order}" for o in outcomes), outcomes
            replayed = sorted(o.metadata["idempotency"]["replayed"] for o in outcomes)
            assert replayed == [False] + [True] * (callers - 1)
            ran = next(o for o in outcomes if not o.metadata["idempotency"]["replayed"])
            assert _committed_together(pg_url, ran)
    finally:
        first.close()
        second.close()


# -- a replica killed while its commit waits ------------------------------------------------------

_REPLICA = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from toolgate import AuditSettings, Gateway, GatewaySettings, tool
    from toolgate.gateway_settings import StateSettings
    from toolgate.stores.postgres_db import PostgresDatabase

    url, folder = sys.argv[1], Path(sys.argv[2])

    @tool(namespace="shop", effect="external_write", approval=False,
          idempotency_key="{{ args.order_id }}", timeout=1)
    def charge(order_id: str) -> str:
        with open(folder / "runs.log", "a") as runs:
            runs.write(order_id + "\\n")
        return "charged " + order_id

    settings = GatewaySettings(
        audit=AuditSettings(path=folder / "unused.db"),
        state=StateSettings(idempotency_lease_grace=0.5),
    )
    gateway = Gateway(settings, state_database=PostgresDatabase(url))
    gateway.add(charge)
    print(gateway.call_sync("shop:charge", {"order_id": "o-1"}), flush=True)
    """
)


def _waiting_commit(url: str) -> int | None:
    """The server process of a toolgate statement waiting for a lock on the audit table."""
    rows = _rows(
        url,
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock' AND query LIKE ?",
        "%INSERT INTO audit_records%",
    )
    return int(rows[0]["pid"]) if rows else None


@pytest.mark.parametrize("server", ["ends the statement", "lets the statement run"])
def test_a_replica_killed_while_committing_keeps_both_or_neither_and_never_reruns(
    pg_url: str, tmp_path: Path, server: str
) -> None:
    import psycopg

    locker = psycopg.connect(pg_url)  # a transaction that holds the audit table
    locker.execute("LOCK TABLE audit_records IN SHARE MODE")
    replica = subprocess.Popen(
        [sys.executable, "-c", _REPLICA, pg_url, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # The tool ran; its outcome and record wait in one statement for the lock.
        deadline = time.monotonic() + 60
        while (pid := _waiting_commit(pg_url)) is None:
            assert replica.poll() is None, replica.stdout.read() if replica.stdout else ""
            assert time.monotonic() < deadline, "the replica's commit never waited"
            time.sleep(0.05)
        assert (tmp_path / "runs.log").read_text() == "o-1\n"
        killed_at = time.time()
        replica.send_signal(signal.SIGKILL)  # never answered its caller
        replica.wait(30)
        if server == "ends the statement":
            # The server side goes too (a restart, an operator): the statement is rolled back.
            _rows(pg_url, "SELECT pg_terminate_backend(?) AS done", pid)
        locker.rollback()
        # Until the server process of the dead replica's statement has ended (it finishes or
        # abandons the statement first).
        deadline = time.monotonic() + 30
        while _rows(pg_url, "SELECT 1 AS one FROM pg_stat_activity WHERE pid = ?", pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        locker.close()
        if replica.poll() is None:
            replica.kill()

    record = _rows(pg_url, "SELECT call_id FROM audit_records WHERE tool_id = ?", "shop:charge")
    key = _rows(pg_url, "SELECT call_id, status FROM idempotency_keys")
    assert len(key) == 1
    # Both or neither: the statement that keeps the outcome is the one that keeps the record.
    both = record == [{"call_id": key[0]["call_id"]}] and key[0]["status"] == "done"
    neither = record == [] and key[0]["status"] == "running"
    assert both or neither, (record, key)
    if server == "ends the statement":
        assert neither

    # A retry on another replica after the first call's lease never runs the tool again: it
    # replays the kept outcome, or says the first call's outcome is unknown.
    (tmp_path / "runs.log").write_text("")
    retrying = _one_second_charge(tmp_path)
    with _gateway(pg_url, tmp_path, function=retrying, idempotency_lease_grace=0.5) as other:
        time.sleep(max(0.0, killed_at + 2 * 1 + 0.5 + 0.3 - time.time()))
        retry = other.call_sync("shop:charge", {"order_id": "o-1"})
    assert (tmp_path / "runs.log").read_text() == ""
    if neither:
        assert retry.code is ErrorCode.OUTCOME_UNKNOWN, retry
        assert key[0]["call_id"] in (retry.message or "")
    else:
        assert retry.ok and retry.content == "charged o-1", retry
        assert retry.metadata["idempotency"] == {
            "key": "o-1",
            "replayed": True,
            "original_call_id": key[0]["call_id"],
        }


def _one_second_charge(folder: Path) -> Any:
    """The replica's tool (same id, same one-second timeout), recording runs in ``folder``."""

    @tool(
        namespace="shop",
        effect="external_write",
        approval=False,
        idempotency_key="{{ args.order_id }}",
        timeout=1,
    )
    def charge(order_id: str) -> str:
        """Charge an order once."""
        with open(folder / "runs.log", "a") as runs:
            runs.write(order_id + "\n")
        return "charged " + order_id

    return charge


# -- the safety nets ------------------------------------------------------------------------------


def test_a_handed_over_write_whose_record_never_comes_is_committed_on_its_own(
    pg_url: str,
) -> None:
    db = PostgresDatabase(pg_url)
    log = PostgresAuditLog(db, retention_days=None)
    try:
        store = SqlIdempotencyStore(db)
        now = time.time()
        mine = IdempotencyRecord(
            tool_id="shop:charge",
            key="k",
            arguments_digest="d",
            call_id="call-never-observed",
            status=IdempotencyStatus.RUNNING,
            created_at=now,
            expires_at=now + 60,
        )
        assert store.claim(mine, now=now) is None
        told: list[BaseException | None] = []
        done = threading.Event()

        def then(error: BaseException | None) -> None:
            told.append(error)
            done.set()

        handed = store.complete_with_record(
            "shop:charge",
            "k",
            call_id=mine.call_id,
            outcome={"status": "ok", "content": 1},
            expires_at=now + 120,
            then=then,
        )
        assert handed
        # No record of that call ever reaches the log: the writer commits it by itself.
        assert done.wait(STALE_AFTER + 5)
        assert told == [None]
        stored = store.get("shop:charge", "k", now=time.time())
        assert stored is not None and stored.status is IdempotencyStatus.DONE
        assert stored.outcome == {"status": "ok", "content": 1}
        # A log that stops waiting for commits takes no more writes.
        log.durable = False
        assert not store.complete_with_record(
            "shop:charge", "k", call_id=mine.call_id, outcome={}, expires_at=now, then=then
        )
    finally:
        log.close()
        db.close()


def _finished(call_id: str) -> FinishedCall:
    outcome = CallOutcome(status=CallStatus.OK, tool_id="shop:charge", call_id=call_id, content="x")
    return FinishedCall(
        call_id=call_id,
        tool_id="shop:charge",
        tool=None,
        arguments={},
        agent="bot",
        session_id=None,
        workspace=None,
        started_at=time.time(),
        outcome=outcome,
    )


def test_a_record_its_caller_never_collects_is_written_and_flush_waits_for_it(
    pg_url: str,
) -> None:
    db = PostgresDatabase(pg_url)
    log = PostgresAuditLog(db, retention_days=None)
    try:
        # Observed on a thread without an event loop, nothing queued: parked for its caller,
        # who never asks (a denial's record, say). The writer takes it.
        log.observe(_finished("c-parked"))
        deadline = time.monotonic() + 10
        while log.count(tool_id="shop:charge") == 0:
            assert time.monotonic() < deadline, "the parked record was never written"
            time.sleep(0.02)
        # flush() returns only once a parked record is committed.
        log.observe(_finished("c-flushed"))
        assert log.flush(10)
        assert log.count(tool_id="shop:charge") == 2
        # The caller who asks writes its own, and is told it is recorded.
        log.observe(_finished("c-own"))
        assert log.recorded_sync("c-own", 10) is None
        assert _rows(pg_url, "SELECT 1 AS one FROM audit_records WHERE call_id = ?", "c-own")
    finally:
        log.close()
        db.close()


def test_a_claim_just_committed_answers_one_reservation_on_its_thread(pg_url: str) -> None:
    db = PostgresDatabase(pg_url)
    try:
        store = SqlIdempotencyStore(db)
        now = time.time()
        record = IdempotencyRecord("t:x", "k1", "d", "c1", IdempotencyStatus.RUNNING, now, now + 60)
        assert not db.wrote_just_now()
        assert store.claim(record, now=now) is None
        elsewhere: list[bool] = []
        thread = threading.Thread(target=lambda: elsewhere.append(db.wrote_just_now()))
        thread.start()
        thread.join()
        assert elsewhere == [False]  # another thread's call proved nothing
        assert db.wrote_just_now()
        assert not db.wrote_just_now()  # one write answers once
        # A claim that found the key taken wrote nothing.
        assert store.claim(record, now=now) is not None
        assert not db.wrote_just_now()
    finally:
        db.close()
