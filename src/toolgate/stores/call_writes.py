"""Writes that commit with a call's audit record: one durable commit where there were two.

On the shared PostgreSQL database a call with an idempotency key ends with two durable writes
its caller waits for: the outcome the key replays (``idempotency_keys``) and the call's audit
record. Each is a commit the server flushes to disk before answering. When the gateway's audit
log is in the same database and durable (the caller is answered only once its record is
committed), the idempotency store hands its write to the log instead: the log's writer puts it
in the statement that inserts the call's record, so both are committed by one flush, and both
or neither are kept. Nothing is acknowledged earlier than before: the caller still waits for the
record's commit, which now carries the outcome too.

:class:`CallWrites` is where such writes wait, keyed by call id; a
:class:`~toolgate.stores.postgres_db.PostgresDatabase` has one, shared by the stores and the
audit logs that use that database. A write is accepted only while a durable log is attached
to take it. Every accepted write is run once and its ``then`` told how it went: with its call's
record, or on its own when the record never comes (the log dropped it, or could not write it),
when it has waited :data:`STALE_AFTER` seconds, or when the last log detaches.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

__all__ = ["STALE_AFTER", "CallWrite", "CallWrites", "WriteTaker"]

#: Seconds after which a write whose call's record has not reached a log is run on its own.
#: A record is queued microseconds after its call's write is handed over; this is a safety net
#: (a call observed by no durable log on this database), not a path calls take.
STALE_AFTER: Final = 1.0


@dataclass(slots=True)
class CallWrite:
    """One statement (sqlite3-style ``?`` placeholders) to commit with a call's record."""

    sql: str
    params: Sequence[Any]
    then: Callable[[BaseException | None], None]
    """Told once, on the writer's thread, how the write went (``None``: committed)."""
    since: float = field(default_factory=time.monotonic)


class WriteTaker(Protocol):
    """An audit log that can commit writes with its records."""

    @property
    def takes_writes(self) -> bool:
        """Whether the log commits each record before its caller is answered, now."""
        ...


class CallWrites:
    """Writes waiting for their call's audit record (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, list[CallWrite]] = {}
        self._takers: list[WriteTaker] = []

    def attach(self, taker: WriteTaker) -> None:
        """``taker`` writes the records of calls on this database from now on."""
        with self._lock:
            self._takers.append(taker)

    def detach(self, taker: WriteTaker) -> list[CallWrite]:
        """``taker`` stops; when it was the last, returns every waiting write (the caller runs
        them on their own: nobody else would)."""
        with self._lock:
            if taker in self._takers:
                self._takers.remove(taker)
            if self._takers:
                return []
            left = [write for writes in self._pending.values() for write in writes]
            self._pending.clear()
            return left

    def add(self, call_id: str, write: CallWrite) -> bool:
        """Hand ``write`` over to commit with ``call_id``'s record. False when no durable log
        takes writes now: the caller runs it itself."""
        with self._lock:
            if not any(taker.takes_writes for taker in self._takers):
                return False
            self._pending.setdefault(call_id, []).append(write)
            return True

    def take(self, call_ids: Iterable[str]) -> list[CallWrite]:
        """The writes waiting for these calls' records (each handed out once)."""
        if not self._pending:  # read without the lock: most batches carry no writes
            return []
        taken: list[CallWrite] = []
        with self._lock:
            for call_id in call_ids:
                found = self._pending.pop(call_id, None)
                if found is not None:
                    taken.extend(found)
        return taken

    def stale(self, now: float | None = None) -> list[CallWrite]:
        """The writes that have waited :data:`STALE_AFTER` seconds or more for their record."""
        if not self._pending:
            return []
        cutoff = (time.monotonic() if now is None else now) - STALE_AFTER
        taken: list[CallWrite] = []
        with self._lock:
            for call_id in [c for c, ws in self._pending.items() if ws[0].since <= cutoff]:
                taken.extend(self._pending.pop(call_id))
        return taken

    def __len__(self) -> int:
        with self._lock:
            return sum(len(writes) for writes in self._pending.values())
