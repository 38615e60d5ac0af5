"""The AuditGuard stage: no unaudited side effects.

If the audit log cannot write, tools whose side-effect level is above ``local_write`` fail closed
(``unavailable``); read-only and local tools keep working, and the loss is counted by the log.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import ErrorCode
from ..model import CallOutcome, SideEffect
from ..registry import RegisteredTool
from .state import CallState, Handler, error_outcome

__all__ = ["AuditGuardStage", "AuditHealth"]

_MAY_RUN_UNAUDITED = frozenset({SideEffect.READ_ONLY, SideEffect.LOCAL_WRITE})


class AuditHealth(Protocol):
    """An audit log that can tell whether it is writing."""

    @property
    def healthy(self) -> bool:
        """False while the log cannot write its records."""
        ...


class AuditGuardStage:
    """Refuses calls with external effects while the audit log is down."""

    name = "audit_guard"
    suspends = False

    def __init__(self, audit: AuditHealth) -> None:
        self.audit = audit

    def applies_to(self, entry: RegisteredTool) -> bool:
        return entry.tool.side_effect not in _MAY_RUN_UNAUDITED

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        if self.audit.healthy:
            return await proceed(state)
        return error_outcome(
            state,
            ErrorCode.UNAVAILABLE,
            f"Tool {state.tool.id} is unavailable: the audit log cannot record calls right now, "
            f"and a {state.tool.side_effect} tool never runs unaudited. Try again later or tell "
            "the user.",
        )
