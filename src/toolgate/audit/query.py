"""Reading the audit database: the filters of a query and the health statistics of tools.

One SQL for SQLite and PostgreSQL (subqueries named, integer arithmetic on counts), used by
:class:`~toolgate.audit.log_base.AuditLog`.
"""

from __future__ import annotations

from typing import Any, Final

from ..model.stats import NOT_TOOL_FAILURES, ToolStats

__all__ = ["build_stats", "fetch_stats", "where"]

_EXCLUDED = ", ".join(f"'{code}'" for code in sorted(NOT_TOOL_FAILURES))
#: SQL: the row is a tool failure (see :data:`NOT_TOOL_FAILURES`).
_FAILURE: Final = f"(status = 'error' AND (code IS NULL OR code NOT IN ({_EXCLUDED})))"
#: SQL: the tool ran to an end that says something about its latency.
_RAN: Final = f"(status = 'ok' OR {_FAILURE})"


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


#: What :func:`fetch_stats` returns: the counts, the percentile ranks and the last errors.
StatsRows = tuple[list[Any], list[Any], list[Any]]


def fetch_stats(conn: Any, since: float, tool_id: str | None) -> StatsRows:
    """The rows :func:`build_stats` needs, for one tool or (``tool_id=None``) every tool."""
    scope = "time >= ?" + ("" if tool_id is None else " AND tool_id = ?")
    params: tuple[Any, ...] = (since,) if tool_id is None else (since, tool_id)
    counts = conn.execute(
        "SELECT tool_id, "
        "SUM(CASE WHEN status != 'pending_approval' THEN 1 ELSE 0 END) AS total, "
        f"SUM(CASE WHEN {_FAILURE} THEN 1 ELSE 0 END) AS failures "
        f"FROM audit_records WHERE {scope} GROUP BY tool_id",
        params,
    ).fetchall()
    ranks = conn.execute(
        "SELECT tool_id, rn, n, duration FROM ("
        "SELECT tool_id, duration, "
        "ROW_NUMBER() OVER (PARTITION BY tool_id ORDER BY duration) AS rn, "
        "COUNT(*) OVER (PARTITION BY tool_id) AS n "
        f"FROM audit_records WHERE {scope} AND {_RAN}"
        ") AS ranked WHERE rn = (n * 50 + 99) / 100 OR rn = (n * 95 + 99) / 100",
        params,
    ).fetchall()
    errors = conn.execute(
        "SELECT tool_id, code, message, time FROM ("
        "SELECT tool_id, code, message, time, ROW_NUMBER() OVER "
        "(PARTITION BY tool_id ORDER BY time DESC, id DESC) AS rn "
        f"FROM audit_records WHERE {scope} AND {_FAILURE}"
        ") AS latest WHERE rn = 1",
        params,
    ).fetchall()
    return counts, ranks, errors


def build_stats(rows: StatsRows) -> dict[str, ToolStats]:
    """The health figures by tool id, from the rows of :func:`fetch_stats`."""
    counts, ranks, errors = rows
    p50: dict[str, float] = {}
    p95: dict[str, float] = {}
    for row in ranks:
        n, rn = int(row["n"]), int(row["rn"])
        if rn == (n * 50 + 99) // 100:
            p50[row["tool_id"]] = float(row["duration"])
        if rn == (n * 95 + 99) // 100:
            p95[row["tool_id"]] = float(row["duration"])
    last = {row["tool_id"]: row for row in errors}
    out: dict[str, ToolStats] = {}
    for row in counts:
        tid = row["tool_id"]
        err = last.get(tid)
        out[tid] = ToolStats(
            total=int(row["total"] or 0),
            failures=int(row["failures"] or 0),
            p50=p50.get(tid),
            p95=p95.get(tid),
            last_error=None if err is None else f"[{err['code']}] {err['message'] or ''}".strip(),
            last_error_at=None if err is None else float(err["time"]),
            last_error_code=None if err is None else err["code"],
        )
    return out
