"""The observer seam: every finished call, whatever its outcome, is shown to the observers.

Audit logs and health statistics are observers. ``observe`` runs on the caller's path, so it
must be cheap and must not raise: an observer hands the record to its own queue and returns.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..call_state import new_call_id
from ..model import ApprovalRequest, CallOutcome, Tool

__all__ = ["CallObserver", "FinishedCall", "decided_call"]


@dataclass(frozen=True, slots=True)
class FinishedCall:
    """One call as it ended: who called what, with which arguments, and how it ended."""

    call_id: str
    tool_id: str
    """The resolved tool's id, or the requested name when no tool matched."""
    tool: Tool | None
    """The tool's definition (``None`` for ``tool_not_found``)."""
    arguments: Mapping[str, Any]
    agent: str | None
    session_id: str | None
    workspace: str | None
    started_at: float
    """``time.time()`` when the call began."""
    outcome: CallOutcome
    secrets: tuple[str, ...] = ()
    """Secret values the tool received: redacted from everything recorded."""
    full_content: Any = None
    """The whole result when it was spilled to a file (``outcome.content`` is then a preview):
    the values at the tool's redacted ``result.*`` paths are masked in the preview too."""


class CallObserver(Protocol):
    """Receives every finished call."""

    def observe(self, call: FinishedCall) -> None:
        """Take note of ``call``; cheap, and never raises."""
        ...


def decided_call(
    request: ApprovalRequest, outcome: CallOutcome, tool: Tool | None, secrets: tuple[str, ...]
) -> FinishedCall:
    """The record of a pending call that ended outside the pipeline (a person denied it)."""
    call_id = new_call_id()
    return FinishedCall(
        call_id=call_id,
        tool_id=request.tool_id,
        tool=tool,
        arguments=request.arguments,
        agent=request.agent,
        session_id=request.session_id,
        workspace=request.workspace,
        started_at=time.time(),
        outcome=dataclasses.replace(outcome, call_id=call_id),
        secrets=secrets,
    )
