"""The audit stages: no unaudited side effects.

:class:`AuditGuardStage` (first in the pipeline) refuses tools whose side-effect level is above
``local_write`` at once while the audit log is known to be down (``unavailable``); read-only and
local tools keep working, and the loss is counted by the log.

Its health flag lags: it turns false only after a write failed. So :class:`AuditReservationStage`
(last, right before the tool runs) makes a real round trip to the audit store for the same tools
— the tool runs only when the store answers that it can write now; otherwise the call ends
``unavailable`` with the same message and the tool never runs.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ..errors import ErrorCode
from ..model import CallOutcome, SideEffect
from ..registry import RegisteredTool
from .state import CallState, Handler, error_outcome

__all__ = ["AuditGuardStage", "AuditHealth", "AuditReservationStage", "AuditReserver"]

_MAY_RUN_UNAUDITED = frozenset({SideEffect.READ_ONLY, SideEffect.LOCAL_WRITE})


class AuditHealth(Protocol):
    """An audit log that can tell whether it is writing."""

    @property
    def healthy(self) -> bool:
        """False while the log cannot write its records."""
        ...


class AuditReserver(Protocol):
    """An audit log that can check, with a round trip, that it can write now."""

    def reserve(self) -> str | None:
        """``None`` when the store can write now, else why not."""
        ...


def _refused(state: CallState) -> CallOutcome:
    return error_outcome(
        state,
        ErrorCode.UNAVAILABLE,
        f"Tool {state.tool.id} is unavailable: the audit log cannot record calls right now, "
        f"and a {state.tool.side_effect} tool never runs unaudited. Try again later or tell "
        "the user.",
    )


def _audited(entry: RegisteredTool) -> bool:
    return entry.tool.side_effect not in _MAY_RUN_UNAUDITED


class AuditGuardStage:
    """Refuses calls with external effects while the audit log is down."""

    name = "audit_guard"
    suspends = False

    def __init__(self, audit: AuditHealth) -> None:
        self.audit = audit

    def applies_to(self, entry: RegisteredTool) -> bool:
        return _audited(entry)

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        if self.audit.healthy:
            return await proceed(state)
        return _refused(state)


class AuditReservationStage:
    """Right before a tool with external effects runs: the audit store must answer that it can
    write, or the tool does not run."""

    name = "audit_reservation"
    # A round trip to the store (a SQLite lock taken and let go, or one PostgreSQL statement),
    # made in a thread of its own; an inline call (call_sync) makes it in the caller's thread.
    suspends = False

    def __init__(self, audit: AuditReserver) -> None:
        self.audit = audit

    def applies_to(self, entry: RegisteredTool) -> bool:
        return _audited(entry)

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        if state.inline:  # call_sync without a loop: the caller's own thread may wait
            refused = self.audit.reserve()
        else:
            # Never on the serving loop: a store that makes us wait (a SQLite lock held by
            # another process, up to its busy timeout) must hold this call only, not every
            # request of the server.
            refused = await asyncio.get_running_loop().run_in_executor(
                _reservations(), self.audit.reserve
            )
        if refused is None:
            return await proceed(state)
        state.refused_before_run = True
        return _refused(state)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _reservations() -> ThreadPoolExecutor:
    """The threads that make reservations (started on first use, shared by every gateway)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(4, thread_name_prefix="toolgate-audit-reserve")
    return _pool
