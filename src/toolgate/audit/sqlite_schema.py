"""The schema of the audit database: its migrations, its columns, and its private file.

Used by :mod:`toolgate.audit.sqlite_log`; this module imports :mod:`sqlite3`.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import suppress
from pathlib import Path
from typing import Final

__all__ = ["COLUMNS", "SCHEMA_VERSION", "ensure_private_file", "migrate"]

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE IF NOT EXISTS audit_records (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            time REAL NOT NULL,
            call_id TEXT NOT NULL,
            tool_id TEXT NOT NULL,
            definition_hash TEXT,
            status TEXT NOT NULL,
            code TEXT,
            message TEXT,
            detail TEXT,
            duration REAL NOT NULL,
            agent TEXT,
            session TEXT,
            workspace TEXT,
            approval_id TEXT,
            approval_decision TEXT,
            idempotency_key TEXT,
            args TEXT,
            result TEXT,
            visualization TEXT,
            metadata TEXT NOT NULL
        )
        """,
        "CREATE INDEX IF NOT EXISTS audit_time ON audit_records (time)",
        "CREATE INDEX IF NOT EXISTS audit_tool ON audit_records (tool_id, time)",
        "CREATE INDEX IF NOT EXISTS audit_agent ON audit_records (agent, time)",
        "CREATE INDEX IF NOT EXISTS audit_status ON audit_records (status, time)",
    ),
)

#: The schema version this code writes (SQLite's ``PRAGMA user_version``).
SCHEMA_VERSION: Final = len(_MIGRATIONS)

COLUMNS: Final = (
    "time, call_id, tool_id, definition_hash, status, code, message, detail, duration, agent, "
    "session, workspace, approval_id, approval_decision, idempotency_key, args, result, "
    "visualization, metadata"
)


def ensure_private_file(path: Path) -> None:
    """Create missing parent folders (0700) and the file (0600); existing ones keep their mode."""
    missing: list[Path] = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for folder in reversed(missing):
        with suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema to :data:`SCHEMA_VERSION`, one migration per transaction."""
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"the audit database has schema version {version}, newer than the "
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
