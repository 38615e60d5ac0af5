"""A lone synchronous caller commits its own record: no hand-off to the writer thread and back.

A durable log answers a call once the call's record is committed. Through the writer thread that
costs two thread hand-offs on top of the commit — the caller wakes the writer, the writer wakes
the caller — which on a busy machine are a large part of a ``call_sync`` on the shared database.
:class:`CallerCommit` lets the caller write the record itself, on its own thread, when that
cannot cost anyone a shared commit:

* when a call ends, the log is durable, nothing is queued for the writer and no other caller
  is writing its own, the call is *parked* instead of queued;
* :meth:`~CallerCommit.recorded_sync` (a ``call_sync`` caller's wait for its record) takes its
  parked call back and writes it on its own thread, exactly as the writer would (the same batch
  code: redaction, the payload cap, the summary tables), then returns the settlement;
  :meth:`~CallerCommit.recorded` (an async caller's wait) hands its parked call to the writer at
  once instead: nothing blocks an event loop;
* a parked call nobody takes within :data:`PARK_TIMEOUT` seconds (a record of a call whose
  caller does not wait: a denial, say) is queued for the writer at its next wake, and
  :meth:`~CallerCommit.flush` and closing queue every parked call first and wait for the
  callers' writes in progress, so neither returns before those records are committed. Parking
  is decided, and a parked call taken back, under the lock closing takes: no call is parked
  after close() has queued the parked ones, and none is taken without being counted as a write
  in progress.

Under concurrent calls the queue is rarely empty, and calls go to the writer as before, sharing
its commits. Whoever takes a parked call out of the table writes it: the caller or the writer,
never both.
"""

from __future__ import annotations

import threading
import time
from typing import Final

from ..pipeline.observers import FinishedCall
from .log_base import UNRECORDED, AuditLog

__all__ = ["PARK_TIMEOUT", "CallerCommit"]

#: Seconds a parked call waits for its caller before the writer takes it.
PARK_TIMEOUT: Final = 0.05


class CallerCommit(AuditLog):
    """An :class:`~toolgate.audit.log_base.AuditLog` whose lone synchronous callers commit their
    own records (see the module docstring). Subclasses call :meth:`_init_caller_commit`."""

    def _init_caller_commit(self) -> None:
        self._parked: dict[str, tuple[FinishedCall, float]] = {}
        self._own = threading.Condition()
        self._own_writing = 0
        self._closing = False

    def _parkable(self) -> bool:
        return self.durable and not self._closing and not self._queue and not self._own_writing

    def observe(self, call: FinishedCall) -> None:
        """:meth:`AuditLog.observe`; a call a lone synchronous caller will write is parked."""
        try:
            # Decided and parked under the lock :meth:`close` takes to stop parking: a call is
            # either parked before close() queues the parked calls, or not parked at all.
            with self._own:
                parked = self._parkable()
                if parked:
                    self._acks.expect(call.call_id)
                    self._parked[call.call_id] = (call, time.monotonic())
        except Exception:  # noqa: BLE001 - an observer must never raise into the call
            self._lose(1)
            self._settle([call.call_id], UNRECORDED)
            return
        if not parked:
            super().observe(call)

    def recorded_sync(self, call_id: str, timeout: float) -> str | None:
        """:meth:`AuditLog.recorded_sync`, writing the call's record first when it is parked."""
        # Taken and counted as a write in progress at once: flush() and close() wait for it.
        with self._own:
            parked = self._parked.pop(call_id, None)
            if parked is not None:
                self._own_writing += 1
        if parked is not None:
            try:
                # The writer's own path for one call: a failure settles it, never raises.
                self._write([parked[0]])
            finally:
                with self._own:
                    self._own_writing -= 1
                    self._own.notify_all()
        return super().recorded_sync(call_id, timeout)

    async def recorded(self, call_id: str, timeout: float) -> str | None:
        """:meth:`AuditLog.recorded`: an async caller never writes on its event loop; its parked
        call goes to the writer at once."""
        with self._own:
            parked = self._parked.pop(call_id, None)
            if parked is not None:
                self._queue.append(parked[0])
        if parked is not None:
            self._wake.set()
        return await super().recorded(call_id, timeout)

    def _unpark(self, older_than: float | None = None) -> None:
        """Queue the parked calls (those parked ``older_than`` seconds ago or more) for the
        writer."""
        if not self._parked:  # read without the lock: mostly nothing is parked
            return
        now = time.monotonic()
        queued = False
        with self._own:
            for call_id, (call, at) in list(self._parked.items()):
                if older_than is not None and now - at < older_than:
                    continue
                del self._parked[call_id]
                self._queue.append(call)
                queued = True
        if queued:
            self._wake.set()

    def _await_own_writes(self, timeout: float | None) -> bool:
        """Wait until no caller is writing its own record; False on timeout."""
        with self._own:
            return self._own.wait_for(lambda: not self._own_writing, timeout)

    def _after_batch(self) -> None:
        super()._after_batch()
        self._unpark(PARK_TIMEOUT)

    def flush(self, timeout: float | None = None) -> bool:
        """:meth:`AuditLog.flush`, parked calls and the callers' writes in progress included."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._unpark()
        if not super().flush(timeout):
            return False
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._await_own_writes(left)

    def close(self) -> None:
        """:meth:`AuditLog.close`, once the parked calls are queued and the callers' writes in
        progress are committed."""
        with self._own:
            self._closing = True  # no call is parked from now on (observe() decides under _own)
        self._unpark()
        self._await_own_writes(None)
        super().close()
