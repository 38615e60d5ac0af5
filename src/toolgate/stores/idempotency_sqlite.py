"""The SQLite :class:`~toolgate.stores.idempotency.IdempotencyStore`.

Records persist in the ``idempotency_keys`` table, so a key keeps replaying its outcome after a
restart, and processes sharing the database file coordinate through it: a ``running`` record
tells a second process that the key is taken (it polls until the record has an outcome). Each
operation is one ``BEGIN IMMEDIATE`` transaction, so of two racing claims exactly one wins.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from .._json import canonical_json
from .idempotency import IdempotencyRecord, IdempotencyStatus
from .sqlite_db import SQLiteDatabase

__all__ = ["SQLiteIdempotencyStore"]

#: Claims between two deletions of expired records.
_SWEEP_EVERY: Final = 256

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE IF NOT EXISTS idempotency_keys (
            tool_id TEXT NOT NULL,
            key TEXT NOT NULL,
            arguments_digest TEXT NOT NULL,
            call_id TEXT NOT NULL,
            status TEXT NOT NULL,
            outcome TEXT,
            created_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (tool_id, key)
        )
        """,
        "CREATE INDEX IF NOT EXISTS idempotency_keys_expiry ON idempotency_keys (expires_at)",
    ),
)

_COLUMNS: Final = "tool_id, key, arguments_digest, call_id, status, outcome, created_at, expires_at"


def _record_from_row(row: sqlite3.Row) -> IdempotencyRecord:
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


class SQLiteIdempotencyStore:
    """Idempotency records in a SQLite database (a file, or ``":memory:"``).

    The file may be the gateway's state file: the tables do not collide with other stores'.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: Path | str) -> None:
        self._db = SQLiteDatabase(path, component="idempotency", migrations=_MIGRATIONS)
        self._claims = 0

    def __repr__(self) -> str:
        return f"SQLiteIdempotencyStore({self._db.path or ':memory:'!s})"

    @property
    def path(self) -> Path | None:
        """The database file (``None`` when in memory)."""
        return self._db.path

    def claim(self, record: IdempotencyRecord, *, now: float) -> IdempotencyRecord | None:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.claim`."""
        with self._db.write() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM idempotency_keys WHERE tool_id = ? AND key = ?",
                (record.tool_id, record.key),
            ).fetchone()
            if row is not None and row["expires_at"] > now:
                return _record_from_row(row)
            conn.execute(
                f"INSERT OR REPLACE INTO idempotency_keys ({_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.tool_id,
                    record.key,
                    record.arguments_digest,
                    record.call_id,
                    record.status.value,
                    None if record.outcome is None else canonical_json(record.outcome),
                    record.created_at,
                    record.expires_at,
                ),
            )
            self._claims += 1
            if self._claims % _SWEEP_EVERY == 0:
                conn.execute("DELETE FROM idempotency_keys WHERE expires_at <= ?", (now,))
        return None

    def complete(
        self,
        tool_id: str,
        key: str,
        *,
        call_id: str,
        outcome: Mapping[str, Any],
        expires_at: float,
    ) -> bool:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.complete`."""
        text = canonical_json(outcome)
        with self._db.write() as conn:
            cursor = conn.execute(
                "UPDATE idempotency_keys SET status = ?, outcome = ?, expires_at = ? "
                "WHERE tool_id = ? AND key = ? AND call_id = ?",
                (IdempotencyStatus.DONE.value, text, expires_at, tool_id, key, call_id),
            )
            return cursor.rowcount == 1

    def release(self, tool_id: str, key: str, *, call_id: str) -> bool:
        """See :meth:`~toolgate.stores.idempotency.IdempotencyStore.release`."""
        with self._db.write() as conn:
            cursor = conn.execute(
                "DELETE FROM idempotency_keys WHERE tool_id = ? AND key = ? AND call_id = ?",
                (tool_id, key, call_id),
            )
            return cursor.rowcount == 1

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

    def __enter__(self) -> SQLiteIdempotencyStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
