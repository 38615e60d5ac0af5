"""Health figures of a tool, and which outcomes count as the tool failing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..errors import ErrorCode
from .call import CallOutcome, CallStatus

__all__ = ["NOT_TOOL_FAILURES", "ToolStats", "counts_as_failure"]

#: Error codes that are the *caller's* doing (or a rule working as intended, or the caller
#: going away), not the tool failing: they count in ``total`` but never in ``failures`` nor
#: ``last_error``. Every other error (``tool_error``, ``timeout``, ``invalid_output``,
#: ``crashed``, ``unavailable``, ``security_blocked``, and an error without a code) is a tool
#: failure.
NOT_TOOL_FAILURES: Final[frozenset[str]] = frozenset(
    {
        ErrorCode.INVALID_ARGUMENTS.value,
        ErrorCode.TOOL_NOT_FOUND.value,
        ErrorCode.FORBIDDEN.value,
        ErrorCode.RATE_LIMITED.value,
        ErrorCode.BUSY.value,
        ErrorCode.CANCELLED.value,
        ErrorCode.USER_REJECTION.value,
        ErrorCode.IDEMPOTENCY_CONFLICT.value,
    }
)


def counts_as_failure(outcome: CallOutcome) -> bool:
    """True for errors the tool (or the gateway) is responsible for."""
    return outcome.status is CallStatus.ERROR and (
        outcome.code is None or outcome.code.value not in NOT_TOOL_FAILURES
    )


@dataclass(frozen=True, slots=True)
class ToolStats:
    """Health figures of one tool over a window (``since`` to now).

    * ``total``: finished calls (every status but ``pending_approval``);
    * ``failures``: errors except those in :data:`NOT_TOOL_FAILURES` (the caller's mistakes and
      rules working as intended);
    * ``p50`` / ``p95``: nearest-rank percentiles of the duration (seconds) of calls that ran —
      successes and failures — or ``None`` when there were none;
    * ``last_error`` / ``last_error_at``: ``[code] message`` (redacted) and time of the newest
      failure.
    """

    total: int = 0
    failures: int = 0
    p50: float | None = None
    p95: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    last_error_code: str | None = None

    @property
    def failure_rate(self) -> float:
        """``failures / total`` (0 without calls)."""
        return self.failures / self.total if self.total else 0.0
