"""The embedded SQLite implementation of :class:`~toolgate.stores.base.ApprovalStore`.

One connection, shared by every thread that calls the store (the event loop thread, worker
threads, the gateway's private loop thread), guarded by a lock. Each operation runs in its own
transaction; writes take the database's write lock up front (``BEGIN IMMEDIATE``), so a second
process using the same file waits (up to the busy timeout) instead of failing half-way. State
changes are ``UPDATE … WHERE id = ? AND status = ?`` checked by ``rowcount``, so two deciders —
in one process or two — see exactly one winner.

This module imports :mod:`sqlite3`; it is only imported when a store is built, never by
``import toolgate``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from .._json import canonical_json, thaw
from ..model import ApprovalRequest, ApprovalStatus, Decision, Grant, PermissionKey
from .base import ClosedRequestError, DuplicateRequestError

__all__ = ["BUSY_TIMEOUT", "SCHEMA_VERSION", "SQLiteApprovalStore"]

#: Seconds a statement waits for another connection's write lock before failing.
BUSY_TIMEOUT: Final = 5.0

#: The path that opens a private, in-memory database.
MEMORY: Final = ":memory:"

# Migration ``i`` moves the database from ``user_version`` ``i`` to ``i + 1``. Append new
# migrations; never edit an old one.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE IF NOT EXISTS approvals (
            id TEXT PRIMARY KEY,
            tool_id TEXT NOT NULL,
            title TEXT NOT NULL,
            risk TEXT NOT NULL,
            facts TEXT NOT NULL,
            arguments TEXT NOT NULL,
            arguments_digest TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            workspace TEXT,
            agent TEXT,
            session_id TEXT,
            permission_type TEXT NOT NULL,
            permission_key TEXT NOT NULL,
            security_message TEXT,
            display TEXT,
            status TEXT NOT NULL,
            decision TEXT,
            decided_by TEXT,
            decided_at REAL,
            decision_message TEXT,
            outcome TEXT
        )
        """,
        """
        CREATE INDEX IF NOT EXISTS approvals_call
            ON approvals (arguments_digest, tool_id, definition_hash, created_at)
        """,
        "CREATE INDEX IF NOT EXISTS approvals_status ON approvals (status, created_at)",
        """
        CREATE TABLE IF NOT EXISTS grants (
            id TEXT PRIMARY KEY,
            workspace TEXT,
            tool_id TEXT NOT NULL,
            permission_type TEXT NOT NULL,
            permission_key TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            granted_by TEXT,
            granted_at REAL NOT NULL,
            expires_at REAL,
            approval_id TEXT,
            metadata TEXT NOT NULL,
            revoked_at REAL
        )
        """,
        """
        CREATE INDEX IF NOT EXISTS grants_key
            ON grants (tool_id, permission_type, permission_key, definition_hash)
        """,
        "CREATE INDEX IF NOT EXISTS grants_granted_at ON grants (granted_at)",
        """
        CREATE TABLE IF NOT EXISTS approval_events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            request_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            actor TEXT,
            at REAL NOT NULL,
            detail TEXT
        )
        """,
        "CREATE INDEX IF NOT EXISTS approval_events_request ON approval_events (request_id, id)",
    ),
    (
        # At most one pending request per call: concurrent identical calls (in this process or
        # another one sharing the file) attach to one request instead of creating several.
        """
        CREATE UNIQUE INDEX IF NOT EXISTS approvals_one_pending ON approvals (
            tool_id, definition_hash, arguments_digest, COALESCE(workspace, ''),
            COALESCE(agent, '')
        ) WHERE status = 'pending'
        """,
    ),
)

#: The schema version this code writes (SQLite's ``PRAGMA user_version``).
SCHEMA_VERSION: Final = len(_MIGRATIONS)

# The statuses ``find_open`` returns (a pending one only while unexpired).
_OPEN: Final = (
    ApprovalStatus.PENDING.value,
    ApprovalStatus.APPROVED.value,
    ApprovalStatus.RUNNING.value,
    ApprovalStatus.COMPLETED.value,
    ApprovalStatus.DENIED.value,
)

