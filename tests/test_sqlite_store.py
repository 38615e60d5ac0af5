"""The SQLite approval store: round trips, matching rules, atomic state changes, persistence."""

from __future__ import annotations

import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from toolgate._json import digest
from toolgate.model import (
    TOOL_WIDE_KEY,
    ApprovalRequest,
    ApprovalStatus,
    Decision,
    Grant,
    PermissionKey,
)
from toolgate.stores import ApprovalStore, ClosedRequestError, DuplicateRequestError
from toolgate.stores.sqlite_approvals import SCHEMA_VERSION, SQLiteApprovalStore

NOW = 1_700_000_000.0


def make_request(request_id: str = "req-1", **changes: Any) -> ApprovalRequest:
    arguments = changes.pop("arguments", {"path": "/tmp/x", "recursive": True})
    fields: dict[str, Any] = {
        "id": request_id,
        "tool_id": "files.delete",
        "title": "Delete files",
        "risk": "high",
        "facts": (("Path", "/tmp/x"),),
        "arguments": arguments,
        "arguments_digest": digest(arguments),
        "definition_hash": "def-1",
        "created_at": NOW,
        "expires_at": NOW + 600,
        "workspace": "ws",
        "agent": "agent-a",
    }
    fields.update(changes)
    return ApprovalRequest(**fields)


def make_grant(grant_id: str = "g-1", **changes: Any) -> Grant:
    fields: dict[str, Any] = {
        "id": grant_id,
        "workspace": "ws",
        "tool_id": "shell.run",
        "permission": PermissionKey("command", "git status"),
        "definition_hash": "def-1",
        "granted_by": "alice",
        "granted_at": NOW,
    }
    fields.update(changes)
    return Grant(**fields)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "approvals.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteApprovalStore]:
    with SQLiteApprovalStore(db_path) as opened:
        yield opened


def find(store: SQLiteApprovalStore, request: ApprovalRequest, **changes: Any) -> Any:
    query: dict[str, Any] = {
        "tool_id": request.tool_id,
        "definition_hash": request.definition_hash,
        "arguments_digest": request.arguments_digest,
        "workspace": request.workspace,
        "agent": request.agent,
        "now": NOW,
    }
    query.update(changes)
    return store.find_open(**query)


def race(count: int, action: Callable[[int], Any]) -> tuple[list[Any], list[BaseException]]:
    """Run ``action(i)`` in ``count`` threads released together; collect results and errors."""
    barrier = threading.Barrier(count)
    results: list[Any] = []
    errors: list[BaseException] = []
    guard = threading.Lock()

    def run(index: int) -> None:
        barrier.wait()
        try:
            value = action(index)
        except BaseException as exc:  # noqa: BLE001 - collected and checked by the test
            with guard:
                errors.append(exc)
        else:
            with guard:
                results.append(value)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results, errors


# -- basics -------------------------------------------------------------------------------------


def test_store_satisfies_the_protocol(store: SQLiteApprovalStore) -> None:
    typed: ApprovalStore = store
    assert typed is store


def test_create_get_round_trips_every_field(store: SQLiteApprovalStore) -> None:
    request = make_request(
        arguments={
            "texte": "héllo wörld ✓ 日本語 🚀",
            "nested": {"list": [1, 2.5, None, False, {"k": "v"}], "empty": {}},
            "zahl": -3,
        },
        facts=(("Chemin", "/tmp/é"), ("命令", "rm -rf 🚀"), ("Empty", "")),
        workspace="wörkspace",
        agent="agent-ü",
        session_id="sess-9",
        permission=PermissionKey("path", "/tmp/é/*"),
        security_message="touches ünicode",
        display="files.delete /tmp/é",
        decision_message=None,
    )
    store.create(request)
    assert store.get("req-1") == request
    assert store.get("missing") is None


def test_round_trip_of_a_decided_request_with_defaults(store: SQLiteApprovalStore) -> None:
    request = make_request(
        workspace=None,
        agent=None,
        status=ApprovalStatus.DENIED,
        decision=Decision.DENY,
        decided_by="bob",
        decided_at=NOW + 1.25,
        decision_message="nope",
    )
    store.create(request)
    loaded = store.get("req-1")
    assert loaded == request
    assert loaded is not None
    assert loaded.permission == TOOL_WIDE_KEY
    assert loaded.session_id is None and loaded.display is None


