"""Fewer round trips per call on the shared state, with the same guarantees.

On PostgreSQL (with Redis), a lone ``call_sync`` caller commits its own audit record, and the
idempotency claim this thread just committed answers the audit reservation. A keyed call's
outcome is committed on its own, before the caller waits for its record, as before (an earlier
version committed it in the record's statement; the regression tests below are what that cost).
These tests hold the guarantees on real servers: every acknowledged call has its record and its
outcome; an outcome PostgreSQL refuses costs no other call its record; a cut connection, a full
audit queue or an audit commit slower than the key's lease loses no acknowledged outcome; a
replica killed while its record's commit waits never reruns the tool; replicas racing one key
run it once; closing the log while a call ends strands no record.
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


def _kept(url: str, outcome: CallOutcome) -> bool:
    """The call's record and its key's outcome are both committed."""
    records = _rows(url, "SELECT 1 AS one FROM audit_records WHERE call_id = ?", outcome.call_id)
    keys = _rows(
        url, "SELECT status, outcome FROM idempotency_keys WHERE call_id = ?", outcome.call_id
    )
    assert len(records) == 1, f"no record of acknowledged call {outcome.call_id}"
    assert len(keys) == 1 and keys[0]["status"] == "done", keys
    assert outcome.call_id in keys[0]["outcome"]
    return True


# -- every acknowledged call ----------------------------------------------------------------------


def test_every_acknowledged_keyed_call_has_its_record_and_outcome(
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
        # Nothing acknowledged is missing.
        assert all(_kept(pg_url, o) for o in outcomes)
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
        assert _kept(pg_url, outcome)


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
            assert _kept(pg_url, ran)
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
def test_a_replica_killed_while_its_record_commits_keeps_the_outcome_and_never_reruns(
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
        # The tool ran and its outcome is committed; its record waits for the lock.
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
    # The outcome was committed before the record's statement waited: it is kept either way.
    assert key[0]["status"] == "done", key
    if server == "ends the statement":
        assert record == []

    # A retry on another replica after the first call's lease never runs the tool again: it
    # replays the kept outcome.
    (tmp_path / "runs.log").write_text("")
    retrying = _one_second_charge(tmp_path)
    with _gateway(pg_url, tmp_path, function=retrying, idempotency_lease_grace=0.5) as other:
        time.sleep(max(0.0, killed_at + 2 * 1 + 0.5 + 0.3 - time.time()))
        retry = other.call_sync("shop:charge", {"order_id": "o-1"})
    assert (tmp_path / "runs.log").read_text() == ""
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


def test_a_record_its_caller_never_asks_for_is_written_and_flush_waits_for_it(
    pg_url: str,
) -> None:
    db = PostgresDatabase(pg_url)
    log = PostgresAuditLog(db, retention_days=None)
    try:
        # A record whose caller never asks for it (a denial's record, say): the writer takes it.
        log.observe(_finished("c-parked"))
        deadline = time.monotonic() + 10
        while log.count(tool_id="shop:charge") == 0:
            assert time.monotonic() < deadline, "the parked record was never written"
            time.sleep(0.02)
        # flush() returns only once an observed record is committed.
        log.observe(_finished("c-flushed"))
        assert log.flush(10)
        assert log.count(tool_id="shop:charge") == 2
        # The caller who asks is told it is recorded once it is.
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


# -- regressions: what committing the outcome with the audit record cost --------------------------


@tool(
    namespace="shop",
    effect="external_write",
    approval=False,
    idempotency_key="{{ args.k }}",
    calls_per_minute=10**9,
)
def echo(k: str, text: str) -> str:
    """Echo ``text``; ``BAD`` becomes a lone surrogate (bytes decoded with surrogateescape)."""
    time.sleep(0.01)
    return text.replace("BAD", bytes([0x80]).decode("utf-8", "surrogateescape"))


@tool(namespace="shop", effect="read_only")
def ping() -> str:
    """Answer."""
    return "pong"


@tool(
    namespace="shop",
    effect="external_write",
    approval=False,
    idempotency_key="{{ args.order_id }}",
    calls_per_minute=10**9,
    timeout=1,
)
def charge_quick(order_id: str) -> str:
    """Charge an order once (a one-second timeout: a short lease)."""
    with _RUNS_LOCK:
        RUNS.append(order_id)
    return "charged " + order_id


def _has_record(url: str, call_id: str) -> bool:
    return bool(_rows(url, "SELECT 1 AS one FROM audit_records WHERE call_id = ?", call_id))


def test_an_outcome_postgresql_cannot_store_costs_no_call_its_audit_record(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    gateway = gateway_with(
        state_database=PostgresDatabase(pg_url),
        audit_path=tmp_path / f"unused-{uuid.uuid4().hex}.db",
        redis_url=_redis(),
    )
    gateway.add(echo)
    with gateway:
        # A lone caller whose outcome text PostgreSQL cannot encode: only that outcome is lost.
        bad = gateway.call_sync("shop:echo", {"k": "bad", "text": "xBADy"})
        assert bad.status is CallStatus.OK and "audit" not in bad.metadata, bad
        assert _has_record(pg_url, bad.call_id)
        assert gateway.audit is not None and gateway.audit.healthy
        after = gateway.call_sync("shop:echo", {"k": "after", "text": "fine"})
        assert after.ok and "audit" not in after.metadata, after

        # Many calls in one batch (the audit table is held a moment), one of them bad.
        locker = psycopg.connect(pg_url)
        locker.execute("LOCK TABLE audit_records IN SHARE MODE")
        timer = threading.Timer(1.0, locker.rollback)
        timer.start()

        async def many() -> list[CallOutcome]:
            calls = [
                gateway.call("shop:echo", {"k": f"good{i}", "text": "fine"}) for i in range(20)
            ]
            calls.insert(10, gateway.call("shop:echo", {"k": "bad2", "text": "BAD"}))
            return list(await asyncio.gather(*calls))

        try:
            outcomes = asyncio.run(many())
        finally:
            timer.join()
            locker.close()
        assert all("audit" not in o.metadata for o in outcomes), outcomes
        assert all(_has_record(pg_url, o.call_id) for o in outcomes)
        good = [o for o in outcomes if o.content == "fine"]
        assert len(good) == 20 and all(_kept(pg_url, o) for o in good)


def test_a_connection_cut_while_the_record_commits_loses_no_acknowledged_outcome(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    gateway = gateway_with(
        state_database=PostgresDatabase(pg_url),
        audit_path=tmp_path / f"unused-{uuid.uuid4().hex}.db",
        redis_url=_redis(),
        idempotency_lease_grace=0.5,
    )
    gateway.add(charge_quick)
    gateway.add(ping)
    with gateway:
        locker = psycopg.connect(pg_url)
        locker.execute("LOCK TABLE audit_records IN SHARE MODE")
        answered: list[CallOutcome] = []
        caller = threading.Thread(
            target=lambda: answered.append(
                gateway.call_sync("shop:charge_quick", {"order_id": "a"})
            )
        )
        caller.start()
        try:
            deadline = time.monotonic() + 30
            while (pid := _waiting_commit(pg_url)) is None:
                assert time.monotonic() < deadline, "the record's commit never waited"
                time.sleep(0.05)
            # The server ends the waiting commit's connection (a restart, a proxy, an operator).
            _rows(pg_url, "SELECT pg_terminate_backend(?) AS done", pid)
            caller.join(20)
        finally:
            locker.rollback()
            locker.close()
        first = answered[0]
        assert first.ok and first.content == "charged a", first
        # The outcome is kept: a retry replays it, once the log is healthy again.
        key = _rows(pg_url, "SELECT call_id, status FROM idempotency_keys")
        assert key == [{"call_id": first.call_id, "status": "done"}]
        deadline = time.monotonic() + 20
        while not (gateway.call_sync("shop:ping", {}).ok and gateway.audit.healthy):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        retry = gateway.call_sync("shop:charge_quick", {"order_id": "a"})
        assert retry.ok and retry.content == "charged a", retry
        assert retry.metadata["idempotency"]["replayed"] is True
        assert RUNS == ["a"]


_FULL_QUEUE_REPLICA = textwrap.dedent(
    """
    import os, sys, threading, time
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

    @tool(namespace="shop", effect="read_only")
    def ping() -> str:
        return "pong"

    settings = GatewaySettings(
        audit=AuditSettings(path=folder / "unused.db"),
        state=StateSettings(idempotency_lease_grace=0.5),
    )
    gateway = Gateway(settings, state_database=PostgresDatabase(url))
    gateway.add(charge)
    gateway.add(ping)
    gateway.audit.queue_size = 1  # commits wait for a lock: the queue fills
    while gateway.audit.pending < gateway.audit.queue_size:
        threading.Thread(target=gateway.call_sync, args=("shop:ping", {}), daemon=True).start()
        time.sleep(0.3)
    out = gateway.call_sync("shop:charge", {"order_id": "o-1"})
    print("ANSWER", out.status.value, out.content, flush=True)
    os._exit(0)  # the replica stops right after answering
    """
)


def test_a_call_answered_while_the_audit_queue_is_full_keeps_its_outcome(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    locker = psycopg.connect(pg_url)
    locker.execute("LOCK TABLE audit_records IN SHARE MODE")
    try:
        replica = subprocess.run(
            [sys.executable, "-c", _FULL_QUEUE_REPLICA, pg_url, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        locker.rollback()
        locker.close()
    assert "ANSWER ok charged o-1" in replica.stdout, (replica.stdout, replica.stderr[-2000:])
    key = _rows(pg_url, "SELECT status FROM idempotency_keys")
    assert key == [{"status": "done"}], "the answered call's outcome was not kept"
    # A retry on another replica after the first call's lease replays it.
    (tmp_path / "runs.log").write_text("")
    retrying = _one_second_charge(tmp_path)
    with _gateway(pg_url, tmp_path, function=retrying, idempotency_lease_grace=0.5) as other:
        time.sleep(2 * 1 + 0.5 + 0.3)
        retry = other.call_sync("shop:charge", {"order_id": "o-1"})
    assert retry.ok and retry.content == "charged o-1", retry
    assert (tmp_path / "runs.log").read_text() == ""


def test_an_audit_commit_slower_than_the_lease_keeps_the_outcome(
    pg_url: str, tmp_path: Path
) -> None:
    import psycopg

    def replica() -> Gateway:
        gateway = gateway_with(
            state_database=PostgresDatabase(pg_url),
            audit_path=tmp_path / f"unused-{uuid.uuid4().hex}.db",
            redis_url=_redis(),
            idempotency_lease_grace=0.5,
        )
        gateway.add(charge_quick)
        return gateway

    first_replica, second_replica = replica(), replica()
    try:
        locker = psycopg.connect(pg_url)
        locker.execute("LOCK TABLE audit_records IN SHARE MODE")  # audit commits wait 4.5 s
        timer = threading.Timer(4.5, locker.rollback)
        timer.start()
        first: list[CallOutcome] = []
        caller = threading.Thread(
            target=lambda: first.append(
                first_replica.call_sync("shop:charge_quick", {"order_id": "o-1"})
            )
        )
        caller.start()
        time.sleep(3.0)  # longer than the key's lease (1 + 1 + 0.5 s)
        during = second_replica.call_sync("shop:charge_quick", {"order_id": "o-1"})
        caller.join(30)
        timer.join()
        locker.close()
        later = second_replica.call_sync("shop:charge_quick", {"order_id": "o-1"})
        assert first[0].ok, first
        assert during.code is not ErrorCode.OUTCOME_UNKNOWN, during
        assert later.ok and later.content == "charged o-1", later
        assert later.metadata["idempotency"]["replayed"] is True
        assert RUNS == ["o-1"]
    finally:
        first_replica.close()
        second_replica.close()


def test_closing_the_log_while_a_call_ends_strands_no_record(pg_url: str) -> None:
    db = PostgresDatabase(pg_url)
    log = PostgresAuditLog(db, retention_days=None)
    expect = log._acks.expect

    def slow_expect(call_id: str) -> None:  # the observing thread is preempted right here
        time.sleep(0.3)
        expect(call_id)

    log._acks.expect = slow_expect  # type: ignore[method-assign]
    try:
        observer = threading.Thread(target=log.observe, args=(_finished("c-closing"),))
        observer.start()
        time.sleep(0.05)
        log.close()  # the gateway shuts down while a call ends
        observer.join()
        started = time.monotonic()
        why = asyncio.run(log.recorded("c-closing", 3))
        assert time.monotonic() - started < 1, "the caller waited its whole timeout"
        # Either written before the log closed, or the caller is told at once it is not.
        recorded = _rows(
            pg_url, "SELECT 1 AS one FROM audit_records WHERE call_id = ?", "c-closing"
        )
        assert (why is None) == bool(recorded), (why, recorded)
    finally:
        db.close()
