"""The idempotency store: which keys are taken, by which arguments, and their outcomes.

A record is keyed by ``(tool_id, key)``. It is *live* while ``now < expires_at``: a ``running``
record (a call is executing under the key; ``expires_at`` is its lease, after which a crashed
owner's key can be taken again) or a ``done`` record (its outcome is replayed until the end of
the idempotency window). An expired record counts as absent.

:class:`MemoryIdempotencyStore` is the Python API's default; :class:`~toolgate.stores.
idempotency_sqlite.SQLiteIdempotencyStore` persists records and coordinates processes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final, Protocol

from .._json import canonical_json

__all__ = [
    "IdempotencyRecord",
    "IdempotencyStatus",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
]

#: Claims between two sweeps of expired records.
_SWEEP_EVERY: Final = 1024


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
    """``running``: the end of the owner's lease; ``done``: the end of the window."""
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
    ) -> bool:
        """Store the outcome of the call ``call_id`` that holds the key and mark it ``done``
        until ``expires_at``. False when that call no longer holds the key."""
        ...

    def release(self, tool_id: str, key: str, *, call_id: str) -> bool:
        """Give the key up without an outcome (the call was cut off, or is waiting for
        approval). False when ``call_id`` did not hold it."""
        ...

    def get(self, tool_id: str, key: str, *, now: float) -> IdempotencyRecord | None:
        """The live record of this key, if any."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


class MemoryIdempotencyStore:
    """Records in a dict, for as long as the store lives (one process only).

    Outcomes are kept as JSON text, so every replay gets its own copy, as from a persistent
    store.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (tool_id, key) → the record without its outcome, and the outcome's JSON text.
        self._records: dict[tuple[str, str], tuple[IdempotencyRecord, str | None]] = {}
        self._claims = 0

    @staticmethod
    def _full(record: IdempotencyRecord, outcome: str | None) -> IdempotencyRecord:
        return record if outcome is None else replace(record, outcome=json.loads(outcome))

    def claim(self, record: IdempotencyRecord, *, now: float) -> IdempotencyRecord | None:
        """See :meth:`IdempotencyStore.claim`."""
        slot = (record.tool_id, record.key)
        text = None if record.outcome is None else canonical_json(record.outcome)
        with self._lock:
            found = self._records.get(slot)
            if found is not None and found[0].expires_at > now:
                return self._full(*found)
            self._records[slot] = (replace(record, outcome=None), text)
            self._claims += 1
            if self._claims % _SWEEP_EVERY == 0:
                for stale in [k for k, (r, _) in self._records.items() if r.expires_at <= now]:
                    del self._records[stale]
            return None

    def complete(
        self,
        tool_id: str,
        key: str,
        *,
        call_id: str,
        outcome: Mapping[str, Any],
        expires_at: float,
    ) -> bool:
        """See :meth:`IdempotencyStore.complete`."""
        text = canonical_json(outcome)
        with self._lock:
            found = self._records.get((tool_id, key))
            if found is None or found[0].call_id != call_id:
                return False
            done = replace(found[0], status=IdempotencyStatus.DONE, expires_at=expires_at)
            self._records[(tool_id, key)] = (done, text)
            return True

    def release(self, tool_id: str, key: str, *, call_id: str) -> bool:
        """See :meth:`IdempotencyStore.release`."""
        with self._lock:
            found = self._records.get((tool_id, key))
            if found is None or found[0].call_id != call_id:
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