def test_duplicate_ids_are_refused(store: SQLiteApprovalStore) -> None:
    store.create(make_request())
    with pytest.raises(ValueError, match="already exists"):
        store.create(make_request())
    store.add_grant(make_grant())
    with pytest.raises(ValueError, match="already exists"):
        store.add_grant(make_grant())


def test_arguments_are_stored_as_canonical_json(store: SQLiteApprovalStore, db_path: Path) -> None:
    store.create(make_request(arguments={"b": 1, "a": "é"}))
    with sqlite3.connect(db_path) as conn:
        (text,) = conn.execute("SELECT arguments FROM approvals").fetchone()
    assert text == '{"a":"é","b":1}'


# -- find_open ----------------------------------------------------------------------------------


def test_find_open_matches_exactly_this_call(store: SQLiteApprovalStore) -> None:
    request = make_request()
    store.create(request)
    assert find(store, request) == request
    assert find(store, request, arguments_digest=digest({"other": 1})) is None
    assert find(store, request, tool_id="files.other") is None
    assert find(store, request, definition_hash="def-2") is None
    assert find(store, request, workspace="other") is None
    assert find(store, request, workspace=None) is None
    assert find(store, request, agent="agent-b") is None
    assert find(store, request, agent=None) is None


def test_find_open_none_workspace_and_agent_match_none_only(store: SQLiteApprovalStore) -> None:
    request = make_request(workspace=None, agent=None)
    store.create(request)
    assert find(store, request) == request
    assert find(store, request, workspace="ws") is None
    assert find(store, request, agent="agent-a") is None


def test_find_open_returns_the_newest_open_request(store: SQLiteApprovalStore) -> None:
    older = make_request("old", created_at=NOW - 10, status=ApprovalStatus.DENIED)
    newer = make_request("new", created_at=NOW - 5)
    store.create(older)
    store.create(newer)
    found = find(store, older)
    assert found is not None and found.id == "new"


def test_one_call_has_at_most_one_pending_request(store: SQLiteApprovalStore) -> None:
    store.create(make_request("first"))
    with pytest.raises(DuplicateRequestError, match=r"files\.delete"):
        store.create(make_request("second"))
    with pytest.raises(ValueError, match="already exists"):
        store.create(make_request("first"))
    store.create(make_request("other-workspace", workspace=None))  # another call: fine
    store.create(make_request("no-agent", workspace=None, agent=None))
    with pytest.raises(DuplicateRequestError):  # NULLs count as equal here
        store.create(make_request("no-agent-again", workspace=None, agent=None))


@pytest.mark.parametrize(
    ("status", "is_open"),
    [
        (ApprovalStatus.APPROVED, True),
        (ApprovalStatus.COMPLETED, True),
        (ApprovalStatus.DENIED, True),
        (ApprovalStatus.EXPIRED, False),
        (ApprovalStatus.DELIVERED, False),
    ],
)
def test_find_open_statuses(
    store: SQLiteApprovalStore, status: ApprovalStatus, is_open: bool
) -> None:
    request = make_request(status=status, expires_at=NOW - 1)
    store.create(request)
    assert (find(store, request) is not None) is is_open


def test_find_open_marks_an_expired_pending_request_and_skips_it(
    store: SQLiteApprovalStore,
) -> None:
    approved = make_request("approved", created_at=NOW - 100, status=ApprovalStatus.APPROVED)
    stale = make_request("stale", created_at=NOW - 50, expires_at=NOW)
    store.create(approved)
    store.create(stale)
    found = find(store, stale)
    assert found is not None and found.id == "approved"
    expired = store.get("stale")
    assert expired is not None and expired.status is ApprovalStatus.EXPIRED
    [event] = store.events("stale")
    assert event["kind"] == "expired" and event["actor"] is None
    assert event["at"] == NOW and event["detail"] == {"expires_at": NOW}
    # Marked once: a second lookup logs nothing more.
    find(store, stale)
    assert len(store.events("stale")) == 1


