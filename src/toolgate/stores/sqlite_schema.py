"""The schema of the approval database: its migrations and how they are applied.

Used by :mod:`toolgate.stores.sqlite_approvals`; this module imports :mod:`sqlite3`.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final

from ..errors import ConfigError

__all__ = [
    "SCHEMA_VERSION",
    "NewerSchemaError",
    "ensure_private_file",
    "migrate",
    "newer_schema",
    "run_migrations",
    "write_transaction",
]

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
    (
        # The namespaces the requesting credentials allowed (JSON list; NULL: any): the run a
        # decision starts is checked against them.
        "ALTER TABLE approvals ADD COLUMN namespaces TEXT",
    ),
)

#: The schema version this code writes (SQLite's ``PRAGMA user_version``).
SCHEMA_VERSION: Final = len(_MIGRATIONS)


def ensure_private_file(path: Path) -> None:
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
    # Never open an existing database here: closing any descriptor of a file drops every POSIX
    # lock this process holds on it, so another SQLite connection in this process (the server's
    # stores share one file) would silently lose its shared lock — and the next process to close
    # the database would think it the last, checkpoint it and delete the WAL under the server,
    # which then reads a stale snapshot forever. O_EXCL opens only a file this call creates.
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes the write lock up front (``BEGIN IMMEDIATE``, so
    processes sharing the file serialize instead of failing half-way): committed when the block
    ends (also by ``return``), rolled back when it raises. ``conn`` has no implicit
    transactions (``isolation_level=None``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class NewerSchemaError(ConfigError, RuntimeError):
    """A SQLite file written by a newer toolgate: refused, never changed (a configuration
    error for the command line and ``serve``, exit 3; a ``RuntimeError`` for older callers)."""


def newer_schema(
    conn: sqlite3.Connection, what: str, version: int, latest: int
) -> NewerSchemaError:
    """The error for tables newer than this code, naming the file they are in."""
    row = conn.execute("PRAGMA database_list").fetchone()
    where = f"{row[2]}: " if row is not None and row[2] else ""
    return NewerSchemaError(
        f"{where}the {what} have schema version {version}, newer than the {latest} this "
        "toolgate understands; upgrade toolgate (a newer version wrote this file)"
    )


def run_migrations(
    conn: sqlite3.Connection, migrations: Sequence[Sequence[str]], *, database: str
) -> None:
    """Bring a database to ``len(migrations)`` (``PRAGMA user_version``), one migration per
    transaction; refuse a database newer than this code (``database`` names it in the error)."""
    latest = len(migrations)
    while True:
        with write_transaction(conn):
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > latest:
                raise newer_schema(conn, f"{database} tables", version, latest)
            if version == latest:
                return
            for statement in migrations[version]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the approval schema to :data:`SCHEMA_VERSION`."""
    run_migrations(conn, _MIGRATIONS, database="approval")
