"""Answering a call only once its audit record is kept: the gateway's side of a durable log.

Imports nothing heavy (no sqlite3, no psycopg): the gateway imports it at start.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Final

from ..model import CallOutcome

if TYPE_CHECKING:
    from .log_base import AuditLog

__all__ = ["ACK_TIMEOUT", "acknowledged", "acknowledged_sync"]

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


async def acknowledged(log: AuditLog | None, outcome: CallOutcome) -> CallOutcome:
    """``outcome`` once a durable ``log`` has committed its record; when that fails, the outcome
    says so in ``metadata.audit`` (``"not recorded: …"``). Other logs return it at once."""
    if log is None or not log.durable:
        return outcome
    return _unrecorded(outcome, await log.recorded(outcome.call_id, ACK_TIMEOUT))


def acknowledged_sync(log: AuditLog | None, outcome: CallOutcome) -> CallOutcome:
    """:func:`acknowledged` for a thread without an event loop (it blocks)."""
    if log is None or not log.durable:
        return outcome
    return _unrecorded(outcome, log.recorded_sync(outcome.call_id, ACK_TIMEOUT))