def test_pending_lists_unexpired_oldest_first_and_marks_expired(
    store: SQLiteApprovalStore,
) -> None:
    store.create(make_request("b", created_at=NOW - 5, arguments={"n": "b"}))
    store.create(make_request("a", created_at=NOW - 9, arguments={"n": "a"}))
    store.create(make_request("gone", created_at=NOW - 20, expires_at=NOW - 1))
    store.create(make_request("done", status=ApprovalStatus.APPROVED))
    assert [r.id for r in store.pending(now=NOW)] == ["a", "b"]
    gone = store.get("gone")
    assert gone is not None and gone.status is ApprovalStatus.EXPIRED
    assert [e["kind"] for e in store.events("gone")] == ["expired"]
    assert store.pending(now=NOW + 600) == []


# -- decide -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("decision", "status"),
    [
        (Decision.APPROVE, ApprovalStatus.APPROVED),
        (Decision.ALWAYS, ApprovalStatus.APPROVED),
        (Decision.DENY, ApprovalStatus.DENIED),
    ],
)
def test_decide_transitions(
    store: SQLiteApprovalStore, decision: Decision, status: ApprovalStatus
) -> None:
    store.create(make_request())
    decided = store.decide("req-1", decision, decided_by="alice", message="ok", now=NOW + 3)
    assert decided.status is status
    assert decided.decision is decision
    assert (decided.decided_by, decided.decided_at, decided.decision_message) == (
        "alice",
        NOW + 3,
        "ok",
    )
    assert store.get("req-1") == decided


def test_decide_refuses_an_unknown_request(store: SQLiteApprovalStore) -> None:
    with pytest.raises(ClosedRequestError, match="no approval request 'nope'"):
        store.decide("nope", Decision.APPROVE, decided_by="alice", message=None, now=NOW)


def test_decide_refuses_an_already_decided_request(store: SQLiteApprovalStore) -> None:
    store.create(make_request())
    store.decide("req-1", Decision.APPROVE, decided_by="alice", message=None, now=NOW)
    with pytest.raises(ClosedRequestError, match="already decided: approved by alice"):
        store.decide("req-1", Decision.DENY, decided_by="bob", message=None, now=NOW)

    store.create(make_request("req-2"))
    store.decide("req-2", Decision.DENY, decided_by=None, message=None, now=NOW)
    with pytest.raises(ClosedRequestError, match=r"already decided: denied$"):
        store.decide("req-2", Decision.APPROVE, decided_by="bob", message=None, now=NOW)


def test_decide_refuses_a_completed_request(store: SQLiteApprovalStore) -> None:
    store.create(make_request())
    store.decide("req-1", Decision.ALWAYS, decided_by="alice", message=None, now=NOW)
    store.store_outcome("req-1", {"ok": True})
    with pytest.raises(ClosedRequestError, match=r"already decided: approved by alice \(completed"):
        store.decide("req-1", Decision.APPROVE, decided_by="bob", message=None, now=NOW)


def test_decide_refuses_and_marks_an_expired_request(store: SQLiteApprovalStore) -> None:
    store.create(make_request(expires_at=NOW))
    with pytest.raises(ClosedRequestError, match=r"expired at 2023-11-14T22:13:20\+00:00"):
        store.decide("req-1", Decision.APPROVE, decided_by="alice", message=None, now=NOW)
    expired = store.get("req-1")
    assert expired is not None and expired.status is ApprovalStatus.EXPIRED
    assert expired.decision is None
    assert [e["kind"] for e in store.events("req-1")] == ["expired"]
    # Already marked: the same reason, no second event.
    with pytest.raises(ClosedRequestError, match="expired at"):
        store.decide("req-1", Decision.APPROVE, decided_by="alice", message=None, now=NOW)
    assert len(store.events("req-1")) == 1


def test_twenty_threads_racing_to_decide_see_exactly_one_winner(
    store: SQLiteApprovalStore,
) -> None:
    store.create(make_request())

    def decide(index: int) -> ApprovalRequest:
        decision = Decision.DENY if index % 2 else Decision.APPROVE
        return store.decide("req-1", decision, decided_by=f"user-{index}", message=None, now=NOW)

    results, errors = race(20, decide)
    assert len(results) == 1
    assert len(errors) == 19
    assert all(isinstance(error, ClosedRequestError) for error in errors)
    assert all("already decided" in str(error) for error in errors)
    assert store.get("req-1") == results[0]


