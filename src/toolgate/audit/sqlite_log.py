"""The SQLite audit log: an observer that records every finished call off the hot path.

``observe`` only appends the finished call to a bounded in-memory queue and returns; it never
blocks and never raises. A background thread turns queued calls into redacted
:class:`~toolgate.audit.record.AuditRecord` values and writes them in batches — one
``executemany`` in one transaction per batch — to a SQLite database in WAL mode (file mode
0600), and optionally appends them as JSON lines to a second file.

Failures are counted, never raised into the caller: when the queue is full, or a batch cannot be
written (the disk is full, the folder is read-only, the database is locked for too long), the
records are dropped and :attr:`SQLiteAuditLog.lost` grows; :attr:`SQLiteAuditLog.healthy` is
``False`` from a failed write until a later write succeeds. The gateway uses ``healthy`` to fail
closed for tools above ``local_write``.

The database must be a file of its own (``$TOOLGATE_HOME/audit.db``): its schema version is
kept in SQLite's ``user_version``.

This module imports :mod:`sqlite3`; it is only imported when an audit log is built.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from ..model.stats import NOT_TOOL_FAILURES, ToolStats
from ..pipeline.observers import FinishedCall
from .record import AuditRecord, record_from

__all__ = [
    "BUSY_TIMEOUT",
    "NOT_TOOL_FAILURES",
    "SCHEMA_VERSION",
    "AuditStoreError",
    "SQLiteAuditLog",
    "ToolStats",
]

#: Seconds a statement waits for another connection's write lock before failing.
BUSY_TIMEOUT: Final = 5.0

#: The path that opens a private, in-memory database (tests).
MEMORY: Final = ":memory:"

_DAY: Final = 86_400.0

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

_COLUMNS: Final = (
    "time, call_id, tool_id, definition_hash, status, code, message, detail, duration, agent, "
    "session, workspace, approval_id, approval_decision, idempotency_key, args, result, "
    "visualization, metadata"
)
_INSERT: Final = (
    f"INSERT INTO audit_records ({_COLUMNS}) VALUES ({', '.join(['?'] * len(_COLUMNS.split(',')))})"
)

_EXCLUDED = ", ".join(f"'{code}'" for code in sorted(NOT_TOOL_FAILURES))
#: SQL: the row is a tool failure (see :data:`NOT_TOOL_FAILURES`).
_FAILURE: Final = f"(status = 'error' AND (code IS NULL OR code NOT IN ({_EXCLUDED})))"
#: SQL: the tool ran to an end that says something about its latency.
_RAN: Final = f"(status = 'ok' OR {_FAILURE})"


class AuditStoreError(RuntimeError):
    """The audit database cannot be opened or read (query API only; ``observe`` never raises)."""


def _json_default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_default)


def _dump(value: Any) -> str:
    return _ENCODER.encode(value)


def _row(record: AuditRecord) -> tuple[Any, ...]:
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
        None if record.args is None else _dump(record.args),
        None if record.result is None else _dump(record.result),
        None if record.visualization is None else _dump(record.visualization),
        _dump(record.metadata),
    )


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _record(row: sqlite3.Row) -> AuditRecord:
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


def _ensure_private_file(path: Path) -> None:
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


def _where(
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


class _Flush:
    """A marker in the queue: set once everything queued before it is written."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class SQLiteAuditLog:
    """The audit log: a :class:`~toolgate.pipeline.observers.CallObserver` backed by SQLite.

    ``path`` is the database file (created with its folders, mode 0600) or ``":memory:"``.
    Records are written in batches of up to ``batch_size``, at the latest ``flush_interval``
    seconds after they were observed. With ``retention_days`` set, records older than that are
    deleted by :meth:`prune`, which the writer runs at start and every ``prune_interval`` seconds.
    ``jsonl_path`` also appends every record as one JSON line. At most ``queue_size`` calls wait
    in memory; beyond that they are dropped and counted in :attr:`lost`.

    Opening never raises for an unusable path: the log starts unhealthy and retries with each
    batch. The query methods raise :class:`AuditStoreError` when the database cannot be read.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        batch_size: int = 500,
        flush_interval: float = 0.2,
        retention_days: float | None = 30,
        jsonl_path: Path | str | None = None,
        queue_size: int = 100_000,
        prune_interval: float = 3600.0,
    ) -> None:
        if batch_size < 1 or queue_size < 1:
            raise ValueError("batch_size and queue_size must be positive")
        self.path: Path | None = None if str(path) == MEMORY else Path(path)
        """The database file, or ``None`` for an in-memory log."""
        self.jsonl_path: Path | None = None if jsonl_path is None else Path(jsonl_path)
        self.retention_days = retention_days
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.queue_size = queue_size
        self.prune_interval = prune_interval

        self._queue: deque[FinishedCall | _Flush] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards the connection and the JSONL file
        self._count_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._jsonl: IO[str] | None = None
        self._lost = 0
        self._written = 0
        self._healthy = True
        self._last_error: str | None = None
        self._closed = False
        self._stopping = False
        with self._lock:
            self._open_locked()
        self._thread = threading.Thread(
            target=self._run, name=f"toolgate-audit:{path}", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        return f"SQLiteAuditLog({MEMORY if self.path is None else str(self.path)!r})"

    # -- health ---------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        """``False`` after a failed write (or open) until a later write succeeds."""
        return self._healthy

    @property
    def lost(self) -> int:
        """Records dropped: the queue was full, the log was closed, or writing them failed."""
        return self._lost

    @property
    def written(self) -> int:
        """Records written to the database since the log was opened."""
        return self._written

    @property
    def last_error(self) -> str | None:
        """What the last failure was (``None`` when there was none)."""
        return self._last_error

    @property
    def pending(self) -> int:
        """Calls observed and not yet written."""
        return len(self._queue)

    def _lose(self, count: int) -> None:
        with self._count_lock:
            self._lost += count

    def _fail(self, what: str, exc: BaseException) -> None:
        self._healthy = False
        self._last_error = f"{what}: {type(exc).__name__}: {exc}"

    # -- the hot path ---------------------------------------------------------------------------

    def observe(self, call: FinishedCall) -> None:
        """Queue ``call`` for writing. Never blocks, never raises: when the queue is full or the
        log is closed, the call is counted in :attr:`lost`. Redaction happens on the writer
        thread, so the caller pays only for the append."""
        try:
            if self._closed or len(self._queue) >= self.queue_size:
                self._lose(1)
                return
            self._queue.append(call)
            if len(self._queue) >= self.batch_size:
                self._wake.set()
        except Exception:  # noqa: BLE001 - an observer must never raise into the call
            self._lose(1)

    # -- the writer -----------------------------------------------------------------------------

    def _open_locked(self) -> sqlite3.Connection | None:
        """The connection, opened (and migrated) if needed; ``None`` when that fails."""
        if self._conn is not None:
            return self._conn
        conn: sqlite3.Connection | None = None
        try:
            if self.path is not None:
                _ensure_private_file(self.path)
            conn = sqlite3.connect(
                MEMORY if self.path is None else str(self.path),
                timeout=BUSY_TIMEOUT,
                isolation_level=None,
                check_same_thread=False,  # shared by the writer and queries, under self._lock
            )
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            if self.path is not None:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate(conn)
        except (sqlite3.Error, OSError, RuntimeError) as exc:
            if conn is not None:
                conn.close()
            self._fail("cannot open the audit database", exc)
            return None
        self._conn = conn
        return conn

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
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

    def _run(self) -> None:
        next_prune = 0.0
        while True:
            if self.retention_days is not None and time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval
                with suppress(Exception):
                    self.prune(time.time())
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            try:
                self._drain()
            except Exception as exc:  # noqa: BLE001 - the writer must survive anything
                self._fail("the audit writer failed", exc)
            if self._stopping and not self._queue:
                return

    def _drain(self) -> None:
        """Write everything queued now, in batches; release flush markers in order."""
        batch: list[FinishedCall] = []
        while True:
            try:
                item = self._queue.popleft()
            except IndexError:
                break
            if isinstance(item, _Flush):
                self._write(batch)
                batch = []
                item.done.set()
                continue
            batch.append(item)
            if len(batch) >= self.batch_size:
                self._write(batch)
                batch = []
        self._write(batch)

    def _write(self, calls: list[FinishedCall]) -> None:
        """Redact and write one batch; on any failure count the batch as lost."""
        if not calls:
            return
        records: list[AuditRecord] = []
        for call in calls:
            try:
                records.append(record_from(call))
            except Exception as exc:  # noqa: BLE001 - a bad call loses its record, not the batch
                self._lose(1)
                self._fail(f"cannot record call {call.call_id!r}", exc)
        if records:
            self._write_records(records)

    def _write_records(self, records: list[AuditRecord]) -> None:
        try:
            rows = [_row(record) for record in records]
        except Exception as exc:  # noqa: BLE001 - unserializable values
            self._lose(len(records))
            self._fail("cannot serialize audit records", exc)
            return
        with self._lock:
            conn = self._open_locked()
            if conn is None:
                self._lose(len(records))
                return
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(_INSERT, rows)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except Exception as exc:  # noqa: BLE001 - counted and reported, never raised
                self._lose(len(records))
                self._fail("cannot write to the audit database", exc)
                return
            self._written += len(records)
            ok = self._append_jsonl(records)
        if ok:
            self._healthy = True

    def _append_jsonl(self, records: list[AuditRecord]) -> bool:
        if self.jsonl_path is None:
            return True
        try:
            if self._jsonl is None:
                _ensure_private_file(self.jsonl_path)
                self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
            self._jsonl.write("".join(_dump(r.to_dict()) + "\n" for r in records))
            self._jsonl.flush()
        except (OSError, ValueError, TypeError) as exc:
            self._fail(f"cannot append to {self.jsonl_path}", exc)
            if self._jsonl is not None:
                with suppress(OSError):
                    self._jsonl.close()
                self._jsonl = None
            return False
        return True

    # -- life cycle -----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call observed so far is written (or lost); False on timeout."""
        if not self._thread.is_alive():
            return not self._queue
        marker = _Flush()
        self._queue.append(marker)
        self._wake.set()
        return marker.done.wait(timeout)

    def close(self) -> None:
        """Write what is queued, stop the writer and release the files (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stopping = True
        self._wake.set()
        self._thread.join()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._jsonl is not None:
                with suppress(OSError):
                    self._jsonl.close()
                self._jsonl = None

    def __enter__(self) -> SQLiteAuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- queries --------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn if self._closed else self._open_locked()
            if conn is None:
                raise AuditStoreError(self._last_error or "the audit log is closed")
            try:
                yield conn
            except sqlite3.Error as exc:
                raise AuditStoreError(f"cannot read the audit database: {exc}") from exc

    def query(
        self,
        *,
        tool_id: str | None = None,
        agent: str | None = None,
        status: str | None = None,
        code: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int | None = 100,
        offset: int = 0,
    ) -> list[AuditRecord]:
        """Records matching every given filter, newest first. ``since`` is inclusive,
        ``until`` exclusive (Unix seconds); ``limit=None`` returns all."""
        where, params = _where(
            tool_id=tool_id, agent=agent, status=status, code=code, since=since, until=until
        )
        sql = f"SELECT {_COLUMNS} FROM audit_records{where} ORDER BY time DESC, id DESC"
        sql += " LIMIT ? OFFSET ?"
        params += [-1 if limit is None else limit, offset]
        with self._reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_record(row) for row in rows]

    def count(self, **filters: Any) -> int:
        """How many records match ``filters`` (those of :meth:`query`, without paging)."""
        where, params = _where(**filters)
        with self._reading() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM audit_records{where}", params).fetchone()
        return int(row[0])

    def export_jsonl(self, file: IO[str] | Path | str, **filters: Any) -> int:
        """Write every record matching ``filters`` (those of :meth:`query`; ``limit`` defaults to
        all) as JSON lines, newest first, to an open text file or a path (created 0600).
        Returns how many were written."""
        filters.setdefault("limit", None)
        if isinstance(file, (str, Path)):
            target = Path(file)
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as stream:
                return self._export(stream, filters)
        return self._export(file, filters)

    def _export(self, stream: IO[str], filters: dict[str, Any]) -> int:
        written = 0
        for record in self.query(**filters):
            stream.write(_dump(record.to_dict()) + "\n")
            written += 1
        stream.flush()
        return written

    def prune(self, now: float) -> int:
        """Delete records older than the retention (``now`` minus ``retention_days``); returns
        how many were deleted (0 without a retention)."""
        if self.retention_days is None:
            return 0
        cutoff = now - self.retention_days * _DAY
        with self._reading() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                deleted = conn.execute("DELETE FROM audit_records WHERE time < ?", (cutoff,))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return int(deleted.rowcount)

    # -- health statistics ------------------------------------------------------------------------

    def stats(self, tool_id: str, *, since: float) -> ToolStats:
        """The health figures of one tool since ``since`` (see :class:`ToolStats`)."""
        return self._stats(since, tool_id).get(tool_id, ToolStats())

    def all_stats(self, since: float) -> dict[str, ToolStats]:
        """The health figures of every tool with records since ``since``, by tool id."""
        return self._stats(since, None)

    def _stats(self, since: float, tool_id: str | None) -> dict[str, ToolStats]:
        scope = "time >= ?" + ("" if tool_id is None else " AND tool_id = ?")
        params: tuple[Any, ...] = (since,) if tool_id is None else (since, tool_id)
        with self._reading() as conn:
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
                ") WHERE rn = (n * 50 + 99) / 100 OR rn = (n * 95 + 99) / 100",
                params,
            ).fetchall()
            errors = conn.execute(
                "SELECT tool_id, code, message, time FROM ("
                "SELECT tool_id, code, message, time, ROW_NUMBER() OVER "
                "(PARTITION BY tool_id ORDER BY time DESC, id DESC) AS rn "
                f"FROM audit_records WHERE {scope} AND {_FAILURE}"
                ") WHERE rn = 1",
                params,
            ).fetchall()
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
                last_error=None
                if err is None
                else f"[{err['code']}] {err['message'] or ''}".strip(),
                last_error_at=None if err is None else float(err["time"]),
                last_error_code=None if err is None else err["code"],
            )
        return out
