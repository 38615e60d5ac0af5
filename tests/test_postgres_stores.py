"""The shared-state stores on a real PostgreSQL server: schema, approvals, idempotency, agent keys.

The approval store's behaviour tests from ``test_sqlite_store`` run here again, unchanged, against
PostgreSQL (the ``store`` fixture below replaces theirs): the SQL is one for both engines.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from postgres_support import drop_database, scratch_database, upgraded_database
from test_idempotency import RUNS, slow_sync_charge
from test_sqlite_store import (  # noqa: F401 - collected here again, against PostgreSQL
    NOW,
    make_request,
    test_create_get_round_trips_every_field,
    test_decide_refuses_a_completed_request,
    test_decide_refuses_an_already_decided_request,
    test_decide_refuses_an_unknown_request,
    test_decide_refuses_and_marks_an_expired_request,
    test_decide_transitions,
    test_duplicate_ids_are_refused,
    test_events_log_oldest_first,
    test_find_grant_prefers_the_newest_live_grant,
    test_find_open_marks_an_expired_pending_request_and_skips_it,
    test_find_open_matches_exactly_this_call,
    test_find_open_none_workspace_and_agent_match_none_only,
    test_find_open_returns_the_newest_open_request,
    test_find_open_statuses,
    test_grant_definition_hash_mismatch_does_not_match,
    test_grant_expiry,
    test_grant_round_trip_and_exact_key_matching,
    test_grant_with_no_workspace_matches_no_workspace_only,
    test_grants_lists_live_ones_newest_first,
    test_one_call_has_at_most_one_pending_request,
    test_pending_lists_unexpired_oldest_first_and_marks_expired,
    test_racing_transitions_see_exactly_one_winner,
    test_revoke_grant,
    test_round_trip_of_a_decided_request_with_defaults,
    test_store_outcome_completes_the_request,
    test_store_satisfies_the_protocol,
    test_transition_moves_only_from_the_expected_status,
    test_twenty_threads_racing_to_decide_see_exactly_one_winner,
)
from toolgate import ErrorCode, Gateway, tool
from toolgate.errors import StateUnavailableError
from toolgate.model import ApprovalStatus, Decision
from toolgate.pipeline.idempotency import IdempotencyStage
from toolgate.stores import DuplicateRequestError
from toolgate.stores.agent_keys import AgentKeyExistsError, AgentKeyStore
from toolgate.stores.sql_approvals import SqlApprovalStore
from toolgate.stores.sql_idempotency import SqlIdempotencyStore

pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")

from gateway_support import gateway_with
from toolgate.stores.postgres_db import PostgresDatabase, redact_url
from toolgate.stores.postgres_schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    SchemaError,
    check_schema,
    schema_version,
    upgrade,
)

pytestmark = pytest.mark.slow

_TABLES = "approvals, grants, approval_events, idempotency_keys, agent_keys, rate_limit_counters"


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A database of this module, at the current schema."""
    with upgraded_database() as url:
        yield url


@pytest.fixture(autouse=True)
def _empty_tables(request: pytest.FixtureRequest) -> None:
    if "pg_url" not in request.fixturenames:
        return
    db = PostgresDatabase(request.getfixturevalue("pg_url"), max_size=1)
    with db.write() as conn:
        conn.execute(f"TRUNCATE {_TABLES}")
        conn.execute("UPDATE agent_keys_generation SET value = 0")
    db.close()


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresDatabase]:
    db = PostgresDatabase(pg_url)
    yield db
    db.close()


@pytest.fixture
def store(pg: PostgresDatabase) -> Iterator[SqlApprovalStore]:
    """The approval store of the shared tests above, on PostgreSQL."""
    with SqlApprovalStore(pg) as opened:
        yield opened


# -- connection --------------------------------------------------------------------------------