def test_two_connections_racing_to_decide_see_exactly_one_winner(db_path: Path) -> None:
    with SQLiteApprovalStore(db_path) as first, SQLiteApprovalStore(db_path) as second:
        first.create(make_request())
        stores = (first, second)

        def decide(index: int) -> ApprovalRequest:
            return stores[index % 2].decide(
                "req-1", Decision.APPROVE, decided_by=f"user-{index}", message=None, now=NOW
            )

        results, errors = race(10, decide)
        assert len(results) == 1
        assert len(errors) == 9
        assert all(isinstance(error, ClosedRequestError) for error in errors)


# -- transition and outcome ---------------------------------------------------------------------


def test_transition_moves_only_from_the_expected_status(store: SQLiteApprovalStore) -> None:
    store.create(make_request(status=ApprovalStatus.APPROVED))
    assert not store.transition(
        "req-1", from_status=ApprovalStatus.PENDING, to_status=ApprovalStatus.DENIED
    )
    assert store.transition(
        "req-1", from_status=ApprovalStatus.APPROVED, to_status=ApprovalStatus.DELIVERED
    )
    loaded = store.get("req-1")
    assert loaded is not None and loaded.status is ApprovalStatus.DELIVERED
    assert not store.transition(
        "missing", from_status=ApprovalStatus.APPROVED, to_status=ApprovalStatus.DELIVERED
    )


@pytest.mark.parametrize("racers", [2, 20])
def test_racing_transitions_see_exactly_one_winner(store: SQLiteApprovalStore, racers: int) -> None:
    store.create(make_request(status=ApprovalStatus.COMPLETED))
    results, errors = race(
        racers,
        lambda _: store.transition(
            "req-1", from_status=ApprovalStatus.COMPLETED, to_status=ApprovalStatus.DELIVERED
        ),
    )
    assert errors == []
    assert sorted(results) == [False] * (racers - 1) + [True]


def test_store_outcome_completes_the_request(store: SQLiteApprovalStore) -> None:
    store.create(make_request(status=ApprovalStatus.APPROVED))
    assert store.outcome("req-1") is None
    outcome = {"status": "ok", "result": {"deleted": ["é.txt"], "count": 1}, "error": None}
    store.store_outcome("req-1", outcome)
    assert store.outcome("req-1") == outcome
    loaded = store.get("req-1")
    assert loaded is not None and loaded.status is ApprovalStatus.COMPLETED
    assert store.outcome("missing") is None
    with pytest.raises(ClosedRequestError, match="no approval request 'missing'"):
        store.store_outcome("missing", {})


# -- grants -------------------------------------------------------------------------------------


def find_grant(store: SQLiteApprovalStore, **changes: Any) -> Grant | None:
    query: dict[str, Any] = {
        "workspace": "ws",
        "tool_id": "shell.run",
        "permission": PermissionKey("command", "git status"),
        "definition_hash": "def-1",
        "now": NOW,
    }
    query.update(changes)
    return store.find_grant(**query)


def test_grant_round_trip_and_exact_key_matching(store: SQLiteApprovalStore) -> None:
    grant = make_grant(
        expires_at=NOW + 60, approval_id="req-1", metadata={"note": "ünïcode", "n": [1, 2]}
    )
    store.add_grant(grant)
    assert find_grant(store) == grant
    assert find_grant(store, permission=PermissionKey("command", "git push")) is None
    assert find_grant(store, permission=PermissionKey("path", "git status")) is None
    assert find_grant(store, permission=TOOL_WIDE_KEY) is None
    assert find_grant(store, tool_id="shell.other") is None
    assert find_grant(store, workspace="other") is None
    assert find_grant(store, workspace=None) is None


def test_grant_definition_hash_mismatch_does_not_match(store: SQLiteApprovalStore) -> None:
    store.add_grant(make_grant())
    assert find_grant(store, definition_hash="def-2") is None


def test_grant_with_no_workspace_matches_no_workspace_only(store: SQLiteApprovalStore) -> None:
    store.add_grant(make_grant(workspace=None))
    assert find_grant(store, workspace=None) is not None
    assert find_grant(store, workspace="ws") is None


def test_grant_expiry(store: SQLiteApprovalStore) -> None:
    store.add_grant(make_grant(expires_at=NOW + 10))
    assert find_grant(store, now=NOW + 9.5) is not None
    assert find_grant(store, now=NOW + 10) is None
    assert store.grants(now=NOW + 10) == []
    assert not store.revoke_grant("g-1", now=NOW + 11)


