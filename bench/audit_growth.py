"""How the audit log's read paths grow with its size: health figures and audit pages at 10⁵,
10⁶ and 10⁷ records, on SQLite and on PostgreSQL, beside their floor and the old scan.

    python bench/audit_growth.py                      # 10⁵ and 10⁶ records, both stores
    python bench/audit_growth.py --sizes 1e5,1e6,1e7  # the issue's table (~4 GB of disk)
    python bench/audit_growth.py --stores sqlite --runs 9

Each size is a fresh log whose records are spread over the last 7 days, nine in ten on one busy
tool (one in twenty of them a failure) and the rest over 20 other tools. The records are put in
with SQL (the writer would take minutes at 10⁷), then the log is opened as an older toolgate left
it — without the summary tables — so the first row is the upgrade that fills them. Then, median of
``--runs`` (milliseconds):

* ``tool status``: the busy tool's figures for the week and the hour (what ``GET /v1/tools/{id}``
  and each row of the catalog read);
* ``all tools``: every tool's figures for the week (``GET /v1/status``, the web UI's catalog);
* ``audit page``: the first page of ``GET /v1/audit`` (50 records, and the count up to 10,000);
* ``floor``: the newest record alone (an indexed lookup: what any read costs);
* ``scan (before)``: the figures as they were computed before the summary tables — every record
  of the week read and sorted (timed once; skipped above ``--scan-max`` records);
* ``count (before)``: the exact count the audit page made before (timed once, same limit).

PostgreSQL rows need the local server (``TOOLGATE_BENCH_POSTGRES``, default
``postgresql://postgres@127.0.0.1:5432/test``); the run makes its own database and drops it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolgate.audit.log_base import COUNT_LIMIT, AuditLog
from toolgate.audit.sqlite_log import SQLiteAuditLog

WEEK = 7 * 86_400.0
HOUR = 3600.0
BUSY = "bench:busy"
OTHER_TOOLS = 20
TOOL_PARAMS = ("bench:t", BUSY)
PG_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"


# -- the figures as they were computed before the summary tables (the baseline) ----------------

_FAILURE = (
    "(status = 'error' AND (code IS NULL OR code NOT IN ('busy', 'cancelled', 'forbidden', "
    "'idempotency_conflict', 'invalid_arguments', 'rate_limited', 'tool_not_found', "
    "'user_rejection')))"
)


def scan_stats(conn: Any, since: float) -> int:
    """The three queries of the old ``fetch_stats`` for every tool; returns the rows read."""
    rows = conn.execute(
        "SELECT tool_id, COUNT(*) AS n, SUM(CASE WHEN "
        f"{_FAILURE} THEN 1 ELSE 0 END) AS failures FROM audit_records WHERE time >= ? "
        "GROUP BY tool_id",
        (since,),
    ).fetchall()
    rows += conn.execute(
        "SELECT tool_id, rn, n, duration FROM (SELECT tool_id, duration, ROW_NUMBER() OVER "
        "(PARTITION BY tool_id ORDER BY duration) AS rn, COUNT(*) OVER (PARTITION BY tool_id) "
        f"AS n FROM audit_records WHERE time >= ? AND (status = 'ok' OR {_FAILURE})) AS r "
        "WHERE rn = (n * 50 + 99) / 100 OR rn = (n * 95 + 99) / 100",
        (since,),
    ).fetchall()
    rows += conn.execute(
        "SELECT tool_id, code, message, time FROM (SELECT tool_id, code, message, time, "
        "ROW_NUMBER() OVER (PARTITION BY tool_id ORDER BY time DESC, id DESC) AS rn FROM "
        f"audit_records WHERE time >= ? AND {_FAILURE}) AS latest WHERE rn = 1",
        (since,),
    ).fetchall()
    return len(rows)


# -- filling a log ------------------------------------------------------------------------------


def _record_select(count: int, now: float, series: str, mod: str = "{0} % {1}") -> str:
    """SQL selecting ``count`` records from ``series`` (a relation with a column ``i``);
    ``mod`` is the store's remainder (PostgreSQL's ``%`` would need escaping through the
    driver)."""

    def m(b: int) -> str:
        return mod.format("i", b)

    return (
        f"SELECT {now} - {WEEK} * (i + 0.5) / {count}, 'c' || i, "
        # The tool ids are parameters: the PostgreSQL driver's adapter reads ":name" as one.
        f"CASE WHEN {m(10)} = 9 THEN ? || ({m(OTHER_TOOLS)}) ELSE ? END, "
        f"CASE WHEN {m(20)} = 0 THEN 'error' ELSE 'ok' END, "
        f"CASE WHEN {m(20)} = 0 THEN 'tool_error' END, "
        f"CASE WHEN {m(20)} = 0 THEN 'it failed (' || i || ')' END, "
        f"0.001 + ({m(997)}) / 10000.0, '{{}}' "
        f"FROM {series}"
    )


_INSERT = (
    "INSERT INTO audit_records (time, call_id, tool_id, status, code, message, duration, metadata) "
)


def fill_sqlite(path: Path, count: int, now: float) -> float:
    """A SQLite audit log of ``count`` records as an older toolgate left it; returns the
    seconds opening it took (the upgrade that fills the summary tables)."""
    import sqlite3

    SQLiteAuditLog(path, retention_days=None).close()  # the schema
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("BEGIN")
    conn.execute(
        _INSERT
        + f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < {count - 1}) "
        + _record_select(count, now, "n"),
        TOOL_PARAMS,
    )
    conn.execute("DROP TABLE audit_minutes")
    conn.execute("DROP TABLE audit_durations")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("COMMIT")
    conn.close()
    started = time.perf_counter()
    SQLiteAuditLog(path, retention_days=None).close()
    return time.perf_counter() - started


@contextmanager
def pg_database(url: str) -> Any:
    """A scratch database on the server of ``url``, dropped afterwards."""
    import psycopg

    name = f"tg_bench_audit_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill_postgres(url: str, count: int, now: float) -> float:
    """The shared database at ``url`` with ``count`` records at schema 0005; returns the
    seconds ``toolgate db upgrade`` to 0006 (which fills the summary tables) took."""
    import psycopg

    from toolgate.stores.postgres_db import PostgresDatabase
    from toolgate.stores.postgres_schema import upgrade

    db = PostgresDatabase(url)
    try:
        upgrade(db)
        # Straight through psycopg: the gateway's connections have a statement timeout that a
        # ten-million-row INSERT is far over.
        insert = _INSERT + _record_select(
            count, now, f"generate_series(0, {count - 1}) AS s(i)", mod="mod({0}, {1})"
        )
        with psycopg.connect(url, autocommit=True) as conn:
            with conn.transaction():
                conn.execute(insert.replace("?", "%s"), TOOL_PARAMS)
                conn.execute("DROP TABLE audit_minutes, audit_durations")
                conn.execute("UPDATE alembic_version SET version_num = '0005'")
            conn.execute("VACUUM ANALYZE audit_records")
        started = time.perf_counter()
        upgrade(db)
        return time.perf_counter() - started
    finally:
        db.close()


# -- timing -------------------------------------------------------------------------------------


def _median_ms(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(log: AuditLog, runs: int, now: float, scan: bool) -> dict[str, float | None]:
    """The figures of one log (milliseconds)."""
    week, hour = now - WEEK, now - HOUR
    figures: dict[str, float | None] = {
        "tool status": _median_ms(
            lambda: (log.stats(BUSY, since=week), log.stats(BUSY, since=hour)), runs
        ),
        "all tools": _median_ms(lambda: log.all_stats(week), runs),
        "audit page": _median_ms(
            lambda: (log.query(limit=51), log.count(up_to=COUNT_LIMIT + 1)), runs
        ),
        "floor": _median_ms(lambda: log.query(limit=1), runs),
        "scan (before)": None,
        "count (before)": None,
    }
    stats = log.stats(BUSY, since=week)
    if stats.total == 0 or stats.p50 is None:
        raise RuntimeError(f"the busy tool has no figures: {stats}")
    if scan:
        with log._reading() as conn:
            figures["scan (before)"] = _median_ms(lambda: scan_stats(conn, week), 1)
        figures["count (before)"] = _median_ms(lambda: log.count(), 1)
    return figures


def _sizes(text: str) -> list[int]:
    return [int(float(part)) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1e5,1e6", help="records per log (default 1e5,1e6)")
    parser.add_argument("--stores", default="sqlite,postgres", help="sqlite, postgres or both")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per figure (median)")
    parser.add_argument(
        "--scan-max", type=float, default=2e6, help="time the old scan up to this many records"
    )
    parser.add_argument("--postgres", default=None, help=f"server URL (default {PG_DEFAULT})")
    args = parser.parse_args(argv)
    import os

    pg_url = args.postgres or os.environ.get("TOOLGATE_BENCH_POSTGRES", PG_DEFAULT)
    columns = ["upgrade", "tool status", "all tools", "audit page", "floor"]
    columns += ["scan (before)", "count (before)"]
    table: list[tuple[str, int, dict[str, float | None]]] = []
    for store in [s.strip() for s in args.stores.split(",") if s.strip()]:
        for count in _sizes(args.sizes):
            now = time.time()
            print(f"{store}: {count:,} records …", file=sys.stderr, flush=True)
            scan = count <= args.scan_max
            if store == "sqlite":
                with tempfile.TemporaryDirectory(prefix="tg-audit-growth-") as folder:
                    path = Path(folder) / "audit.db"
                    upgrade_s = fill_sqlite(path, count, now)
                    with SQLiteAuditLog(path, retention_days=None) as log:
                        figures = measure(log, args.runs, now, scan)
            elif store == "postgres":
                try:
                    from toolgate.audit.postgres_log import PostgresAuditLog
                    from toolgate.stores.postgres_db import PostgresDatabase

                    with pg_database(pg_url) as url:
                        upgrade_s = fill_postgres(url, count, now)
                        db = PostgresDatabase(url)
                        log = PostgresAuditLog(db, retention_days=None)
                        try:
                            figures = measure(log, args.runs, now, scan)
                        finally:
                            log.close()
                            db.close()
                except Exception as exc:  # noqa: BLE001 - reported, the other rows still run
                    print(f"postgres: skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
                    break
            else:
                parser.error(f"--stores: unknown store {store!r} (sqlite or postgres)")
            table.append((store, count, {"upgrade": upgrade_s * 1000, **figures}))

    print("\nAudit read paths by log size (milliseconds; medians of", args.runs, "runs)\n")
    header = f"{'store':<9}{'records':>12}" + "".join(f"{c:>16}" for c in columns)
    print(header)
    print("-" * len(header))
    for store, count, figures in table:
        cells = "".join(
            f"{'—' if figures[c] is None else format(figures[c], ',.1f'):>16}" for c in columns
        )
        print(f"{store:<9}{count:>12,}{cells}")
    print(
        "\nupgrade: opening (SQLite) or `db upgrade` (PostgreSQL) of a log without the summary "
        "tables, once.\nGoal (issue 26): health figures and audit pages ≤ 50 ms at 10⁷ records, "
        "growing less than 10× per 10×."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
