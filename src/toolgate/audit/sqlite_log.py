"""The SQLite audit log: an observer that records every finished call off the hot path.

``observe`` only appends the finished call to a bounded in-memory queue and returns; it never
blocks and never raises. A background thread turns queued calls into redacted
:class:`~toolgate.audit.record.AuditRecord` values and writes them in batches — one transaction
per batch, a few multi-row statements each (:func:`~.sqlite_rows.insert_rows`) — to a SQLite
database in WAL mode (file mode 0600), and optionally appends them as JSON lines to a second
file.

Failures are counted, never raised into the caller: when the queue is full, or a batch cannot be
written (the disk is full, the folder is read-only, the database is locked for too long), the
records are dropped and :attr:`SQLiteAuditLog.lost` grows; :attr:`SQLiteAuditLog.healthy` is
``False`` from a failed write, or a call dropped from a full queue, until a later write
succeeds. The gateway uses ``healthy`` to fail closed for tools above ``local_write``.

The database must be a file of its own (``$TOOLGATE_HOME/audit.db``): its schema version is
kept in SQLite's ``user_version``.

This module imports :mod:`sqlite3`; it is only imported when an audit log is built.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from ..model.stats import NOT_TOOL_FAILURES, ToolStats
from ..pipeline.observers import FinishedCall
from ..stores.sqlite_schema import write_transaction
from .query import build_stats, fetch_stats
from .query import where as _where
from .record import AuditRecord
from .sqlite_rows import dump, insert_rows, record_from_row, row_from_record
from .sqlite_schema import COLUMNS, SCHEMA_VERSION, ensure_private_file, migrate
from .writer import BatchWriter, Flush

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


class AuditStoreError(RuntimeError):
    """The audit database cannot be opened or read (query API only; ``observe`` never raises)."""


class SQLiteAuditLog(BatchWriter):
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

        self._queue: deque[FinishedCall | Flush] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # guards the connection and the JSONL file
        self._count_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
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
                if not self._closed:
                    # Records are being dropped: tools above local_write must stop running
                    # unaudited until the writer catches up (its next write clears this).
                    self._healthy = False
                    self._last_error = (
                        f"the audit queue is full ({self.queue_size:,} calls waiting): the "
                        "writer cannot keep up, and calls are being dropped"
                    )
                return
            self._queue.append(call)
            # Wake the writer for a full batch, once: setting a set Event still takes its lock
            # and notifies, a cost every call would pay while the writer is busy.
            if len(self._queue) >= self.batch_size and not self._wake.is_set():
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
                ensure_private_file(self.path)
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
            migrate(conn)
        except (sqlite3.Error, OSError, RuntimeError) as exc:
            if conn is not None:
                conn.close()
            self._fail("cannot open the audit database", exc)
            return None
        self._conn = conn
        self._identity = self._file_identity()
        return conn

    def _file_identity(self) -> tuple[int, int] | None:
        if self.path is None:
            return None
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_dev, info.st_ino

    def _check_file_locked(self) -> None:
        """Reopen when the database file was removed or replaced behind the open connection:
        writes would otherwise go on "succeeding" into an unlinked file nobody can read."""
        if self.path is None or self._conn is None:
            return
        if self._file_identity() != self._identity:
            self._conn.close()
            self._conn = None
            self._fail(
                "the audit database was removed or replaced while open",
                FileNotFoundError(str(self.path)),
            )

    def _write_records(self, batch: list[AuditRecord]) -> None:
        rows: list[tuple[Any, ...]] = []
        records: list[AuditRecord] = []
        for record in batch:
            try:
                rows.append(row_from_record(record))
            except Exception as exc:  # noqa: BLE001 - an unserializable value loses its record
                self._lose(1)
                self._fail(f"cannot serialize the record of call {record.call_id!r}", exc)
                continue
            records.append(record)
        if not records:
            return
        with self._lock:
            self._check_file_locked()
            conn = self._open_locked()
            if conn is None:
                self._lose(len(records))
                return
            try:
                with write_transaction(conn):
                    insert_rows(conn, rows)
            except Exception as exc:  # noqa: BLE001 - counted and reported, never raised
                self._lose(len(records))
                self._fail("cannot write to the audit database", exc)
                return
            self._written += len(records)
            ok = self._append_jsonl(records)
        if ok:
            self._healthy = True

    # -- life cycle -----------------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call observed so far is written (or lost); False on timeout."""
        if not self._thread.is_alive():
            return not self._queue
        marker = Flush()
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
        sql = f"SELECT {COLUMNS} FROM audit_records{where} ORDER BY time DESC, id DESC"
        sql += " LIMIT ? OFFSET ?"
        params += [-1 if limit is None else limit, offset]
        with self._reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [record_from_row(row) for row in rows]

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
            stream.write(dump(record.to_dict()) + "\n")
            written += 1
        stream.flush()
        return written

    def prune(self, now: float) -> int:
        """Delete records older than the retention (``now`` minus ``retention_days``); returns
        how many were deleted (0 without a retention)."""
        if self.retention_days is None:
            return 0
        cutoff = now - self.retention_days * _DAY
        with self._reading() as conn, write_transaction(conn):
            deleted = conn.execute("DELETE FROM audit_records WHERE time < ?", (cutoff,))
        return int(deleted.rowcount)

    def _stats(self, since: float, tool_id: str | None) -> dict[str, ToolStats]:
        with self._reading() as conn:
            rows = fetch_stats(conn, since, tool_id)
        return build_stats(rows)

    # -- health statistics ------------------------------------------------------------------------

    def stats(self, tool_id: str, *, since: float) -> ToolStats:
        """The health figures of one tool since ``since`` (see :class:`ToolStats`)."""
        return self._stats(since, tool_id).get(tool_id, ToolStats())

    def all_stats(self, since: float) -> dict[str, ToolStats]:
        """The health figures of every tool with records since ``since``, by tool id."""
        return self._stats(since, None)