def test_grants_lists_live_ones_newest_first(store: SQLiteApprovalStore) -> None:
    store.add_grant(make_grant("old", granted_at=NOW - 10))
    store.add_grant(make_grant("new", granted_at=NOW - 1))
    store.add_grant(make_grant("expired", granted_at=NOW - 5, expires_at=NOW - 1))
    store.add_grant(make_grant("forever", granted_at=NOW - 3, expires_at=None))
    assert [g.id for g in store.grants(now=NOW)] == ["new", "forever", "old"]


def test_revoke_grant(store: SQLiteApprovalStore) -> None:
    store.add_grant(make_grant())
    assert store.revoke_grant("g-1", now=NOW)
    assert find_grant(store) is None
    assert store.grants(now=NOW) == []
    assert not store.revoke_grant("g-1", now=NOW)
    assert not store.revoke_grant("missing", now=NOW)


def test_find_grant_prefers_the_newest_live_grant(store: SQLiteApprovalStore) -> None:
    store.add_grant(make_grant("old", granted_at=NOW - 10))
    store.add_grant(make_grant("new", granted_at=NOW - 1))
    found = find_grant(store)
    assert found is not None and found.id == "new"
    store.revoke_grant("new", now=NOW)
    found = find_grant(store)
    assert found is not None and found.id == "old"


# -- events -------------------------------------------------------------------------------------


def test_events_log_oldest_first(store: SQLiteApprovalStore) -> None:
    store.record_event("req-1", "created", actor="agent-a", at=NOW)
    store.record_event("req-2", "created", actor=None, at=NOW + 1)
    store.record_event("req-1", "approved", actor="alice", at=NOW + 2, detail={"message": "fine ✓"})
    events = store.events("req-1")
    assert [(e["kind"], e["actor"], e["at"], e["detail"]) for e in events] == [
        ("created", "agent-a", NOW, {}),
        ("approved", "alice", NOW + 2, {"message": "fine ✓"}),
    ]
    assert all(e["request_id"] == "req-1" for e in events)
    assert events[0]["id"] < events[1]["id"]
    assert store.events("unknown") == []


# -- files, persistence and life cycle ----------------------------------------------------------


def test_persistence_across_reopen(db_path: Path) -> None:
    request = make_request(arguments={"q": "ünïcode"})
    grant = make_grant(metadata={"from": "req-1"})
    with SQLiteApprovalStore(db_path) as store:
        store.create(request)
        store.create(make_request("req-2", created_at=NOW + 1))
        store.decide("req-1", Decision.ALWAYS, decided_by="alice", message="go", now=NOW + 1)
        store.store_outcome("req-1", {"status": "ok", "result": 42})
        store.add_grant(grant)
        store.record_event("req-1", "approved", actor="alice", at=NOW + 1)

    with SQLiteApprovalStore(db_path) as store:
        loaded = store.get("req-1")
        assert loaded == replace(
            request,
            status=ApprovalStatus.COMPLETED,
            decision=Decision.ALWAYS,
            decided_by="alice",
            decided_at=NOW + 1,
            decision_message="go",
        )
        assert store.outcome("req-1") == {"status": "ok", "result": 42}
        assert [r.id for r in store.pending(now=NOW)] == ["req-2"]
        assert store.grants(now=NOW) == [grant]
        assert find_grant(store) == grant
        assert [e["kind"] for e in store.events("req-1")] == ["approved"]


def test_files_and_folders_are_private(tmp_path: Path) -> None:
    db_path = tmp_path / "a" / "b" / "approvals.db"
    with SQLiteApprovalStore(db_path) as store:
        store.create(make_request())
        assert store.path == db_path
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700


def test_database_settings(store: SQLiteApprovalStore, db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"approvals", "grants", "approval_events"} <= tables


def test_a_newer_schema_is_refused(db_path: Path) -> None:
    SQLiteApprovalStore(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="newer"):
        SQLiteApprovalStore(db_path)


def test_memory_store_works() -> None:
    with SQLiteApprovalStore(":memory:") as store:
        assert store.path is None
        request = make_request()
        store.create(request)
        assert find(store, request) == request
        store.decide("req-1", Decision.APPROVE, decided_by="alice", message=None, now=NOW)
        store.add_grant(make_grant())
        assert find_grant(store) is not None


def test_close_is_idempotent_and_final(db_path: Path) -> None:
    store = SQLiteApprovalStore(str(db_path))
    store.close()
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.get("req-1")
