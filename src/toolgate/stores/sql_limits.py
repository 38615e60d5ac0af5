"""A SQL rate-limit storage for the ``limits`` library (fixed windows), on SQLite or PostgreSQL.

Counters persist in the embedded database, so a daily limit survives a restart, and several
processes sharing the file share the counters. An increment is one ``INSERT … ON CONFLICT DO
UPDATE … RETURNING`` inside a ``BEGIN IMMEDIATE`` transaction: it starts a new window when the
old one has expired and returns the new count atomically, so concurrent callers — threads,
event loops or processes — each see a distinct count and never more than the limit succeed.

Requires SQLite 3.35 or later (``RETURNING``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Final, Self

from limits.storage import Storage

from ..errors import StateUnavailableError
from .sql import SqlDatabase

__all__ = ["SqlRateLimitStorage"]

#: Counter updates between two deletions of expired counters.
_SWEEP_EVERY: Final = 1024

_INCR: Final = """
    INSERT INTO rate_limit_counters AS c (key, count, expires_at) VALUES (:key, :amount, :until)
    ON CONFLICT(key) DO UPDATE SET
        count = CASE WHEN c.expires_at <= :now THEN excluded.count
                     ELSE c.count + excluded.count END,
        expires_at = CASE WHEN c.expires_at <= :now THEN excluded.expires_at
                          ELSE c.expires_at END
    RETURNING count
"""


class SqlRateLimitStorage(Storage):
    """Fixed-window counters in the ``rate_limit_counters`` table of a SQL database (SQLite, or
    the PostgreSQL database replicas share; see :class:`~toolgate.stores.sql.SqlDatabase`).

    Use it as a context manager, or call :meth:`close`.
    """

    STORAGE_SCHEME = None  # built by toolgate, not through limits' URI registry

    def __init__(self, db: SqlDatabase, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(None)
        self.clock = clock
        """Unix seconds; the rate-limit stage reads reset times against the same clock."""
        self._db = db
        self._updates = 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._db!r})"

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return (sqlite3.Error, StateUnavailableError)

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Add ``amount`` to the counter (starting a window of ``expiry`` seconds when the
        counter is new or expired) and return the new count, atomically."""
        now = self.clock()
        with self._db.autocommit() as conn:  # one atomic upsert
            row = conn.execute(
                _INCR, {"key": key, "amount": amount, "until": now + expiry, "now": now}
            ).fetchone()
            self._updates += 1
            if self._updates % _SWEEP_EVERY == 0:
                conn.execute("DELETE FROM rate_limit_counters WHERE expires_at <= ?", (now,))
        return int(row["count"])

    def _row(self, key: str) -> tuple[int, float] | None:
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT count, expires_at FROM rate_limit_counters WHERE key = ?", (key,)
            ).fetchone()
        return None if row is None else (int(row["count"]), float(row["expires_at"]))

    def get(self, key: str) -> int:
        """The count of the current window (0 when none is open)."""
        now = self.clock()
        row = self._row(key)
        return row[0] if row is not None and row[1] > now else 0

    def get_expiry(self, key: str) -> float:
        """When the current window ends (Unix seconds; now when none is open)."""
        now = self.clock()
        row = self._row(key)
        return row[1] if row is not None and row[1] > now else now

    def check(self) -> bool:
        """Whether the database answers."""
        return self._db.check()

    def reset(self) -> int | None:
        """Forget every counter; returns how many there were."""
        with self._db.write() as conn:
            return int(conn.execute("DELETE FROM rate_limit_counters").rowcount)

    def clear(self, key: str) -> None:
        """Forget one counter."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM rate_limit_counters WHERE key = ?", (key,))

    def close(self) -> None:
        """Release the database (idempotent)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
