"""Approval requests, grants and the approval log in SQL: one store for SQLite and PostgreSQL.

:class:`SqlApprovalStore` implements :class:`~toolgate.stores.approvals.ApprovalStore` over any
:class:`~toolgate.stores.sql.SqlDatabase`:
:class:`~toolgate.stores.sqlite_approvals.SQLiteApprovalStore`
gives it the embedded file, the shared state gives it PostgreSQL. Each operation is one
transaction. State changes are ``UPDATE … WHERE id = ? AND status = ?`` checked by ``rowcount``,
so two deciders — threads, processes or replicas — see exactly one winner; a unique index allows
one pending request per call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from .._json import canonical_json, thaw
from ..model import ApprovalRequest, ApprovalStatus, Decision, Grant, PermissionKey
from .approvals import ClosedRequestError, DuplicateRequestError
from .sql import SqlConnection, SqlDatabase
from .sqlite_rows import (
    _GRANT_COLUMNS,
    _OPEN,
    _REQUEST_COLUMNS,
    _grant_from_row,
    _grant_to_row,
    _placeholders,
    _request_from_row,
    _request_to_row,
    _timestamp,
)

__all__ = ["SqlApprovalStore"]


class SqlApprovalStore:
    """Approval requests, grants and the approval log in the tables of one SQL database.

    Times are the caller's ``now`` (Unix seconds); a pending request is expired once
    ``now >= expires_at``, a grant once ``now >= expires_at``. Use it as a context manager, or
    call :meth:`close` (which closes the database).
    """

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db

    def __repr__(self) -> str:
        return f"SqlApprovalStore({self._db!r})"

    @staticmethod
    def _insert_event(
        conn: SqlConnection,
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
    def _expire(cls, conn: SqlConnection, row: Any, now: float) -> None:
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
        try:
            with self._db.write() as conn:
                conn.execute(
                    f"INSERT INTO approvals ({_REQUEST_COLUMNS}) VALUES ({_placeholders(values)})",
                    values,
                )
        except self._db.IntegrityError as exc:
            # Asked after the failed transaction: PostgreSQL allows nothing more inside it.
            with self._db.read() as conn:
                taken = conn.execute(
                    "SELECT 1 AS taken FROM approvals WHERE id = ?", (request.id,)
                ).fetchone()
            if taken is not None:
                raise ValueError(f"approval request {request.id!r} already exists") from exc
            raise DuplicateRequestError(
                f"a pending request for this call of {request.tool_id} already exists"
            ) from exc

    def get(self, request_id: str) -> ApprovalRequest | None:
        """The request with this id (any status), or ``None``."""
        with self._db.read() as conn:
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
        with self._db.write() as conn:
            rows = conn.execute(
                f"SELECT {_REQUEST_COLUMNS} FROM approvals "
                "WHERE arguments_digest = ? AND tool_id = ? AND definition_hash = ? "
                "AND COALESCE(workspace, '') = COALESCE(?, '') "
                "AND COALESCE(agent, '') = COALESCE(?, '') "
                f"AND status IN ({_placeholders(_OPEN)}) "
                f"ORDER BY created_at DESC, {self._db.insertion_order} DESC",
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
        with self._db.write() as conn:
            rows = conn.execute(
                f"SELECT {_REQUEST_COLUMNS} FROM approvals WHERE status = ? "
                f"ORDER BY created_at ASC, {self._db.insertion_order} ASC",
                (ApprovalStatus.PENDING.value,),
            ).fetchall()
            for row in rows:
                if now >= row["expires_at"]:
                    self._expire(conn, row, now)
                else:
                    found.append(_request_from_row(row))
        return found

    def count_pending(self, *, agent: str | None, tool_id: str, now: float) -> tuple[int, int]:
        """How many unexpired requests of ``agent`` wait for a decision: (for ``tool_id``, for
        every tool). One query over the pending rows (the ``status`` index), which the
        approval stage's limits keep few."""
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT COUNT(*) AS every_tool, "
                "COALESCE(SUM(CASE WHEN tool_id = ? THEN 1 ELSE 0 END), 0) AS this_tool "
                "FROM approvals WHERE status = ? AND expires_at > ? "
                "AND COALESCE(agent, '') = COALESCE(?, '')",
                (tool_id, ApprovalStatus.PENDING.value, now, agent),
            ).fetchone()
        return int(row["this_tool"]), int(row["every_tool"])

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
        with self._db.write() as conn:
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
        with self._db.write() as conn:
            cursor = conn.execute(
                "UPDATE approvals SET status = ? WHERE id = ? AND status = ?",
                (to_status.value, request_id, from_status.value),
            )
            return bool(cursor.rowcount == 1)

    def store_outcome(self, request_id: str, outcome: Mapping[str, Any]) -> None:
        """Keep the outcome of the approved call (JSON-ready) and mark it ``completed``.

        Raises :class:`ClosedRequestError` when there is no such request.
        """
        text = canonical_json(thaw(outcome))
        with self._db.write() as conn:
            cursor = conn.execute(
                "UPDATE approvals SET status = ?, outcome = ? WHERE id = ?",
                (ApprovalStatus.COMPLETED.value, text, request_id),
            )
            if cursor.rowcount != 1:
                raise ClosedRequestError(f"no approval request {request_id!r}")

    def outcome(self, request_id: str) -> dict[str, Any] | None:
        """The stored outcome of the approved call, if it has run."""
        with self._db.read() as conn:
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
        try:
            with self._db.write() as conn:
                conn.execute(
                    f"INSERT INTO grants ({_GRANT_COLUMNS}) VALUES ({_placeholders(values)})",
                    values,
                )
        except self._db.IntegrityError as exc:
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
        with self._db.read() as conn:
            row = conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM grants "
                "WHERE tool_id = ? AND permission_type = ? AND permission_key = ? "
                "AND definition_hash = ? AND COALESCE(workspace, '') = COALESCE(?, '') "
                "AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?) "
                f"ORDER BY granted_at DESC, {self._db.insertion_order} DESC LIMIT 1",
                (tool_id, permission.type, permission.key, definition_hash, workspace, now),
            ).fetchone()
        return _grant_from_row(row) if row is not None else None

    def grants(self, *, now: float) -> list[Grant]:
        """Every live (unrevoked, unexpired) grant, newest first."""
        with self._db.read() as conn:
            rows = conn.execute(
                f"SELECT {_GRANT_COLUMNS} FROM grants "
                "WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?) "
                f"ORDER BY granted_at DESC, {self._db.insertion_order} DESC",
                (now,),
            ).fetchall()
        return [_grant_from_row(row) for row in rows]

    def revoke_grant(self, grant_id: str, *, now: float) -> bool:
        """Revoke a grant; False when there was no live grant with this id."""
        with self._db.write() as conn:
            cursor = conn.execute(
                "UPDATE grants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?)",
                (now, grant_id, now),
            )
            return bool(cursor.rowcount == 1)

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
        with self._db.write() as conn:
            self._insert_event(conn, request_id, kind, actor=actor, at=at, detail=detail)

    def events(self, request_id: str) -> list[dict[str, Any]]:
        """The log of one request, oldest first: dicts with ``id``, ``request_id``, ``kind``,
        ``actor``, ``at`` and ``detail`` (a dict, empty when none was recorded)."""
        with self._db.read() as conn:
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
        self._db.close()

    def __enter__(self) -> SqlApprovalStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
