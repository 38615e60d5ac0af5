"""The background writer of the audit log: drains the queue in batches, prunes, appends JSONL.

:class:`BatchWriter` is mixed into :class:`~toolgate.audit.sqlite_log.SQLiteAuditLog`, which
owns the state it uses and the database write itself (``_write_records``).
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from contextlib import suppress
from pathlib import Path
from typing import IO

from ..pipeline.observers import FinishedCall
from .payload_cap import PayloadCap
from .record import AuditRecord, record_from
from .sqlite_rows import dump
from .sqlite_schema import ensure_private_file

__all__ = ["BatchWriter", "Flush"]


class Flush:
    """A marker in the queue: set once everything queued before it is written."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = threading.Event()


class BatchWriter(abc.ABC):
    """The writer thread's loop, mixed into the audit log (which supplies the storage)."""

    jsonl_path: Path | None
    retention_days: float | None
    batch_size: int
    flush_interval: float
    prune_interval: float
    _queue: deque[FinishedCall | Flush]
    _wake: threading.Event
    _jsonl: IO[str] | None
    _stopping: bool
    payload_cap: PayloadCap = PayloadCap()
    """How large a payload a record keeps (:mod:`.payload_cap`); the gateway sets it from
    ``audit.max_payload_bytes`` / ``audit.keep_full_payloads``."""

    @abc.abstractmethod
    def prune(self, now: float) -> int:
        """Delete records older than the retention; return how many."""

    def _prune_due(self, now: float) -> None:
        """The retention is due: prune (on the writer's thread; a log whose prune may take
        long runs it elsewhere, so that no batch waits for it)."""
        with suppress(Exception):
            self.prune(now)

    @abc.abstractmethod
    def _lose(self, count: int) -> None:
        """Count records that were dropped."""

    @abc.abstractmethod
    def _fail(self, what: str, exc: BaseException) -> None:
        """Record that writing failed (the log turns unhealthy)."""

    @abc.abstractmethod
    def _write_records(self, records: list[AuditRecord]) -> None:
        """Write one batch in one transaction."""

    def _run(self) -> None:
        next_prune = 0.0
        while True:
            if self.retention_days is not None and time.monotonic() >= next_prune:
                next_prune = time.monotonic() + self.prune_interval
                self._prune_due(time.time())
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
            if isinstance(item, Flush):
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
                # Redacted first, then capped: a full payload kept in a file is the redacted one.
                records.append(self.payload_cap.apply(record_from(call)))
            except Exception as exc:  # noqa: BLE001 - a bad call loses its record, not the batch
                self._lose(1)
                self._fail(f"cannot record call {call.call_id!r}", exc)
        if records:
            self._write_records(records)

    def _append_jsonl(self, records: list[AuditRecord]) -> bool:
        if self.jsonl_path is None:
            return True
        try:
            if self._jsonl is None:
                ensure_private_file(self.jsonl_path)
                self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
            self._jsonl.write("".join(dump(r.to_dict()) + "\n" for r in records))
            self._jsonl.flush()
        except (OSError, ValueError, TypeError) as exc:
            self._fail(f"cannot append to {self.jsonl_path}", exc)
            if self._jsonl is not None:
                with suppress(OSError):
                    self._jsonl.close()
                self._jsonl = None
            return False
        return True