_REQUEST_COLUMNS: Final = (
    "id, tool_id, title, risk, facts, arguments, arguments_digest, definition_hash, "
    "created_at, expires_at, workspace, agent, session_id, permission_type, permission_key, "
    "security_message, display, status, decision, decided_by, decided_at, decision_message"
)

_GRANT_COLUMNS: Final = (
    "id, workspace, tool_id, permission_type, permission_key, definition_hash, granted_by, "
    "granted_at, expires_at, approval_id, metadata"
)


def _request_from_row(row: sqlite3.Row) -> ApprovalRequest:
    """The one place a row of ``approvals`` becomes an :class:`ApprovalRequest`."""
    decision = row["decision"]
    return ApprovalRequest(
        id=row["id"],
        tool_id=row["tool_id"],
        title=row["title"],
        risk=row["risk"],
        facts=tuple((str(label), str(value)) for label, value in json.loads(row["facts"])),
        arguments=json.loads(row["arguments"]),
        arguments_digest=row["arguments_digest"],
        definition_hash=row["definition_hash"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        workspace=row["workspace"],
        agent=row["agent"],
        session_id=row["session_id"],
        permission=PermissionKey(row["permission_type"], row["permission_key"]),
        security_message=row["security_message"],
        display=row["display"],
        status=ApprovalStatus(row["status"]),
        decision=Decision(decision) if decision is not None else None,
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        decision_message=row["decision_message"],
    )


def _request_to_row(request: ApprovalRequest) -> tuple[Any, ...]:
    """The values of :data:`_REQUEST_COLUMNS` for a request, in order."""
    return (
        request.id,
        request.tool_id,
        request.title,
        request.risk,
        canonical_json([[label, value] for label, value in request.facts]),
        canonical_json(thaw(request.arguments)),
        request.arguments_digest,
        request.definition_hash,
        request.created_at,
        request.expires_at,
        request.workspace,
        request.agent,
        request.session_id,
        request.permission.type,
        request.permission.key,
        request.security_message,
        request.display,
        request.status.value,
        request.decision.value if request.decision is not None else None,
        request.decided_by,
        request.decided_at,
        request.decision_message,
    )


def _grant_from_row(row: sqlite3.Row) -> Grant:
    """The one place a row of ``grants`` becomes a :class:`Grant`."""
    return Grant(
        id=row["id"],
        workspace=row["workspace"],
        tool_id=row["tool_id"],
        permission=PermissionKey(row["permission_type"], row["permission_key"]),
        definition_hash=row["definition_hash"],
        granted_by=row["granted_by"],
        granted_at=row["granted_at"],
        expires_at=row["expires_at"],
        approval_id=row["approval_id"],
        metadata=json.loads(row["metadata"]),
    )


def _grant_to_row(grant: Grant) -> tuple[Any, ...]:
    """The values of :data:`_GRANT_COLUMNS` for a grant, in order."""
    return (
        grant.id,
        grant.workspace,
        grant.tool_id,
        grant.permission.type,
        grant.permission.key,
        grant.definition_hash,
        grant.granted_by,
        grant.granted_at,
        grant.expires_at,
        grant.approval_id,
        canonical_json(thaw(grant.metadata)),
    )


def _timestamp(at: float) -> str:
    """A Unix time as ISO 8601 UTC, for messages."""
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="seconds")


def _placeholders(values: tuple[Any, ...]) -> str:
    return ", ".join("?" * len(values))


