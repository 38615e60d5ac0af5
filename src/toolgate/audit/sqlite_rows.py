"""Audit records ↔ rows of the audit database, the compact JSON both ends use, and the insert
of a batch of rows.

Used by :mod:`toolgate.audit.sqlite_log`; this module imports :mod:`sqlite3`.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import PydanticSerializationError, to_json

from .record import AuditRecord
from .sqlite_schema import COLUMNS

__all__ = ["bulk_insert_works", "dump", "insert_rows", "record_from_row", "row_from_record"]

_WIDTH: Final = len(COLUMNS.split(","))
_INSERT: Final = f"INSERT INTO audit_records ({COLUMNS}) VALUES ({', '.join(['?'] * _WIDTH)})"
#: The whole batch in one statement: the rows as one JSON array, unpacked by SQLite itself.
_INSERT_JSON: Final = (
    f"INSERT INTO audit_records ({COLUMNS}) SELECT "
    + ", ".join(f"json_extract(value, '$[{i}]')" for i in range(_WIDTH))
    + " FROM json_each(?)"
)


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


#: For what pydantic-core refuses — a lone surrogate, mostly, which no UTF-8 text can hold:
#: escaped as ``\\udXXX``, the record is still written (and reads back the same).
_ASCII_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), default=_json_default)


def dump(value: Any) -> str:
    """Compact JSON text of ``value`` (anything that is not JSON becomes its ``str``).

    pydantic-core's encoder (compiled) first: it runs on the audit writer thread while holding
    the GIL, time taken from the event loop serving calls. The standard library's encoder
    takes what it refuses.
    """
    try:
        return to_json(value, fallback=_json_default).decode("utf-8")
    except (PydanticSerializationError, UnicodeDecodeError):
        return _ASCII_ENCODER.encode(value)


def row_from_record(record: AuditRecord) -> tuple[Any, ...]:
    return (
        record.time,
        record.call_id,
        record.tool_id,
        record.definition_hash,
        record.status,
        record.code,
        record.message,
        record.detail,
        record.duration,
        record.agent,
        record.session,
        record.workspace,
        record.approval_id,
        record.approval_decision,
        record.idempotency_key,
        None if record.args is None else dump(record.args),
        None if record.result is None else dump(record.result),
        None if record.visualization is None else dump(record.visualization),
        dump(record.metadata) if record.metadata else "{}",
    )


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def record_from_row(row: sqlite3.Row) -> AuditRecord:
    return AuditRecord(
        time=row["time"],
        call_id=row["call_id"],
        tool_id=row["tool_id"],
        definition_hash=row["definition_hash"],
        status=row["status"],
        code=row["code"],
        message=row["message"],
        detail=row["detail"],
        duration=row["duration"],
        agent=row["agent"],
        session=row["session"],
        workspace=row["workspace"],
        approval_id=row["approval_id"],
        approval_decision=row["approval_decision"],
        idempotency_key=row["idempotency_key"],
        args=_load(row["args"]),
        result=_load(row["result"]),
        visualization=_load(row["visualization"]),
        metadata=_load(row["metadata"]) or {},
    )


def bulk_insert_works(conn: sqlite3.Connection) -> bool:
    """Whether this SQLite has the JSON functions :func:`insert_rows` needs (built in since
    3.38, and in nearly every build before)."""
    try:
        row = conn.execute(
            "SELECT json_extract(value, '$[0]') FROM json_each('[[1.5]]')"
        ).fetchone()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == 1.5


def insert_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]], *, bulk: bool) -> None:
    """Insert ``rows`` (from :func:`row_from_record`), in the caller's transaction.

    With ``bulk`` (see :func:`bulk_insert_works`) the batch goes as one JSON text to one
    statement. ``executemany`` steps once per row and releases and retakes the GIL around every
    step; on a gateway whose event loop keeps the GIL busy, each retake waits for a forced switch,
    so a batch of 500 rows could take seconds and starve the loop meanwhile. One statement
    releases the GIL once for the whole batch, and the JSON is unpacked by SQLite without it.
    """
    if bulk:
        try:
            payload = to_json(rows).decode("utf-8")
        except (PydanticSerializationError, UnicodeDecodeError):
            # A text no UTF-8 can hold (a lone surrogate, echoed from an argument into an
            # error message, say): store it escaped rather than lose the batch.
            payload = to_json([_storable(row) for row in rows]).decode("utf-8")
        conn.execute(_INSERT_JSON, (payload,))
        return
    conn.executemany(_INSERT, [_storable(row) for row in rows])


def _storable(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """``row`` with every text SQLite could not store as UTF-8 escaped (``\\udXXX``)."""
    return tuple(
        value.encode("utf-8", "backslashreplace").decode("utf-8")
        if isinstance(value, str) and not value.isascii()
        else value
        for value in row
    )
