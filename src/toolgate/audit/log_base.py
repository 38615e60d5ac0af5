"""What every audit log shares, whatever keeps its records: the queue on the hot path, the health
counters, the acknowledgements of durable logs, and the queries and statistics (one SQL for
SQLite and PostgreSQL).

:class:`AuditLog` is subclassed by :class:`~toolgate.audit.sqlite_log.SQLiteAuditLog` (a file of
its own) and :class:`~toolgate.audit.postgres_log.PostgresAuditLog` (the shared database of
several replicas); each supplies the write of a batch, a connection to read with and the
release of its storage.

**Durable acknowledgement.** A log built with ``durable=True`` remembers every call it is shown
until the batch holding it is committed; :meth:`AuditLog.recorded` waits for that. The gateway
calls it before it answers, so a caller is never told of a call whose record a crash of this
process could still lose. Waiting adds no batching delay: a durable log wakes its writer for
every call, and calls that arrive while a batch is being written share the next commit.
"""

from __future__ import annotations

import abc
import os
import threading
from collections import deque
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import IO, Any, Final

from ..model.stats import ToolStats
from ..pipeline.observers import FinishedCall
from .acknowledgements import Acknowledgements
from .query import where as _where
from .record import AuditRecord
from .rollup import fetch_stats, prune_cutoff
from .sqlite_rows import dump, record_from_row
from .sqlite_schema import COLUMNS
from .writer import BatchWriter, Flush

__all__ = ["COUNT_LIMIT", "UNRECORDED", "AuditLog", "AuditStoreError"]

#: What a caller is told when its call's record could not be written (details: ``last_error``).
UNRECORDED: Final = "the audit log could not write it"

_DAY: Final = 86_400.0

#: How far the surfaces (the HTTP API, the web UI) count the records a query matches: past it
#: they say "more than" and keep paging, so a page costs the same in any size of log.
COUNT_LIMIT: Final = 10_000


class AuditStoreError(RuntimeError):
    """The audit database cannot be opened or read (query API only; ``observe`` never raises)."""


