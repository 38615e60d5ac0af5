"""The idempotency store: which keys are taken, by which arguments, and their outcomes.

A record is keyed by ``(tool_id, key)``. It is *live* while ``now < expires_at``: a ``running``
record (a call took the key and may be executing; it stays for the idempotency window, so that
a crash of its owner is still known to a retry: the stage decides from ``created_at`` and the
tool's lease whether the owner is gone) or a ``done`` record (its outcome is replayed until the
end of the window). An expired record counts as absent.

The claim of a key is committed before the tool runs (in a persistent store, a ``running``
record survives the crash of the process that wrote it).

:class:`MemoryIdempotencyStore` is the Python API's default;
:class:`~toolgate.stores.sqlite_idempotency.SQLiteIdempotencyStore` persists records and
coordinates processes.
"""

from __future__ import annotations

import copy
import heapq
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "IdempotencyRecord",
    "IdempotencyStatus",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
]


class IdempotencyStatus(StrEnum):
    """Where the call that took a key is."""

    RUNNING = "running"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """One key taken by one call."""

    tool_id: str
    key: str
    arguments_digest: str
    """SHA-256 of the canonical JSON of the arguments that took the key."""
    call_id: str
    """The call that took the key (and ran the tool)."""
    status: IdempotencyStatus
    created_at: float
    expires_at: float
    """The end of the idempotency window (``running`` records of earlier versions: the end of
    the owner's lease)."""
    outcome: Mapping[str, Any] | None = None
    """``done``: the stored outcome (JSON-ready)."""


class IdempotencyStore(Protocol):
    """Where idempotency records live. Every method is atomic and thread-safe."""

    def claim(self, record: IdempotencyRecord, *, now: float) -> IdempotencyRecord | None:
        """Take ``(record.tool_id, record.key)`` with ``record`` (a ``running`` one) unless a live
        record holds it: ``None`` when taken, else the live record that holds it."""
        ...

    def complete(
        self,
        tool_id: str,
        key: str,
        *,
        call_id: str,
        outcome: Mapping[str, Any],
        expires_at: float,
        if_running: bool = False,
    ) -> bool:
        """Store the outcome of the call ``call_id`` that holds the key and mark it ``done``
        until ``expires_at``. False when that call no longer holds the key. ``if_running``:
        only while the record is still ``running`` (another call settles it on behalf of an
        owner that is gone, and must not overwrite an outcome the owner stored meanwhile)."""
        ...

    def release(self, tool_id: str, key: str, *, call_id: str, if_running: bool = False) -> bool:
        """Give the key up without an outcome (the call was cut off, or is waiting for
        approval). False when ``call_id`` did not hold it (``if_running``: or its record is no
        longer ``running``)."""
        ...

    def get(self, tool_id: str, key: str, *, now: float) -> IdempotencyRecord | None:
        """The live record of this key, if any."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


class MemoryIdempotencyStore:
    """Records in a dict, for as long as the store lives (one process only).

    Outcomes are kept as given and deep-copied when replayed, so every replay gets its own copy,
    as from a persistent store, while the common path (a fresh key) pays no serialization.
    Expired records are dropped in expiry order from a heap: no scan over every live key.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (tool_id, key) → the record without its outcome, and the outcome.
        self._records: dict[
            tuple[str, str], tuple[IdempotencyRecord, Mapping[str, Any] | None]
        ] = {}
        self._expiry: list[tuple[float, tuple[str, str]]] = []

    @staticmethod
    def _full(record: IdempotencyRecord, outcome: Mapping[str, Any] | None) -> IdempotencyRecord:
        return record if outcome is None else replace(record, outcome=copy.deepcopy(outcome))

    def _expire(self, now: float) -> None:
        # Entries whose record was replaced since (a new expiry) are skipped, not deleted.
        while self._expiry and self._expiry[0][0] <= now:
            expires_at, slot = heapq.heappop(self._expiry)
            found = self._records.get(slot)
            if found is not None and found[0].expires_at == expires_at:
                del self._records[slot]

    def claim(self, record: IdempotencyRecord, *, now: float) -> IdempotencyRecord | None:
        """See :meth:`IdempotencyStore.claim`."""
        slot = (record.tool_id, record.key)
        outcome = None if record.outcome is None else copy.deepcopy(record.outcome)
        bare = record if record.outcome is None else replace(record, outcome=None)
        with self._lock:
            self._expire(now)
            found = self._records.get(slot)
            if found is not None and found[0].expires_at > now:
                return self._full(*found)
            self._records[slot] = (bare, outcome)
            heapq.heappush(self._expiry, (bare.expires_at, slot))
            return None

    def complete(
        self,
        tool_id: str,
        key: str,
        *,
        call_id: str,
        outcome: Mapping[str, Any],
        expires_at: float,
        if_running: bool = False,
    ) -> bool:
        """See :meth:`IdempotencyStore.complete`."""
        with self._lock:
            found = self._records.get((tool_id, key))
            if found is None or not _held(found[0], call_id, if_running):
                return False
            held = found[0]
            # Built directly: dataclasses.replace costs several times more on this hot path.
            done = IdempotencyRecord(
                held.tool_id,
                held.key,
                held.arguments_digest,
                held.call_id,
                IdempotencyStatus.DONE,
                held.created_at,
                expires_at,
            )
            self._records[(tool_id, key)] = (done, outcome)
            heapq.heappush(self._expiry, (expires_at, (tool_id, key)))
            return True

    def release(self, tool_id: str, key: str, *, call_id: str, if_running: bool = False) -> bool:
        """See :meth:`IdempotencyStore.release`."""
        with self._lock:
            found = self._records.get((tool_id, key))
            if found is None or not _held(found[0], call_id, if_running):
                return False
            del self._records[(tool_id, key)]
            return True

    def get(self, tool_id: str, key: str, *, now: float) -> IdempotencyRecord | None:
        """See :meth:`IdempotencyStore.get`."""
        with self._lock:
            found = self._records.get((tool_id, key))
        if found is None or found[0].expires_at <= now:
            return None
        return self._full(*found)

    def close(self) -> None:
        """Forget every record."""
        with self._lock:
            self._records.clear()
            self._expiry.clear()


def _held(record: IdempotencyRecord, call_id: str, if_running: bool) -> bool:
    """Whether ``record`` is held by ``call_id`` (and still running, when that is asked)."""
    if record.call_id != call_id:
        return False
    return not if_running or record.status is IdempotencyStatus.RUNNING
