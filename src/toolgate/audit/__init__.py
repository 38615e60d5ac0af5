"""The audit log: one redacted record per finished call, kept in SQLite (and optionally JSON lines).

This package stays light to import: :mod:`sqlite3` is only imported by
:mod:`toolgate.audit.sqlite_log`, loaded on first use of :class:`SQLiteAuditLog` /
:class:`ToolStats`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..redaction import MARKER, redact, redact_text, redact_values
from .record import AuditRecord, record_from

if TYPE_CHECKING:
    from ..stores.sql import SqlDatabase
    from .log_base import AuditLog
    from .sqlite_log import NOT_TOOL_FAILURES, SQLiteAuditLog, ToolStats

__all__ = [
    "MARKER",
    "NOT_TOOL_FAILURES",
    "AuditRecord",
    "SQLiteAuditLog",
    "ToolStats",
    "open_audit_log",
    "record_from",
    "redact",
    "redact_text",
    "redact_values",
]

_LAZY = frozenset({"NOT_TOOL_FAILURES", "SQLiteAuditLog", "ToolStats"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import sqlite_log

        return getattr(sqlite_log, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_audit_log(
    path: Path,
    *,
    database: SqlDatabase | None = None,
    jsonl_path: Path | None = None,
    retention_days: float | None = 30,
) -> AuditLog:
    """The audit log of a gateway: in the shared PostgreSQL ``database`` when one is given
    (durable, shared by the replicas), else in the SQLite file ``path``."""
    # A PostgresDatabase exists only once its module is imported: looked up there, so that a
    # gateway without one never imports psycopg (an optional extra).
    postgres = sys.modules.get("toolgate.stores.postgres_db")
    if postgres is not None and isinstance(database, postgres.PostgresDatabase):
        from .postgres_log import PostgresAuditLog

        return PostgresAuditLog(database, jsonl_path=jsonl_path, retention_days=retention_days)
    from .sqlite_log import SQLiteAuditLog

    return SQLiteAuditLog(path, jsonl_path=jsonl_path, retention_days=retention_days)
