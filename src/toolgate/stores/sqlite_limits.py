"""Rate-limit counters in a SQLite file: the SQL storage on the embedded database and its table."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from .sql_limits import SqlRateLimitStorage
from .sqlite_db import SQLiteDatabase

__all__ = ["SQLiteRateLimitStorage"]

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE IF NOT EXISTS rate_limit_counters (
            key TEXT PRIMARY KEY,
            count INTEGER NOT NULL,
            expires_at REAL NOT NULL
        ) WITHOUT ROWID
        """,
        "CREATE INDEX IF NOT EXISTS rate_limit_counters_expiry ON rate_limit_counters (expires_at)",
    ),
)


class SQLiteRateLimitStorage(SqlRateLimitStorage):
    """Fixed-window counters in a SQLite database.

    ``path`` is a database file (created with its folders, mode 0600, if missing; it may be the
    gateway's state file) or ``":memory:"``.
    """

    def __init__(self, path: Path | str, *, clock: Callable[[], float] = time.time) -> None:
        db = SQLiteDatabase(path, component="rate_limits", migrations=_MIGRATIONS)
        super().__init__(db, clock=clock)
        self.path: Path | None = db.path
        """The database file (``None`` when in memory)."""

    def __repr__(self) -> str:
        return f"SQLiteRateLimitStorage({self.path or ':memory:'!s})"
