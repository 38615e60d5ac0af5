"""The audit log: one redacted record per finished call, kept in SQLite (and optionally JSON lines).

This package stays light to import: :mod:`sqlite3` is only imported by
:mod:`toolgate.audit.sqlite_log`, loaded on first use of :class:`SQLiteAuditLog` /
:class:`ToolStats`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..redaction import MARKER, redact, redact_text, redact_values
from .record import AuditRecord, record_from

if TYPE_CHECKING:
    from .sqlite_log import NOT_TOOL_FAILURES, SQLiteAuditLog, ToolStats

__all__ = [
    "MARKER",
    "NOT_TOOL_FAILURES",
    "AuditRecord",
    "SQLiteAuditLog",
    "ToolStats",
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
