"""Health figures kept as records are written, so reading them costs the same at a thousand
records as at ten million.

The audit writer adds every batch to two summary tables, in the same transaction as its records:

* ``audit_minutes`` — per tool and minute: finished calls, tool failures, and the newest
  failure (time, code, message — already redacted, as in its record);
* ``audit_durations`` — per tool, span (an hour, and a day) and duration bucket: how many calls
  that ran took that long. Buckets grow by a factor of 2^(1/16) (4.4 %), and a bucket is read
  back as its geometric middle, so a percentile is within 2.2 % of the exact nearest-rank value.

Reading the figures of a window then costs its minutes, and for durations its whole days plus
the hours at both ends, never its records. The counts and the last error are exact for any
``since`` (the part of the first minute after ``since`` is read from the records themselves:
one minute of them); percentiles cover the whole hours the window touches.

One SQL for SQLite and PostgreSQL, as in :mod:`toolgate.audit.query`. This module imports
nothing from either driver.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ..model.stats import NOT_TOOL_FAILURES, ToolStats
from .record import AuditRecord

__all__ = [
    "BUCKETS_PER_DOUBLING",
    "INFINITE_BUCKET",
    "PERCENTILE_ERROR",
    "ZERO_BUCKET",
    "Rollup",
    "bucket_of",
    "bucket_value",
    "fetch_stats",
    "prune_cutoff",
    "rollup_of",
    "storable",
]

MINUTE: Final = 60
HOUR: Final = 3600
DAY: Final = 86_400
#: The spans durations are summed over: hours for the ends of a window, days for its middle.
SPANS: Final = (HOUR, DAY)

#: Duration buckets per doubling: 16 makes each bucket 4.4 % wide.
BUCKETS_PER_DOUBLING: Final = 16
#: How far a percentile read back may be from the exact one, relatively: half a bucket.
PERCENTILE_ERROR: Final = 2 ** (1 / (2 * BUCKETS_PER_DOUBLING)) - 1
#: The bucket of an infinite duration (no call has one; above every finite duration's).
INFINITE_BUCKET: Final = 1024 * BUCKETS_PER_DOUBLING
#: The bucket of a zero (or negative) duration, read back as exactly 0.
ZERO_BUCKET: Final = -(10**6)

_EXCLUDED = ", ".join(f"'{code}'" for code in sorted(NOT_TOOL_FAILURES))
#: SQL: the record is a tool failure (see :data:`~toolgate.model.stats.NOT_TOOL_FAILURES`).
FAILURE_SQL: Final = f"(status = 'error' AND (code IS NULL OR code NOT IN ({_EXCLUDED})))"


def bucket_of(duration: float) -> int:
    """The duration bucket of ``duration`` (seconds)."""
    if not duration > 0:
        return ZERO_BUCKET
    if math.isinf(duration):
        return INFINITE_BUCKET  # no call takes that long; log2 would not be finite
    return math.floor(math.log2(duration) * BUCKETS_PER_DOUBLING)


def bucket_value(bucket: int) -> float:
    """The duration a bucket stands for: its geometric middle (0 for :data:`ZERO_BUCKET`,
    infinity for :data:`INFINITE_BUCKET`)."""
    if bucket == ZERO_BUCKET:
        return 0.0
    if bucket >= INFINITE_BUCKET:
        return math.inf
    return float(2 ** ((bucket + 0.5) / BUCKETS_PER_DOUBLING))


def prune_cutoff(cutoff: float) -> float:
    """``cutoff`` rounded down to its minute: pruning whole minutes keeps the minute rows
    exact for the records left."""
    return math.floor(cutoff / MINUTE) * MINUTE


def storable(text: str | None) -> str | None:
    """``text`` as both stores can hold it: lone surrogates (which no UTF-8 text holds) and NUL
    characters (which PostgreSQL text refuses) escaped, as the records' own text is. A summary
    row that cannot be bound would cost the whole batch of records with it."""
    if text is None or (text.isascii() and "\x00" not in text):
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def _is_failure(status: str, code: str | None) -> bool:
    """The record is a tool failure (see :data:`~toolgate.model.stats.NOT_TOOL_FAILURES`)."""
    return status == "error" and (code is None or code not in NOT_TOOL_FAILURES)


@dataclass
class _Minute:
    total: int = 0
    failures: int = 0
    error: tuple[float, str | None, str | None] | None = None


@dataclass
class Rollup:
    """What one batch of records adds to the summary tables (keys sorted, so that two writers
    of one shared database take their row locks in the same order)."""

    minutes: list[tuple[Any, ...]] = field(default_factory=list)
    """Rows of ``audit_minutes``: tool, minute, total, failures, error time, code, message."""
    durations: list[tuple[Any, ...]] = field(default_factory=list)
    """Rows of ``audit_durations``: tool, span, start (in spans), bucket, count."""


def rollup_of(records: Iterable[AuditRecord]) -> Rollup:
    """Sum ``records`` (in the order they are written) by tool and minute, and by tool, hour
    and duration bucket."""
    minutes: dict[tuple[str, int], _Minute] = {}
    durations: dict[tuple[str, int, int, int], int] = {}
    for record in records:
        if record.status == "pending_approval":
            continue  # not finished: counted when its decision's record comes
        tool_id = storable(record.tool_id) or ""
        key = (tool_id, int(record.time // MINUTE))
        minute = minutes.get(key)
        if minute is None:
            minute = minutes[key] = _Minute()
        minute.total += 1
        failed = _is_failure(record.status, record.code)
        if failed:
            minute.failures += 1
            if minute.error is None or record.time >= minute.error[0]:
                minute.error = (record.time, storable(record.code), storable(record.message))
        if record.status == "ok" or failed:
            bucket = bucket_of(record.duration)
            for span in SPANS:
                where = (tool_id, span, int(record.time // span), bucket)
                durations[where] = durations.get(where, 0) + 1
    return Rollup(
        minutes=[
            (tool, at, m.total, m.failures, *(m.error or (None, None, None)))
            for (tool, at), m in sorted(minutes.items())
        ],
        durations=[(*key, n) for key, n in sorted(durations.items())],
    )


# -- the tables -------------------------------------------------------------------------------


def create_statements(*, integer: str, real: str, without_rowid: bool) -> tuple[str, ...]:
    """The two tables and their time indexes, with the store's names for 64-bit integers and
    floating-point numbers (and, in SQLite, stored in the order of their keys: a window is then
    one contiguous range of the table, read without a lookup per row).

    SQLite's audit schema 2 is built from this and :func:`backfill_statements`: a change here
    needs a migration of its own (PostgreSQL's 0006 has its SQL written out)."""
    clustered = " WITHOUT ROWID" if without_rowid else ""
    return (
        f"""
        CREATE TABLE IF NOT EXISTS audit_minutes (
            tool_id TEXT NOT NULL,
            minute {integer} NOT NULL,
            total {integer} NOT NULL,
            failures {integer} NOT NULL,
            error_time {real},
            error_code TEXT,
            error_message TEXT,
            PRIMARY KEY (tool_id, minute)
        ){clustered}
        """,
        f"""
        CREATE TABLE IF NOT EXISTS audit_durations (
            tool_id TEXT NOT NULL,
            span {integer} NOT NULL,
            start {integer} NOT NULL,
            bucket {integer} NOT NULL,
            n {integer} NOT NULL,
            PRIMARY KEY (tool_id, span, start, bucket)
        ){clustered}
        """,
        "CREATE INDEX IF NOT EXISTS audit_minutes_time ON audit_minutes (minute)",
        "CREATE INDEX IF NOT EXISTS audit_durations_time ON audit_durations (span, start)",
    )


def backfill_statements(*, floor_div: str, bucket: str) -> tuple[str, ...]:
    """Fill the tables from the records already there (when a database written by an older
    toolgate is upgraded). ``floor_div`` is the store's SQL for ``floor({x} / {y})`` as an
    integer, ``bucket`` its SQL for :func:`bucket_of` of ``duration``."""
    minute = floor_div.format(x="time", y=MINUTE)
    failed = f"CASE WHEN {FAILURE_SQL} THEN 1 ELSE 0 END"
    return (
        "INSERT INTO audit_minutes "
        f"({MINUTE_COLUMNS}) "
        "SELECT tool_id, minute, COUNT(*), SUM(failed), "
        "MAX(CASE WHEN failed = 1 AND rn = 1 THEN time END), "
        "MAX(CASE WHEN failed = 1 AND rn = 1 THEN code END), "
        "MAX(CASE WHEN failed = 1 AND rn = 1 THEN message END) "
        f"FROM (SELECT tool_id, {minute} AS minute, time, code, message, {failed} AS failed, "
        f"ROW_NUMBER() OVER (PARTITION BY tool_id, {minute}, {failed} "
        "ORDER BY time DESC, id DESC) AS rn "
        "FROM audit_records WHERE status != 'pending_approval') AS finished "
        "GROUP BY tool_id, minute",
        *(
            f"INSERT INTO audit_durations ({DURATION_COLUMNS}) "
            f"SELECT tool_id, {span}, start, bucket, COUNT(*) FROM (SELECT tool_id, "
            f"{floor_div.format(x='time', y=span)} AS start, {bucket} AS bucket "
            f"FROM audit_records WHERE status = 'ok' OR {FAILURE_SQL}) AS ran "
            "GROUP BY tool_id, start, bucket"
            for span in SPANS
        ),
    )


# -- writing ----------------------------------------------------------------------------------


def _newer(column: str) -> str:
    return (
        f"CASE WHEN excluded.error_time IS NOT NULL AND (audit_minutes.error_time IS NULL OR "
        f"excluded.error_time >= audit_minutes.error_time) THEN excluded.{column} "
        f"ELSE audit_minutes.{column} END"
    )


#: ``INSERT … VALUES`` of minute rows, then this: add to the row already there.
ADD_MINUTES: Final = (
    " ON CONFLICT (tool_id, minute) DO UPDATE SET "
    "total = audit_minutes.total + excluded.total, "
    "failures = audit_minutes.failures + excluded.failures, "
    f"error_code = {_newer('error_code')}, "
    f"error_message = {_newer('error_message')}, "
    f"error_time = {_newer('error_time')}"
)
ADD_DURATIONS: Final = (
    " ON CONFLICT (tool_id, span, start, bucket) DO UPDATE SET n = audit_durations.n + excluded.n"
)
MINUTE_COLUMNS: Final = "tool_id, minute, total, failures, error_time, error_code, error_message"
DURATION_COLUMNS: Final = "tool_id, span, start, bucket, n"


def values(rows: int, width: int) -> str:
    """``(?, ?), (?, ?)`` for ``rows`` rows of ``width`` columns."""
    one = "(" + ", ".join(["?"] * width) + ")"
    return ", ".join([one] * rows)


def upserts(rollup: Rollup, per_statement: int) -> list[tuple[str, list[Any]]]:
    """The statements (with their parameters) that add ``rollup`` to the summary tables, at
    most ``per_statement`` rows each."""
    statements: list[tuple[str, list[Any]]] = []
    for table, columns, width, rows, conflict in (
        ("audit_minutes", MINUTE_COLUMNS, 7, rollup.minutes, ADD_MINUTES),
        ("audit_durations", DURATION_COLUMNS, 5, rollup.durations, ADD_DURATIONS),
    ):
        for start in range(0, len(rows), per_statement):
            chunk = rows[start : start + per_statement]
            sql = f"INSERT INTO {table} ({columns}) VALUES {values(len(chunk), width)}{conflict}"
            statements.append((sql, [value for row in chunk for value in row]))
    return statements


def prune_statements(cutoff: float) -> list[tuple[str, tuple[Any, ...]]]:
    """Delete what only records older than ``cutoff`` made (a row stays while any of its
    minute, hour or day is within the retention)."""
    return [
        ("DELETE FROM audit_minutes WHERE minute < ?", (int(cutoff // MINUTE),)),
        *(
            (
                "DELETE FROM audit_durations WHERE span = ? AND start < ?",
                (span, int(cutoff // span)),
            )
            for span in SPANS
        ),
    ]


# -- reading ----------------------------------------------------------------------------------


def fetch_stats(conn: Any, since: float, tool_id: str | None) -> dict[str, ToolStats]:
    """The health figures since ``since``, by tool id, for one tool or (``None``) every tool
    with records in the window. ``conn`` runs SQL with ``?`` placeholders, rows by name."""
    first_whole = math.ceil(since / MINUTE)  # minutes wholly inside the window start here
    one = "" if tool_id is None else " AND tool_id = ?"
    scope: tuple[Any, ...] = () if tool_id is None else (tool_id,)

    totals: dict[str, list[int]] = {}
    errors: dict[str, tuple[float, Any, Any]] = {}

    def newest(tool: str, at: Any, code: Any, message: Any) -> None:
        if at is not None and (tool not in errors or float(at) >= errors[tool][0]):
            errors[tool] = (float(at), code, message)

    for row in conn.execute(
        "SELECT tool_id, SUM(total) AS total, SUM(failures) AS failures "
        f"FROM audit_minutes WHERE minute >= ?{one} GROUP BY tool_id",
        (first_whole, *scope),
    ).fetchall():
        totals[row["tool_id"]] = [int(row["total"]), int(row["failures"])]
    for tool, (_, failures) in totals.items():
        if failures:
            # The newest failure is in the latest minute that has one: a short walk back along
            # the table's key from the window's end.
            row = conn.execute(
                "SELECT error_time, error_code, error_message FROM audit_minutes "
                "WHERE tool_id = ? AND minute >= ? AND error_time IS NOT NULL "
                "ORDER BY minute DESC LIMIT 1",
                (tool, first_whole),
            ).fetchone()
            if row is not None:
                newest(tool, row["error_time"], row["error_code"], row["error_message"])
    # The part of the first minute that is inside the window, from the records themselves.
    partial_end = first_whole * MINUTE
    if since < partial_end:
        for row in conn.execute(
            "SELECT tool_id, time, status, code, message FROM audit_records "
            f"WHERE time >= ? AND time < ?{one} ORDER BY time, id",
            (since, partial_end, *scope),
        ).fetchall():
            if row["status"] == "pending_approval":
                continue
            # As the summary rows hold them (storable), so the figures read the same whichever
            # side of a minute's edge the window starts (SQLite records keep a NUL as it is).
            tool = storable(row["tool_id"]) or ""
            counts = totals.setdefault(tool, [0, 0])
            counts[0] += 1
            code = row["code"]
            if _is_failure(row["status"], code):
                counts[1] += 1
                newest(tool, row["time"], code, storable(row["message"]))

    # Durations: the hours from the window's first one up to the first whole day, then whole
    # days (the last one still filling): at most a day of hours and eight days per bucket.
    first_hour = int(since // HOUR)
    first_day = -(-first_hour * HOUR // DAY)
    histograms: dict[str, list[tuple[int, int]]] = {}
    for row in conn.execute(
        "SELECT tool_id, bucket, SUM(n) AS n FROM ("
        "SELECT tool_id, bucket, n FROM audit_durations "
        f"WHERE span = ? AND start >= ? AND start < ?{one} UNION ALL "
        "SELECT tool_id, bucket, n FROM audit_durations "
        f"WHERE span = ? AND start >= ?{one}"
        ") AS ran GROUP BY tool_id, bucket ORDER BY tool_id, bucket",
        (HOUR, first_hour, first_day * DAY // HOUR, *scope, DAY, first_day, *scope),
    ).fetchall():
        histograms.setdefault(row["tool_id"], []).append((int(row["bucket"]), int(row["n"])))

    out: dict[str, ToolStats] = {}
    for tool, (total, failures) in totals.items():
        if total == 0:
            continue
        histogram = histograms.get(tool, [])
        error = errors.get(tool)
        out[tool] = ToolStats(
            total=total,
            failures=failures,
            p50=percentile(histogram, 50),
            p95=percentile(histogram, 95),
            last_error=None if error is None else f"[{error[1]}] {error[2] or ''}".strip(),
            last_error_at=None if error is None else error[0],
            last_error_code=None if error is None else error[1],
        )
    return out


def percentile(histogram: list[tuple[int, int]], pct: int) -> float | None:
    """The nearest-rank ``pct`` percentile of a histogram (buckets in ascending order)."""
    count = sum(n for _, n in histogram)
    if not count:
        return None
    rank = (count * pct + 99) // 100
    seen = 0
    for bucket, n in histogram:
        seen += n
        if seen >= rank:
            return bucket_value(bucket)
    return bucket_value(histogram[-1][0])  # pragma: no cover - the loop reaches the rank
