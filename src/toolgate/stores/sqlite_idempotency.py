"""Idempotency records in a SQLite file: the SQL store on the embedded database, with its table."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from .sql_idempotency import SqlIdempotencyStore
from .sqlite_db import SQLiteDatabase

__all__ = ["SQLiteIdempotencyStore"]

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


class SQLiteIdempotencyStore(SqlIdempotencyStore):
    """Idempotency records in a SQLite database (a file, or ``":memory:"``).

    The file may be the gateway's state file: the tables do not collide with other stores'.
    Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: Path | str) -> None:
        db = SQLiteDatabase(path, component="idempotency", migrations=_MIGRATIONS)
        super().__init__(db)
        self.path: Path | None = db.path
        """The database file (``None`` when in memory)."""

    def __repr__(self) -> str:
        return f"SQLiteIdempotencyStore({self.path or ':memory:'!s})"
