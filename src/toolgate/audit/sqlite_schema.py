"""The schema of the audit database: its migrations, its columns, and its private file.

Used by :mod:`toolgate.audit.sqlite_log`; this module imports :mod:`sqlite3`.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Final

from ..stores.sqlite_schema import ensure_private_file, run_migrations
from .rollup import backfill_statements, bucket_of, create_statements

__all__ = ["COLUMNS", "SCHEMA_VERSION", "ensure_private_file", "migrate"]

_log = logging.getLogger(__name__)

#: The SQL name of :func:`~toolgate.audit.rollup.bucket_of` on an audit connection.
_BUCKET: Final = "toolgate_duration_bucket"

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
    # 2: the health figures' summary tables (toolgate.audit.rollup), filled from the records.
    (
        *create_statements(integer="INTEGER", real="REAL", without_rowid=True),
        *backfill_statements(
            # floor(), which SQLite may lack: CAST truncates toward zero, one too high below 0.
            floor_div="(CAST({x} / {y} AS INTEGER) - ({x} / {y} < CAST({x} / {y} AS INTEGER)))",
            bucket=f"{_BUCKET}(duration)",
        ),
    ),
)

#: The schema version this code writes (SQLite's ``PRAGMA user_version``).
SCHEMA_VERSION: Final = len(_MIGRATIONS)

COLUMNS: Final = (
    "time, call_id, tool_id, definition_hash, status, code, message, detail, duration, agent, "
    "session, workspace, approval_id, approval_decision, idempotency_key, args, result, "
    "visualization, metadata"
)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the audit schema to :data:`SCHEMA_VERSION`."""
    conn.create_function(_BUCKET, 1, bucket_of, deterministic=True)
    if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 1:
        # Filling the summary reads every record once: say why the start waits.
        row = conn.execute("SELECT MAX(id) FROM audit_records").fetchone()
        if row[0]:
            _log.warning(
                "the audit database was written by an older toolgate: filling the health "
                "figures' summary from its %s records, once (about 8 s per million)",
                f"{row[0]:,}",
            )
    run_migrations(conn, _MIGRATIONS, database="audit")