class AuditLog(BatchWriter):
    """A :class:`~toolgate.pipeline.observers.CallObserver` that keeps one redacted record per
    finished call, written in batches by a background thread (see the module docstring)."""

    #: ``LIMIT`` without a bound, in this store's SQL (a query with an offset and no limit).
    unlimited: str = "LIMIT -1"

    def __init__(
        self,
        *,
        batch_size: int,
        flush_interval: float,
        retention_days: float | None,
        jsonl_path: Path | str | None,
        queue_size: int,
        prune_interval: float,
        durable: bool = False,
    ) -> None:
        if batch_size < 1 or queue_size < 1:
            raise ValueError("batch_size and queue_size must be positive")
        self.jsonl_path: Path | None = None if jsonl_path is None else Path(jsonl_path)
        self.retention_days = retention_days
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.queue_size = queue_size
        self.prune_interval = prune_interval
        self.durable = durable
        """Whether :meth:`recorded` can tell that a call's record is committed."""
        self._queue: deque[FinishedCall | Flush] = deque()
        self._wake = threading.Event()
        self._count_lock = threading.Lock()
        self._acks = Acknowledgements()
        self._jsonl: IO[str] | None = None
        self._lost = 0
        self._written = 0
        self._healthy = True
        self._last_error: str | None = None
        self._closed = False
        # Taken around "not closed, so queue it" and around closing: a call observed while the
        # log closes is either queued before the writer's last drain or refused at once, never
        # queued after it (its caller would wait out its whole timeout).
        self._admitting = threading.Lock()
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"toolgate-audit:{self!r}", daemon=True
        )

    def _start(self) -> None:
        """Start the writer (subclasses call it once their storage is set up)."""
        self._thread.start()

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
            with self._admitting:
                if self._closed or len(self._queue) >= self.queue_size:
                    self._lose(1)
                    if self.durable:
                        full = (
                            "the audit log is closed" if self._closed else "the audit queue is full"
                        )
                        self._acks.refuse(call.call_id, full)
                    if not self._closed:
                        # Records are being dropped: tools above local_write must stop running
                        # unaudited until the writer catches up (its next write clears this).
                        self._healthy = False
                        self._last_error = (
                            f"the audit queue is full ({self.queue_size:,} calls waiting): the "
                            "writer cannot keep up, and calls are being dropped"
                        )
                    return
                if self.durable:
                    self._acks.expect(call.call_id)
                self._queue.append(call)
                # Wake the writer for a full batch (at once for a durable log: a caller waits), and
                # only once: setting a set Event still takes its lock and notifies.
                if (
                    self.durable or len(self._queue) >= self.batch_size
                ) and not self._wake.is_set():
                    self._wake.set()
        except Exception:  # noqa: BLE001 - an observer must never raise into the call
            self._lose(1)
            if self.durable:
                self._acks.settle([call.call_id], UNRECORDED)

    # -- acknowledgements -----------------------------------------------------------------------

    def _settle(self, call_ids: list[str], reason: str | None) -> None:
        """Tell whoever waits for these calls that their records are committed (``reason`` is
        ``None``) or are not (why, in words for the caller: never the database's address)."""
        if self.durable and call_ids:
            self._acks.settle(call_ids, reason)

    async def recorded(self, call_id: str, timeout: float) -> str | None:
        """Wait until the record of ``call_id`` is committed. Returns ``None`` when it is, else
        why it is not (it failed, was dropped, never reached this log, or was not committed
        within ``timeout`` seconds). A log that is not durable returns ``None`` at once."""
        return await self._acks.wait(call_id, timeout) if self.durable else None

    def recorded_sync(self, call_id: str, timeout: float) -> str | None:
        """:meth:`recorded` for a thread without an event loop (it blocks)."""
        return self._acks.wait_sync(call_id, timeout) if self.durable else None

    # -- reservations ---------------------------------------------------------------------------

    def reserve(self) -> str | None:
        """Make sure, with a real round trip, that the store can write now: called right
        before a tool above ``local_write`` runs, so that a store that went away since the last
        batch stops the tool instead of leaving its call unrecorded. (On PostgreSQL a write the
        same thread committed to the same database less than
        :data:`~toolgate.stores.postgres_db.WRITE_PROOF_AGE` seconds earlier — the call's
        idempotency claim — stands in for that round trip.) ``None`` when it can write;
        else why not (for the caller, never the database's address). A failure makes the log
        unhealthy, like a failed batch, until a later batch is written."""
        if self._closed:
            return "the audit log is closed"
        try:
            self._reserve()
        except Exception as exc:  # noqa: BLE001 - any failure means: do not run the tool
            self._fail("cannot reserve a record in the audit log", exc)
            return UNRECORDED
        return None

    @abc.abstractmethod
    def _reserve(self) -> None:
        """One round trip that succeeds only when the store can write a record now (raises
        otherwise)."""

    # -- the writer's storage -------------------------------------------------------------------

    def _write(self, calls: list[FinishedCall]) -> None:
        try:
            super()._write(calls)
        finally:
            # Settles what _write_records did not: a call whose record could not be built, or
            # every call of a batch whose write failed unexpectedly. No caller waits in vain.
            self._settle([call.call_id for call in calls], UNRECORDED)

    @abc.abstractmethod
    def _reading(self) -> AbstractContextManager[Any]:
        """A connection for reading (``execute(sql, params)`` with ``?`` placeholders, rows by
        column name); raises :class:`AuditStoreError` when the store cannot be read."""

    @abc.abstractmethod
    def _delete_before(self, cutoff: float) -> int:
        """Delete the records older than ``cutoff``; return how many."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Close the storage (the writer has stopped)."""

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
        """Write what is queued, stop the writer and release the storage (idempotent)."""
        with self._admitting:
            if self._closed:
                return
            self._closed = True
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()
        self._release()
        if self._jsonl is not None:
            with suppress(OSError):
                self._jsonl.close()
            self._jsonl = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- queries --------------------------------------------------------------------------------

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
        if limit is None:
            sql += f" {self.unlimited} OFFSET ?"
        else:
            sql += " LIMIT ? OFFSET ?"
            params.append(limit)
        params.append(offset)
        with self._reading() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [record_from_row(row) for row in rows]

    def count(self, *, up_to: int | None = None, **filters: Any) -> int:
        """How many records match ``filters`` (those of :meth:`query`, without paging); with
        ``up_to``, counting stops there (the answer is at most ``up_to``): a page of a large
        log then costs the same as a page of a small one."""
        where, params = _where(**filters)
        sql = f"SELECT COUNT(*) AS n FROM audit_records{where}"
        if up_to is not None:
            sql = f"SELECT COUNT(*) AS n FROM (SELECT 1 FROM audit_records{where} LIMIT ?) AS m"
            params.append(up_to)
        with self._reading() as conn:
            row = conn.execute(sql, params).fetchone()
        return int(row["n"])

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
        """Delete records older than the retention (``now`` minus ``retention_days``, rounded
        down to the minute); returns how many were deleted (0 without a retention).

        Rounded so that whole minutes go: the health figures' minute rows then count exactly
        the records that are left."""
        if self.retention_days is None:
            return 0
        return self._delete_before(prune_cutoff(now - self.retention_days * _DAY))

    # -- health statistics ----------------------------------------------------------------------

    def _stats(self, since: float, tool_id: str | None) -> dict[str, ToolStats]:
        # From the summary tables the writer keeps (toolgate.audit.rollup): the cost follows the
        # window's minutes and hours, not its records.
        with self._reading() as conn:
            return fetch_stats(conn, since, tool_id)

    def stats(self, tool_id: str, *, since: float) -> ToolStats:
        """The health figures of one tool since ``since`` (see :class:`ToolStats`)."""
        return self._stats(since, tool_id).get(tool_id, ToolStats())

    def all_stats(self, since: float) -> dict[str, ToolStats]:
        """The health figures of every tool with records since ``since``, by tool id."""
        return self._stats(since, None)