def _ensure_private_file(path: Path) -> None:
    """Create the missing parent folders (mode 0700) and the database file (mode 0600).

    An existing file or folder keeps its mode: the store does not second-guess a choice the
    user made.
    """
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        with suppress(FileExistsError):  # another process made it first
            folder.mkdir(mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


class SQLiteApprovalStore:
    """Approval requests, grants and the approval log in one SQLite database.

    ``path`` is a database file (created with its folders if missing) or ``":memory:"`` for a
    private database that lives as long as the store. Use it as a context manager, or call
    :meth:`close`.

    Times are the caller's ``now`` (Unix seconds); a pending request is expired once
    ``now >= expires_at``, a grant once ``now >= expires_at``.
    """

    def __init__(self, path: Path | str) -> None:
        self._lock = threading.Lock()
        self.path: Path | None = None if str(path) == MEMORY else Path(path)
        """The database file, or ``None`` for an in-memory store."""
        if self.path is not None:
            _ensure_private_file(self.path)
        conn = sqlite3.connect(
            MEMORY if self.path is None else str(self.path),
            timeout=BUSY_TIMEOUT,
            isolation_level=None,  # transactions are explicit: see _write
            check_same_thread=False,  # shared by threads, guarded by self._lock
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            if self.path is not None:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def __repr__(self) -> str:
        return f"SQLiteApprovalStore({MEMORY if self.path is None else str(self.path)!r})"

    # -- plumbing ---------------------------------------------------------------------------

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Bring the schema to :data:`SCHEMA_VERSION`, one migration per transaction."""
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if version > SCHEMA_VERSION:
                    raise RuntimeError(
                        f"the approval database has schema version {version}, newer than the "
                        f"{SCHEMA_VERSION} this toolgate understands; upgrade toolgate"
                    )
                if version == SCHEMA_VERSION:
                    conn.execute("COMMIT")
                    return
                for statement in _MIGRATIONS[version]:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {version + 1}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the approval store is closed")
        return self._conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """The connection, for one or more read-only statements."""
        with self._lock:
            yield self._connection()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """The connection inside a write transaction: committed on success, else rolled back."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @staticmethod
    def _insert_event(
        conn: sqlite3.Connection,
        request_id: str,
        kind: str,
        *,
        actor: str | None,
        at: float,
        detail: Mapping[str, Any] | None,
    ) -> None:
        conn.execute(
            "INSERT INTO approval_events (request_id, kind, actor, at, detail) "
            "VALUES (?, ?, ?, ?, ?)",
            (
                request_id,
                kind,
                actor,
                at,
                canonical_json(thaw(detail)) if detail is not None else None,
            ),
        )

    @classmethod
    def _expire(cls, conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> None:
        """Mark a pending request found past its expiry ``expired`` and log it."""
        cursor = conn.execute(
            "UPDATE approvals SET status = ? WHERE id = ? AND status = ?",
            (ApprovalStatus.EXPIRED.value, row["id"], ApprovalStatus.PENDING.value),
        )
        if cursor.rowcount == 1:
            cls._insert_event(
                conn,
                row["id"],
                ApprovalStatus.EXPIRED.value,
                actor=None,
                at=now,
                detail={"expires_at": row["expires_at"]},
            )

    # -- requests ---------------------------------------------------------------------------

    def create(self, request: ApprovalRequest) -> None:
        """Store a new request (as given; normally ``pending``).

        Raises :class:`ValueError` when a request with this id already exists, and
        :class:`DuplicateRequestError` when this call already has a pending request.
        """
        values = _request_to_row(request)
        with self._write() as conn:
            try:
                conn.execute(
                    f"INSERT INTO approvals ({_REQUEST_COLUMNS}) VALUES ({_placeholders(values)})",
                    values,
                )
            except sqlite3.IntegrityError as exc:
                taken = conn.execute(
                    "SELECT 1 FROM approvals WHERE id = ?", (request.id,)
                ).fetchone()
                if taken is not None:
                    raise ValueError(f"approval request {request.id!r} already exists") from exc
                raise DuplicateRequestError(
                    f"a pending request for this call of {request.tool_id} already exists"
                ) from exc

    def get(self, request_id: str) -> ApprovalRequest | None:
        """The request with this id (any status), or ``None``."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_REQUEST_COLUMNS} FROM approvals WHERE id = ?", (request_id,)
            ).fetchone()
        return _request_from_row(row) if row is not None else None

    def find_open(
        self,
        *,
        tool_id: str,
        definition_hash: str,
        arguments_digest: str,
        workspace: str | None,
        agent: str | None,
        now: float,
    ) -> ApprovalRequest | None:
        """The newest request for exactly this call that is not yet closed.

        "Not closed": ``pending`` and not expired (a pending request found expired is marked
        ``expired``, logged, and skipped), ``approved``, ``completed`` or ``denied``.
        ``workspace`` and ``agent`` match NULL-safely: ``None`` matches ``None`` only.
        """
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_REQUEST_COLUMNS} FROM approvals "
                "WHERE arguments_digest = ? AND tool_id = ? AND definition_hash = ? "
                "AND workspace IS ? AND agent IS ? "
                f"AND status IN ({_placeholders(_OPEN)}) "
                "ORDER BY created_at DESC, rowid DESC",
                (arguments_digest, tool_id, definition_hash, workspace, agent, *_OPEN),
            ).fetchall()
            for row in rows:
                if row["status"] == ApprovalStatus.PENDING.value and now >= row["expires_at"]:
                    self._expire(conn, row, now)
                    continue
                return _request_from_row(row)
        return None

    def pending(self, *, now: float) -> list[ApprovalRequest]:
        """Every pending, unexpired request, oldest first (expired ones are marked so)."""
        found: list[ApprovalRequest] = []
        with self._write() as conn:
            rows = conn.execute(
                f"SELECT {_REQUEST_COLUMNS} FROM approvals WHERE status = ? "
                "ORDER BY created_at ASC, rowid ASC",
                (ApprovalStatus.PENDING.value,),
            ).fetchall()
            for row in rows:
                if now >= row["expires_at"]:
                    self._expire(conn, row, now)
                else:
                    found.append(_request_from_row(row))
        return found

    def decide(
        self,
        request_id: str,
        decision: Decision,
        *,
        decided_by: str | None,
        message: str | None,
        now: float,
    ) -> ApprovalRequest:
        """Record a decision on a pending, unexpired request; return the updated request.

        ``approve`` / ``always`` → ``approved``; ``deny`` → ``denied``. Raises
        :class:`ClosedRequestError` saying why when the request is unknown, already decided or
        expired (a pending request found expired is marked ``expired`` on the way).
        """
        status = ApprovalStatus.DENIED if decision is Decision.DENY else ApprovalStatus.APPROVED
        refusal: str | None = None
        decided: ApprovalRequest | None = None
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_REQUEST_COLUMNS} FROM approvals WHERE id = ?", (request_id,)
            ).fetchone()
            if row is None:
                refusal = f"no approval request {request_id!r}"
            elif row["status"] == ApprovalStatus.PENDING.value and now >= row["expires_at"]:
                self._expire(conn, row, now)
                refusal = f"expired at {_timestamp(row['expires_at'])}"
            elif row["status"] != ApprovalStatus.PENDING.value:
                refusal = self._why_closed(_request_from_row(row))
            else:
                cursor = conn.execute(
                    "UPDATE approvals SET status = ?, decision = ?, decided_by = ?, "
                    "decided_at = ?, decision_message = ? WHERE id = ? AND status = ?",
                    (
                        status.value,
                        decision.value,
                        decided_by,
                        now,
                        message,
                        request_id,
                        ApprovalStatus.PENDING.value,
                    ),
                )
                if cursor.rowcount != 1:  # pragma: no cover - the write lock rules it out
                    refusal = "already decided"
                else:
                    updated = conn.execute(
                        f"SELECT {_REQUEST_COLUMNS} FROM approvals WHERE id = ?", (request_id,)
                    ).fetchone()
                    decided = _request_from_row(updated)
        if decided is None:
            raise ClosedRequestError(refusal or "not pending")
        return decided

    @staticmethod
    def _why_closed(request: ApprovalRequest) -> str:
        """Why a request that is no longer pending cannot be decided."""
        if request.status is ApprovalStatus.EXPIRED:
            return f"expired at {_timestamp(request.expires_at)}"
        if request.decision is None:
            return f"no longer pending: {request.status.value}"
        verb = "denied" if request.decision is Decision.DENY else "approved"
        text = f"already decided: {verb}"
        if request.decided_by is not None:
            text += f" by {request.decided_by}"
        if request.status.value not in (verb, ApprovalStatus.PENDING.value):
            text += f" ({request.status.value})"
        return text

    def transition(
        self, request_id: str, *, from_status: ApprovalStatus, to_status: ApprovalStatus
    ) -> bool:
        """Move a request between two states atomically; False when it was not in
        ``from_status`` (someone else moved it first, or there is no such request)."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE approvals SET status = ? WHERE id = ? AND status = ?",
                (to_status.value, request_id, from_status.value),
            )
            return cursor.rowcount == 1

    def store_outcome(self, request_id: str, outcome: Mapping[str, Any]) -> None:
        """Keep the outcome of the approved call (JSON-ready) and mark it ``completed``.

        Raises :class:`ClosedRequestError` when there is no such request.
        """
        text = canonical_json(thaw(outcome))
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE approvals SET status = ?, outcome = ? WHERE id = ?",
                (ApprovalStatus.COMPLETED.value, text, request_id),
            )
            if cursor.rowcount != 1:
                raise ClosedRequestError(f"no approval request {request_id!r}")

    def outcome(self, request_id: str) -> dict[str, Any] | None:
        """The stored outcome of the approved call, if it has run."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT outcome FROM approvals WHERE id = ?", (request_id,)
            ).fetchone()
        if row is None or row["outcome"] is None:
            return None
        value: dict[str, Any] = json.loads(row["outcome"])
        return value

    # -- grants -----------------------------------------------------------------------------

    def add_grant(self, grant: Grant) -> None:
        """Store an "always allow" grant. Raises :class:`ValueError` for a duplicate id."""
        values = _grant_to_row(grant)
        with self._write() as conn:
            try:
                conn.execute(
                    f"INSERT INTO grants ({_GRANT_COLUMNS}) VALUES ({_placeholders(values)})",
                    values,
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(f"grant {grant.id!r} already exists") from exc

    def find_grant(
        self,
        *,
        workspace: str | None,
        tool_id: str,
        permission: PermissionKey,
        definition_hash: str,
        now: float,
    ) -> Grant | None:
        """The newest live grant covering exactly this workspace (NULL-safe), tool, permission
        key and tool definition."""
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM grants "
                "WHERE tool_id = ? AND permission_type = ? AND permission_key = ? "
                "AND definition_hash = ? AND workspace IS ? AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?) "
                "ORDER BY granted_at DESC, rowid DESC LIMIT 1",
                (tool_id, permission.type, permission.key, definition_hash, workspace, now),
            ).fetchone()
        return _grant_from_row(row) if row is not None else None

    def grants(self, *, now: float) -> list[Grant]:
        """Every live (unrevoked, unexpired) grant, newest first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM grants "
                "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) "
                "ORDER BY granted_at DESC, rowid DESC",
                (now,),
            ).fetchall()
        return [_grant_from_row(row) for row in rows]

    def revoke_grant(self, grant_id: str, *, now: float) -> bool:
        """Revoke a grant; False when there was no live grant with this id."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (now, grant_id, now),
            )
            return cursor.rowcount == 1

    # -- the approval log -------------------------------------------------------------------

    def record_event(
        self,
        request_id: str,
        kind: str,
        *,
        actor: str | None,
        at: float,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append to the approval log: who did what, when (the audit feature reads it)."""
        with self._write() as conn:
            self._insert_event(conn, request_id, kind, actor=actor, at=at, detail=detail)

    def events(self, request_id: str) -> list[dict[str, Any]]:
        """The log of one request, oldest first: dicts with ``id``, ``request_id``, ``kind``,
        ``actor``, ``at`` and ``detail`` (a dict, empty when none was recorded)."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, request_id, kind, actor, at, detail FROM approval_events "
                "WHERE request_id = ? ORDER BY id ASC",
                (request_id,),
            ).fetchall()
        return [
            {
                "id": row["id"],
                "request_id": row["request_id"],
                "kind": row["kind"],
                "actor": row["actor"],
                "at": row["at"],
                "detail": json.loads(row["detail"]) if row["detail"] is not None else {},
            }
            for row in rows
        ]

    # -- life cycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the database (idempotent). Later operations raise :class:`RuntimeError`."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteApprovalStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