def test_a_server_that_does_not_answer_is_unavailable_and_the_password_is_not_shown() -> None:
    url = "postgresql://toolgate:s3cret@127.0.0.1:1/toolgate"
    with pytest.raises(StateUnavailableError) as caught:
        PostgresDatabase(url, timeout=1.0)
    message = str(caught.value)
    assert "127.0.0.1:1" in message and "s3cret" not in message
    assert redact_url(url) == "postgresql://toolgate:***@127.0.0.1:1/toolgate"


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://bob:Hunter/2Pw@127.0.0.1:1/test", "2Pw"),  # a "/" in the password
        ("postgresql://bob:Hun@ter2Pw@127.0.0.1:1/test", "ter2Pw"),  # an "@" in it
        ("postgresql://bob@127.0.0.1:1/test?password=Q9zz&sslmode=disable", "Q9zz"),
        ("postgresql://bob:pa?ss77@127.0.0.1:1/test", "ss77"),  # libpq takes a raw "?"
        ("postgresql://bob:pa#ss9x@127.0.0.1:1/test", "ss9x"),
        ("postgresql://bob@127.0.0.1:1/test?sslpassword=KeyPass1", "KeyPass1"),
    ],
)
def test_no_piece_of_an_awkward_password_is_shown_when_connecting_fails(
    url: str, secret: str
) -> None:
    with pytest.raises(StateUnavailableError) as caught:
        PostgresDatabase(url, timeout=1.0)
    assert secret not in str(caught.value), str(caught.value)
    assert secret not in redact_url(url)


def test_a_one_letter_password_does_not_mangle_the_reason() -> None:
    """Masking every "e" of the reason hid it ("Conn***ction r***fus***d") and told anyone
    reading the log the password."""
    with pytest.raises(StateUnavailableError) as caught:
        PostgresDatabase("postgresql://bob:e@127.0.0.1:1/test", timeout=1.0)
    message = str(caught.value)
    assert "Connection refused" in message, message


def test_a_redis_drivers_reason_keeps_no_piece_of_the_password() -> None:
    from toolgate._urls import scrub_reason

    url = "redis://:Sec/ret99@localhost:6379/0"
    reason = scrub_reason("Port could not be cast to integer value as 'Sec'", url)
    assert "Sec" not in reason and "ret99" not in reason


def test_a_failed_statement_is_not_an_outage_and_trips_nothing(pg: PostgresDatabase) -> None:
    """A lock timeout (like a deadlock or a full disk) fails one statement; the next ones
    must still reach the server, not fail at once as they do while it is gone."""
    with pg.dedicated() as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE toolgate_keys IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(StateUnavailableError, match="lock timeout"), pg.write() as conn:
            conn.execute("SET LOCAL lock_timeout = '50ms'")
            conn.execute("SELECT * FROM toolgate_keys").fetchall()
        holder.execute("ROLLBACK")
    assert pg.check()
    with pg.read() as conn:
        assert conn.execute("SELECT 1 AS one").fetchone()["one"] == 1


def test_placeholders_with_percent_signs_and_casts_survive_translation(
    pg: PostgresDatabase,
) -> None:
    with pg.read() as conn:
        row = conn.execute(
            "SELECT '100%' AS pct, CAST(:n AS INTEGER) + 1 AS sum, 'x::y' AS colons", {"n": 2}
        ).fetchone()
    assert row == {"pct": "100%", "sum": 3, "colons": "x::y"}


# -- schema ------------------------------------------------------------------------------------


def test_a_database_never_upgraded_is_refused_with_the_command_to_run() -> None:
    with scratch_database() as url:
        db = PostgresDatabase(url)
        try:
            assert schema_version(db) == 0
            with pytest.raises(SchemaError, match=r"no toolgate schema.*toolgate db upgrade"):
                check_schema(db)
            assert upgrade(db) == (0, SCHEMA_VERSION)
            assert upgrade(db) == (SCHEMA_VERSION, SCHEMA_VERSION)
            check_schema(db)
        finally:
            db.close()


def test_upgrades_racing_on_a_fresh_database_apply_each_migration_once() -> None:
    with scratch_database() as url:
        dbs = [PostgresDatabase(url, max_size=1) for _ in range(3)]
        try:
            barrier = threading.Barrier(len(dbs))

            def run(db: PostgresDatabase) -> tuple[int, int]:
                barrier.wait()
                return upgrade(db)

            with ThreadPoolExecutor(len(dbs)) as pool:
                results = list(pool.map(run, dbs))
            # Every upgrade ends at the current version, and one of them started from nothing;
            # a migration run twice would have failed (its CREATE TABLEs have no IF NOT EXISTS).
            # Which upgrade ran which migration depends on who took the lock first.
            assert all(after == SCHEMA_VERSION for _, after in results)
            assert min(before for before, _ in results) == 0
            check_schema(dbs[0])
        finally:
            for db in dbs:
                db.close()


