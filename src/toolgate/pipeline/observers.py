"""The observer seam: every finished call, whatever its outcome, is shown to the observers.

Audit logs and health statistics are observers. ``observe`` runs on the caller's path, so it
must be cheap and must not raise: an observer hands the record to its own queue and returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..model import CallOutcome, Tool

__all__ = ["CallObserver", "FinishedCall"]


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


class CallObserver(Protocol):
    """Receives every finished call."""

    def observe(self, call: FinishedCall) -> None:
        """Take note of ``call``; cheap, and never raises."""
        ...
