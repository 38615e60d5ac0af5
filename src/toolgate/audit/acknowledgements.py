"""Acknowledgements: which calls' audit records are committed, and answering a call only once
its record is kept (the bookkeeping behind a durable audit log, and the gateway's side of it).

The log's writer settles each call (committed, or why not); the gateway waits for the settlement
of the call it is about to answer (:meth:`Acknowledgements.wait`). A call whose record never
reached the log (the queue was full, the log closed) is settled at once with the reason, and a
call the log never heard of counts as not recorded: a caller is told "recorded" only when it is.

The reasons given here reach the caller (``metadata.audit`` of the outcome), so they never name
the database; the details are in the log's ``last_error`` for operators.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from ..model import CallOutcome

__all__ = ["ACK_TIMEOUT", "Acknowledgements", "acknowledged", "acknowledged_sync"]

log = logging.getLogger("toolgate.audit")

#: Seconds a settled acknowledgement nobody asked for is kept (a denial's record, say).
_KEEP: Final = 30.0

#: What a caller is told about a call this log never received.
NEVER_RECEIVED: Final = "the audit log never received it"


class _Ack:
    __slots__ = ("callbacks", "done", "reason", "settled_at")

    def __init__(self) -> None:
        self.done = False
        self.reason: str | None = None
        self.settled_at = 0.0
        self.callbacks: list[Callable[[], None]] = []


class Acknowledgements:
    """Per call id: pending, or settled as committed (``None``) or not (a reason)."""

    def __init__(self) -> None:
        self._acks: dict[str, _Ack] = {}
        self._lock = threading.Lock()

    def expect(self, call_id: str) -> None:
        """``call_id``'s record is queued: its settlement will come from the writer."""
        with self._lock:
            self._acks[call_id] = _Ack()

    def refuse(self, call_id: str, reason: str) -> None:
        """``call_id``'s record was dropped before it was queued: settled now, with ``reason``."""
        with self._lock:
            self._acks[call_id] = _Ack()
        self.settle([call_id], reason)

    def settle(self, call_ids: Iterable[str], reason: str | None) -> None:
        """Settle the pending ones of ``call_ids``: committed (``reason`` is ``None``) or not."""
        now = time.monotonic()
        wake: list[Callable[[], None]] = []
        with self._lock:
            for call_id in call_ids:
                ack = self._acks.get(call_id)
                if ack is None or ack.done:
                    continue
                ack.done, ack.reason, ack.settled_at = True, reason, now
                wake.extend(ack.callbacks)
            # Forget old settled acknowledgements nobody asked for (dicts keep insertion order).
            while self._acks:
                oldest = next(iter(self._acks.values()))
                if not oldest.done or now - oldest.settled_at < _KEEP:
                    break
                del self._acks[next(iter(self._acks))]
        # Outside the lock, each on its own: a waiter whose event loop is gone must not keep
        # the others waiting (or fail the writer).
        for callback in wake:
            try:
                callback()
            except Exception:
                log.debug("an audit acknowledgement's waiter could not be woken", exc_info=True)

    def _register(self, call_id: str, callback: Callable[[], None]) -> _Ack | None:
        with self._lock:
            ack = self._acks.get(call_id)
            if ack is not None and not ack.done:
                ack.callbacks.append(callback)
            return ack

    def _take(self, call_id: str, ack: _Ack) -> str | None:
        with self._lock:
            self._acks.pop(call_id, None)
        return ack.reason

    async def wait(self, call_id: str, timeout: float) -> str | None:
        """Wait up to ``timeout`` seconds for ``call_id``: ``None`` when its record is
        committed, else why it is not."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(_resolve, waiter)

        ack = self._register(call_id, wake)
        if ack is None:
            return NEVER_RECEIVED
        if not ack.done:
            try:
                await asyncio.wait_for(asyncio.shield(waiter), timeout)
            except TimeoutError:
                self._take(call_id, ack)
                return _late(timeout)
        return self._take(call_id, ack)

    def wait_sync(self, call_id: str, timeout: float) -> str | None:
        """:meth:`wait` for a thread without an event loop (it blocks)."""
        event = threading.Event()
        ack = self._register(call_id, event.set)
        if ack is None:
            return NEVER_RECEIVED
        if not ack.done and not event.wait(timeout):
            self._take(call_id, ack)
            return _late(timeout)
        return self._take(call_id, ack)


def _late(timeout: float) -> str:
    return f"the audit log did not commit it within {timeout:g} s"


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


# --- the gateway's side: answering a call once its record is kept ----------------------------


class RecordingLog(Protocol):
    """What the gateway asks of an audit log before it answers (an
    :class:`~toolgate.audit.log_base.AuditLog`)."""

    durable: bool

    async def recorded(self, call_id: str, timeout: float) -> str | None: ...

    def recorded_sync(self, call_id: str, timeout: float) -> str | None: ...


#: Seconds the gateway waits for a durable log to commit a call's record before it answers
#: (longer than the shared database's pool and statement timeouts, so their errors arrive first).
ACK_TIMEOUT: Final = 10.0


def _unrecorded(outcome: CallOutcome, reason: str | None) -> CallOutcome:
    if reason is None:
        return outcome
    # The call ended as it ended; its caller must also hear that no record of it was kept.
    return dataclasses.replace(
        outcome, metadata={**outcome.metadata, "audit": f"not recorded: {reason}"}
    )


async def acknowledged(log: RecordingLog | None, outcome: CallOutcome) -> CallOutcome:
    """``outcome`` once a durable ``log`` has committed its record; when that fails, the outcome
    says so in ``metadata.audit`` (``"not recorded: …"``). Other logs return it at once."""
    if log is None or not log.durable:
        return outcome
    return _unrecorded(outcome, await log.recorded(outcome.call_id, ACK_TIMEOUT))


def acknowledged_sync(log: RecordingLog | None, outcome: CallOutcome) -> CallOutcome:
    """:func:`acknowledged` for a thread without an event loop (it blocks)."""
    if log is None or not log.durable:
        return outcome
    return _unrecorded(outcome, log.recorded_sync(outcome.call_id, ACK_TIMEOUT))
