"""A small SQLite database wrapper shared by the rate-limit and idempotency stores.

It follows the conventions of :mod:`toolgate.stores.sqlite_approvals`: one connection shared by
every
thread (guarded by a lock), WAL mode for files, a private file (0600, folders 0700), explicit
transactions whose writes take the write lock up front (``BEGIN IMMEDIATE``) so several
processes sharing the file serialize instead of failing half-way.

Each *component* (``rate_limits``, ``idempotency``) versions its own tables in the
``toolgate_components`` table instead of ``PRAGMA user_version``, which the approval store owns:
so all of them can live in the same database file.

This module imports :mod:`sqlite3`; it is only imported when a store is built.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Final

from .sqlite_schema import ensure_private_file, newer_schema, write_transaction

__all__ = ["SQLiteDatabase"]

#: Seconds a statement waits for another connection's write lock before failing.
BUSY_TIMEOUT: Final = 5.0

#: The path that opens a private, in-memory database.
MEMORY: Final = ":memory:"

_COMPONENTS_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS toolgate_components (
        name TEXT PRIMARY KEY,
        version INTEGER NOT NULL
    )
"""


class SQLiteDatabase:
    """One connection to ``path`` (or ``":memory:"``) with the tables of ``component``.

    ``migrations[i]`` moves the component from version ``i`` to ``i + 1``; append new ones,
    never edit an old one. A component versioned otherwise passes its own ``migrate``.
    """

    #: The driver's exception for a violated unique constraint.
    IntegrityError: type[Exception] = sqlite3.IntegrityError

    #: SQLite's own insertion order.
    insertion_order = "rowid"

    def __init__(
        self,
        path: Path | str,
        *,
        component: str,
        migrations: Sequence[Sequence[str]] = (),
        migrate: Callable[[sqlite3.Connection], None] | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self.component = component
        self.path: Path | None = None if str(path) == MEMORY else Path(path).expanduser()
        """The database file, or ``None`` for an in-memory database."""
        if self.path is not None:
            ensure_private_file(self.path)
        conn = sqlite3.connect(
            MEMORY if self.path is None else str(self.path),
            timeout=BUSY_TIMEOUT,
            isolation_level=None,  # transactions are explicit
            check_same_thread=False,  # shared by threads, guarded by self._lock
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            if self.path is not None:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            if migrate is not None:
                migrate(conn)
            else:
                self._migrate(conn, component, migrations)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn

    def __repr__(self) -> str:
        where = MEMORY if self.path is None else str(self.path)
        return f"SQLiteDatabase({where!r}, component={self.component!r})"

    @staticmethod
    def _migrate(
        conn: sqlite3.Connection, component: str, migrations: Sequence[Sequence[str]]
    ) -> None:
        """Bring the component's tables to the newest version, one migration per transaction."""
        target = len(migrations)
        while True:
            with write_transaction(conn):
                conn.execute(_COMPONENTS_TABLE)
                row = conn.execute(
                    "SELECT version FROM toolgate_components WHERE name = ?", (component,)
                ).fetchone()
                version = 0 if row is None else int(row[0])
                if version > target:
                    raise newer_schema(conn, f"{component} tables", version, target)
                if version == target:
                    return
                for statement in migrations[version]:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO toolgate_components (name, version) VALUES (?, ?) "
                    "ON CONFLICT(name) DO UPDATE SET version = excluded.version",
                    (component, version + 1),
                )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"the {self.component} store is closed")
        return self._conn

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection, for read-only statements."""
        with self._lock:
            yield self._connection()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """The connection inside a write transaction: committed on success, else rolled back."""
        with self._lock, write_transaction(self._connection()) as conn:
            yield conn

    def autocommit(self) -> AbstractContextManager[sqlite3.Connection]:
        """:meth:`write`: SQLite has no round trips to save."""
        return self.write()

    def check(self) -> bool:
        """Whether the database answers (``False`` once closed or broken)."""
        try:
            with self.read() as conn:
                conn.execute("SELECT 1").fetchone()
        except (sqlite3.Error, RuntimeError):
            return False
        return True

    def close(self) -> None:
        """Release the connection (idempotent). Later operations raise :class:`RuntimeError`."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
