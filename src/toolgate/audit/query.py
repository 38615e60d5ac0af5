"""Reading the audit database: the filters of a query (one SQL for SQLite and PostgreSQL),
used by :class:`~toolgate.audit.log_base.AuditLog`. The health statistics are read from the
summary tables of :mod:`toolgate.audit.rollup`."""

from __future__ import annotations

from typing import Any

__all__ = ["where"]


def where(
    *,
    tool_id: str | None = None,
    agent: str | None = None,
    status: str | None = None,
    code: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for column, value in (("tool_id", tool_id), ("agent", agent), ("status", status)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if code is not None:
        clauses.append("code = ?")
        params.append(code)
    if since is not None:
        clauses.append("time >= ?")
        params.append(since)
    if until is not None:
        clauses.append("time < ?")
        params.append(until)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params
