"""The SQL :class:`~toolgate.stores.idempotency.IdempotencyStore`, on SQLite or PostgreSQL.

Records persist in the ``idempotency_keys`` table, so a key keeps replaying its outcome after a
restart, and a ``running`` record — committed by the claim before the tool runs — tells a retry
after a crash that a call started and never finished. Processes sharing the database file
coordinate through it: a ``running`` record tells a second process — or replica, on PostgreSQL —
that the key is taken (it polls until the record has an outcome). Of two racing claims exactly
one wins.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, Self

from .._json import canonical_json
from .idempotency import IdempotencyRecord, IdempotencyStatus
from .sql import SqlDatabase

__all__ = ["SqlIdempotencyStore"]

#: Claims between two deletions of expired records.
_SWEEP_EVERY: Final = 256

_COLUMNS: Final = "tool_id, key, arguments_digest, call_id, status, outcome, created_at, expires_at"

# Takes the key unless a live record holds it; returns a row only when it took it.
_CLAIM: Final = f"""
    INSERT INTO idempotency_keys ({_COLUMNS})
    VALUES (:tool_id, :key, :arguments_digest, :call_id, :status, :outcome, :created_at,
            :expires_at)
    ON CONFLICT (tool_id, key) DO UPDATE SET
        arguments_digest = excluded.arguments_digest,
        call_id = excluded.call_id,
        status = excluded.status,
        outcome = excluded.outcome,
        created_at = excluded.created_at,
        expires_at = excluded.expires_at
    WHERE idempotency_keys.expires_at <= :now
    RETURNING call_id
"""


def _record_from_row(row: Any) -> IdempotencyRecord:
    outcome = row["outcome"]
    return IdempotencyRecord(
        tool_id=row["tool_id"],
        key=row["key"],
        arguments_digest=row["arguments_digest"],
        call_id=row["call_id"],
        status=IdempotencyStatus(row["status"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        outcome=None if outcome is None else json.loads(outcome),
    )


class SqlIdempotencyStore:
    """Idempotency records in the ``idempotency_keys`` table of a SQL database (SQLite or
    PostgreSQL; see :class:`~toolgate.stores.sql.SqlDatabase`).

    A claim is one ``INSERT … ON CONFLICT DO UPDATE … WHERE expired … RETURNING``: it takes a
    free or expired key atomically, so of two callers — threads, processes or replicas — racing
    on one key exactly one gets it, and the other is shown the winner's record.
    """

    def __init__(self, db: SqlDatabase) -> None:
        self._db = db
        self._claims = 0
        # PostgreSQL's: a claim shows the server accepts writes (it stands in for the audit
        # reservation's round trip).
        self._wrote: Callable[[], None] | None = getattr(db, "wrote", None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._db!r})"

    def claim(self, record: IdempotencyRecord, *, now: float) -> IdempotencyRecord | None:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.claim`."""
        values = {
            "tool_id": record.tool_id,
            "key": record.key,
            "arguments_digest": record.arguments_digest,
            "call_id": record.call_id,
            "status": record.status.value,
            "outcome": None if record.outcome is None else canonical_json(record.outcome),
            "created_at": record.created_at,
            "expires_at": record.expires_at,
            "now": now,
        }
        # Each statement is atomic on its own (the claim is one upsert): no transaction, one
        # round trip on a server. A holder that lets go between the claim and the read of its
        # record (released, expired) is retried.
        for _ in range(3):
            with self._db.autocommit() as conn:
                taken = conn.execute(_CLAIM, values).fetchone()
                if taken is None:
                    row = conn.execute(
                        f"SELECT {_COLUMNS} FROM idempotency_keys WHERE tool_id = ? AND key = ?",
                        (record.tool_id, record.key),
                    ).fetchone()
                    if row is not None and row["expires_at"] > now:
                        return _record_from_row(row)
                    continue
                if self._wrote is not None:
                    self._wrote()
                self._claims += 1
                if self._claims % _SWEEP_EVERY == 0:
                    conn.execute("DELETE FROM idempotency_keys WHERE expires_at <= ?", (now,))
                return None
        raise RuntimeError(f"idempotency key {record.key!r} of {record.tool_id} keeps changing")

    def complete(
        self,
        tool_id: str,
        key: str,
        *,
        call_id: str,
        outcome: Mapping[str, Any],
        expires_at: float,
        if_running: bool = False,
    ) -> bool:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.complete`."""
        text = canonical_json(outcome)
        # One conditional statement: of an owner storing its outcome and another call settling
        # on its behalf, whichever comes second sees the row as the first left it.
        running = " AND status = 'running'" if if_running else ""
        with self._db.autocommit() as conn:
            cursor = conn.execute(
                "UPDATE idempotency_keys SET status = ?, outcome = ?, expires_at = ? "
                f"WHERE tool_id = ? AND key = ? AND call_id = ?{running}",
                (IdempotencyStatus.DONE.value, text, expires_at, tool_id, key, call_id),
            )
            return bool(cursor.rowcount == 1)

    def release(self, tool_id: str, key: str, *, call_id: str, if_running: bool = False) -> bool:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.release`."""
        running = " AND status = 'running'" if if_running else ""
        with self._db.autocommit() as conn:
            cursor = conn.execute(
                "DELETE FROM idempotency_keys "
                f"WHERE tool_id = ? AND key = ? AND call_id = ?{running}",
                (tool_id, key, call_id),
            )
            return bool(cursor.rowcount == 1)

    def get(self, tool_id: str, key: str, *, now: float) -> IdempotencyRecord | None:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.get`."""
        with self._db.read() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM idempotency_keys "
                "WHERE tool_id = ? AND key = ? AND expires_at > ?",
                (tool_id, key, now),
            ).fetchone()
        return None if row is None else _record_from_row(row)

    def close(self) -> None:
        """Release the database (idempotent)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
