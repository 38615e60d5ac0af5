"""The embedded SQLite implementation of :class:`~toolgate.stores.approvals.ApprovalStore`.

One connection, shared by every thread that calls the store (the event loop thread, worker
threads, the gateway's private loop thread), guarded by a lock (see
:class:`~toolgate.stores.sqlite_db.SQLiteDatabase`). Each operation runs in its own transaction;
writes take the database's write lock up front (``BEGIN IMMEDIATE``), so a second process using
the same file waits (up to the busy timeout) instead of failing half-way. The SQL itself is
:class:`~toolgate.stores.sql_approvals.SqlApprovalStore`'s, shared with PostgreSQL.

This module imports :mod:`sqlite3`; it is only imported when a store is built, never by
``import toolgate``.
"""

from __future__ import annotations

from pathlib import Path

from .sql_approvals import SqlApprovalStore
from .sqlite_db import BUSY_TIMEOUT, MEMORY
from .sqlite_schema import SCHEMA_VERSION, migrate

__all__ = ["BUSY_TIMEOUT", "SCHEMA_VERSION", "SQLiteApprovalStore"]


class SQLiteApprovalStore(SqlApprovalStore):
    """Approval requests, grants and the approval log in one SQLite database.

    ``path`` is a database file (created with its folders if missing) or ``":memory:"`` for a
    private database that lives as long as the store. Use it as a context manager, or call
    :meth:`close`. Its schema version is SQLite's ``user_version``.
    """

    def __init__(self, path: Path | str) -> None:
        from .sqlite_db import SQLiteDatabase  # it imports this module's constants

        db = SQLiteDatabase(path, component="approvals", migrate=migrate)
        super().__init__(db)
        self.path: Path | None = db.path
        """The database file, or ``None`` for an in-memory store."""

    def __repr__(self) -> str:
        return f"SQLiteApprovalStore({MEMORY if self.path is None else str(self.path)!r})"
