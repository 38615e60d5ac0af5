"""Audit records ↔ rows of the audit database, and the compact JSON both ends use.

Used by :mod:`toolgate.audit.sqlite_log`; this module imports :mod:`sqlite3` (for types only).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from pydantic_core import PydanticSerializationError, to_json

from .record import AuditRecord

__all__ = ["dump", "record_from_row", "row_from_record"]


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default)


def dump(value: Any) -> str:
    """Compact JSON text of ``value`` (anything that is not JSON becomes its ``str``).

    pydantic-core's encoder (compiled) first: it runs on the audit writer thread while holding
    the GIL, time taken from the event loop serving calls. The standard library's encoder
    takes what it refuses (lone surrogates, mostly).
    """
    try:
        return to_json(value, fallback=_json_default).decode("utf-8")
    except (PydanticSerializationError, UnicodeDecodeError):
        return _ENCODER.encode(value)


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