def test_a_schema_from_a_newer_toolgate_is_refused(pg: PostgresDatabase) -> None:
    with pg.write() as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (f"{SCHEMA_VERSION + 1:04d}",))
    try:
        with pytest.raises(SchemaError, match=r"newer than .* upgrade toolgate"):
            check_schema(pg)
        with pytest.raises(SchemaError, match="newer than"):
            upgrade(pg)
    finally:
        with pg.write() as conn:
            conn.execute("UPDATE alembic_version SET version_num = ?", (f"{SCHEMA_VERSION:04d}",))


def test_alembic_runs_the_migrations_and_records_its_revision(pg: PostgresDatabase) -> None:
    with pg.read() as conn:
        [row] = conn.execute("SELECT version_num FROM alembic_version").fetchall()
        tables = {
            r["tablename"]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
    assert row["version_num"] == f"{SCHEMA_VERSION:04d}"
    assert {"approvals", "audit_records", "secrets", "alembic_version"} <= tables
    assert "toolgate_schema" not in tables


def test_a_database_the_earlier_migrations_made_is_adopted_and_upgraded() -> None:
    """Version 1 as the hand-rolled runner left it (its tables, its toolgate_schema row)."""
    spec = importlib.util.spec_from_file_location(
        "toolgate_migration_0001", MIGRATIONS / "versions" / "0001_state.py"
    )
    assert spec is not None and spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    statements: list[str] = []
    migration.op = SimpleNamespace(execute=statements.append)  # its SQL, without Alembic
    migration.upgrade()
    with scratch_database() as url:
        db = PostgresDatabase(url)
        try:
            with db.write() as conn:
                for statement in statements:
                    conn.execute(statement)
                conn.execute(
                    "CREATE TABLE toolgate_schema (id INTEGER PRIMARY KEY, version INTEGER)"
                )
                conn.execute("INSERT INTO toolgate_schema VALUES (1, 1)")
            assert schema_version(db) == 1
            with pytest.raises(SchemaError, match="has schema version 1"):
                check_schema(db)
            assert upgrade(db) == (1, SCHEMA_VERSION)
            check_schema(db)
            with db.read() as conn:
                legacy = conn.execute("SELECT to_regclass('toolgate_schema') AS t").fetchone()
            assert legacy["t"] is None
        finally:
            db.close()


# -- approvals across replicas -----------------------------------------------------------------


def test_two_replicas_racing_to_decide_see_exactly_one_winner(pg_url: str) -> None:
    first_db, second_db = PostgresDatabase(pg_url), PostgresDatabase(pg_url)
    with SqlApprovalStore(first_db) as first, SqlApprovalStore(second_db) as second:
        request = make_request()
        first.create(request)
        barrier = threading.Barrier(2)
        results: list[Any] = []

        def decide(replica: SqlApprovalStore, decision: Decision) -> None:
            barrier.wait()
            try:
                decided = replica.decide(
                    request.id, decision, decided_by="x", message=None, now=NOW
                )
                results.append(decided)
            except Exception as exc:  # noqa: BLE001 - checked below
                results.append(exc)

        threads = [
            threading.Thread(target=decide, args=(first, Decision.APPROVE)),
            threading.Thread(target=decide, args=(second, Decision.DENY)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        winners = [r for r in results if not isinstance(r, Exception)]
        assert len(winners) == 1
        assert second.get(request.id).status is winners[0].status  # type: ignore[union-attr]
        assert winners[0].status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED)


def test_a_request_made_on_one_replica_is_pending_on_another(pg_url: str) -> None:
    with (
        SqlApprovalStore(PostgresDatabase(pg_url)) as a,
        SqlApprovalStore(PostgresDatabase(pg_url)) as b,
    ):
        request = make_request()
        a.create(request)
        assert [r.id for r in b.pending(now=NOW)] == [request.id]
        with pytest.raises(DuplicateRequestError):
            b.create(replace(request, id="apr_other"))


# -- idempotency across replicas ---------------------------------------------------------------


def test_gateways_on_one_database_run_a_keyed_call_once(pg_url: str) -> None:
    """Four gateways (as four replicas), each with its own pool, get the same call at once."""
    RUNS.clear()
    gateways = [
        Gateway(stages=[IdempotencyStage(SqlIdempotencyStore(PostgresDatabase(pg_url)))])
        for _ in range(4)
    ]
    try:
        for gw in gateways:
            gw.add(slow_sync_charge)
        barrier = threading.Barrier(len(gateways))

        def call(gw: Gateway) -> Any:
            barrier.wait()
            return gw.call_sync("pay:slow_sync_charge", {"order_id": "o-1", "amount": 5})

        with ThreadPoolExecutor(len(gateways)) as pool:
            outcomes = list(pool.map(call, gateways))
    finally:
        for gw in gateways:
            gw.close()
    assert len(RUNS) == 1
    assert all(o.ok and o.content == {"charge": 1} for o in outcomes)
    assert sorted(o.metadata["idempotency"]["replayed"] for o in outcomes) == [False] + [True] * 3


def test_a_database_that_goes_away_makes_calls_unavailable_not_wrong() -> None:
    RUNS.clear()
    with scratch_database() as url:
        db = PostgresDatabase(url, timeout=1.0)
        upgrade(db)
        with Gateway(stages=[IdempotencyStage(SqlIdempotencyStore(db))]) as gw:
            gw.add(slow_sync_charge)
            assert gw.call_sync("pay:slow_sync_charge", {"order_id": "o-1", "amount": 5}).ok
            drop_database(url)  # cuts every connection; reconnecting fails
            outcome = gw.call_sync("pay:slow_sync_charge", {"order_id": "o-2", "amount": 5})
    assert outcome.code is ErrorCode.UNAVAILABLE
    assert "PostgreSQL" in (outcome.message or "") and "try again" in (outcome.message or "")
    assert len(RUNS) == 1  # the second call never ran without its idempotency record


# -- agent keys --------------------------------------------------------------------------------


def test_agent_keys_added_and_revoked_on_one_replica_reach_another(pg_url: str) -> None:
    with AgentKeyStore(PostgresDatabase(pg_url)) as a, AgentKeyStore(PostgresDatabase(pg_url)) as b:
        seen = b.generation()
        key, _ = a.add("ci-bot", "a" * 64, now=NOW)
        with pytest.raises(AgentKeyExistsError):
            b.add("ci-bot", "b" * 64, now=NOW)
        time.sleep(0.6)  # b re-reads the generation at most every half second
        assert b.generation() != seen
        assert [k.id for k in b.list_keys()] == [key.id]
        assert [k.id for k in b.revoke("ci-bot", now=NOW + 1)] == [key.id]
        assert a.list_keys() == []


# -- rate limits -------------------------------------------------------------------------------


@tool(namespace="lim", calls_per_minute=3)
def limited() -> str:
    """Three calls a minute."""
    return "ok"


def test_rate_limit_counters_in_the_shared_database_count_every_gateway(pg_url: str) -> None:
    """Without Redis the counters live in PostgreSQL: two gateways share one budget."""
    with (
        Gateway(state_database=PostgresDatabase(pg_url)) as one,
        Gateway(state_database=PostgresDatabase(pg_url)) as two,
    ):
        one.add(limited)
        two.add(limited)
        outcomes = [gw.call_sync("lim:limited", {}) for gw in (one, two, one, two, one)]
    assert [o.ok for o in outcomes] == [True, True, True, False, False]
    assert outcomes[-1].code is ErrorCode.RATE_LIMITED


def test_a_redis_that_does_not_answer_makes_limited_calls_unavailable_not_unlimited() -> None:
    pytest.importorskip("redis", reason="toolgate[redis] is not installed")
    with gateway_with(redis_url="redis://127.0.0.1:1/0") as gw:
        gw.add(limited)
        outcome = gw.call_sync("lim:limited", {})
    assert outcome.code is ErrorCode.UNAVAILABLE
    assert "Redis at redis://127.0.0.1:1/0" in (outcome.message or "")


# -- health ------------------------------------------------------------------------------------


def test_healthz_is_degraded_while_the_shared_database_is_gone() -> None:
    from fastapi.testclient import TestClient

    from http_api_support import LOCAL, make_app

    with scratch_database() as url:
        db = PostgresDatabase(url, timeout=1.0)
        upgrade(db)
        with Gateway(state_database=db) as gw:
            gw.add(limited)
            with TestClient(make_app(gw), client=LOCAL) as client:
                health = client.get("/healthz").json()
                assert health["status"] == "ok"
                assert health["state"] == {"shared": True, "database": True, "redis": None}
                drop_database(url)
                health = client.get("/healthz").json()
                assert health["status"] == "degraded"
                assert health["state"]["database"] is False
