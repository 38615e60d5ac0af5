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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from ..model.stats import NOT_TOOL_FAILURES, ToolStats
from ..stores.sqlite_schema import write_transaction
from .log_base import AuditLog, AuditStoreError
from .record import AuditRecord
from .rollup import prune_statements, rollup_of, upserts
from .sqlite_rows import insert_rows, row_from_record
from .sqlite_schema import SCHEMA_VERSION, ensure_private_file, migrate

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

#: Seconds a reservation waits for another connection's write lock: a held lock longer than
#: this is not a batch being written, and the call it holds is refused rather than kept waiting.
RESERVE_WAIT: Final = 1.0

#: Summary rows one upsert carries at most (7 parameters each: well within SQLite's limit).
ROLLUP_ROWS: Final = 100

#: The path that opens a private, in-memory database (tests).
MEMORY: Final = ":memory:"


class SQLiteAuditLog(AuditLog):
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
        self.path: Path | None = None if str(path) == MEMORY else Path(path)
        """The database file, or ``None`` for an in-memory log."""
        super().__init__(
            batch_size=batch_size,
            flush_interval=flush_interval,
            retention_days=retention_days,
            jsonl_path=jsonl_path,
            queue_size=queue_size,
            prune_interval=prune_interval,
        )
        self._lock = threading.Lock()  # guards the connection and the JSONL file
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int] | None = None
        # One connection per reserving thread: reservations wait for a lock held elsewhere side
        # by side, never behind each other, and never under ``self._lock`` (which readers and
        # the writer take).
        self._reservers = threading.local()
        self._reserver_conns: list[sqlite3.Connection] = []
        with self._lock:
            self._open_locked()
        self._start()

    def __repr__(self) -> str:
        path = getattr(self, "path", None)
        return f"SQLiteAuditLog({MEMORY if path is None else str(path)!r})"

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
                    # The health figures' summary, in the same transaction as its records.
                    for statement, params in upserts(rollup_of(records), ROLLUP_ROWS):
                        conn.execute(statement, params)
            except Exception as exc:  # noqa: BLE001 - counted and reported, never raised
                self._lose(len(records))
                self._fail("cannot write to the audit database", exc)
                return
            self._written += len(records)
            ok = self._append_jsonl(records)
        if ok:
            self._healthy = True

    def _reserve(self) -> None:
        # Takes the database's write lock and lets it go: fails when the file is gone and
        # cannot be made again, is read-only, or another process holds the lock past the busy
        # timeout. WAL and synchronous=NORMAL: no disk flush, a few microseconds.
        with self._lock:
            self._check_file_locked()
            conn = self._open_locked()
            if conn is None:
                raise AuditStoreError(self._last_error or "cannot open the audit database")
            if self.path is None:  # in memory: no other process can hold its lock
                return
        reserver = self._reserver()
        reserver.execute("BEGIN IMMEDIATE")
        reserver.execute("ROLLBACK")

    def _reserver(self) -> sqlite3.Connection:
        """This thread's connection for reservations (opened on first use, and again when the
        database file was replaced or the log reopened since)."""
        with self._lock:
            identity = self._identity
        held = getattr(self._reservers, "held", None)
        if held is not None and held[1] == identity and held[0] in self._reserver_conns:
            conn: sqlite3.Connection = held[0]
            return conn
        assert self.path is not None
        conn = sqlite3.connect(
            str(self.path), timeout=RESERVE_WAIT, isolation_level=None, check_same_thread=False
        )
        self._reservers.held = (conn, identity)
        with self._lock:
            self._reserver_conns.append(conn)
        return conn

    # -- reading --------------------------------------------------------------------------------

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

    def _delete_before(self, cutoff: float) -> int:
        with self._reading() as conn, write_transaction(conn):
            deleted = conn.execute("DELETE FROM audit_records WHERE time < ?", (cutoff,))
            for statement, params in prune_statements(cutoff):
                conn.execute(statement, params)
        return int(deleted.rowcount)

    def _release(self) -> None:
        with self._lock:
            for reserver in self._reserver_conns:
                reserver.close()
            self._reserver_conns.clear()
            if self._conn is not None:
                self._conn.close()
                self._conn = None
