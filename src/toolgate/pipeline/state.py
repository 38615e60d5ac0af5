"""The stage protocol and helpers to end a call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from ..call_state import CallState
from ..errors import ErrorCode
from ..model import CallOutcome, CallStatus
from ..registry import RegisteredTool

__all__ = ["CallState", "Handler", "Stage", "error_outcome"]


Handler = Callable[[CallState], Awaitable[CallOutcome]]


class Stage(Protocol):
    """One step of the pipeline. It may end the call early or pass it on with ``proceed``.

    ``suspends`` tells whether the stage may await real I/O. ``call_sync`` runs a plan without an
    event loop only when no stage in it suspends.
    """

    name: str
    suspends: bool

    def applies_to(self, entry: RegisteredTool) -> bool:
        """Whether this stage has anything to do for this tool (decided once per registration)."""
        ...

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        """Handle the call: return an outcome, usually ``await proceed(state)``."""
        ...


def error_outcome(
    state: CallState | None,
    code: ErrorCode,
    message: str,
    *,
    tool_id: str = "",
    call_id: str = "",
    duration: float = 0.0,
    detail: str | None = None,
) -> CallOutcome:
    """Build an ``error`` outcome for the current call (``tool_id``/``call_id`` when there is no
    call state yet, e.g. for an unknown tool)."""
    return CallOutcome(
        status=CallStatus.ERROR,
        tool_id=tool_id if state is None else state.tool.id,
        call_id=call_id if state is None else state.call_id,
        code=code,
        message=message,
        duration=duration,
        detail=detail,
        metadata={} if state is None else state.metadata,
    )
