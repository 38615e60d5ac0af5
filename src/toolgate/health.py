"""Health and status per tool: calls and failures over 7 days, latency, last error, and a phase.

Phases (``status.phase``, as Kubernetes-style resources name it):

* ``Failed`` — its declaration does not load (a broken tool folder);
* ``Unavailable`` — a runtime, secret or connection is missing (the registry's reason);
* ``Degraded`` — over the last hour at least ``min_calls`` calls ended, and more than
  ``degraded_threshold`` of them failed;
* ``Ready`` — otherwise.

A *failure* is an error the tool or the gateway is responsible for; the caller's own mistakes and
rules working as intended (``invalid_arguments``, ``tool_not_found``, ``forbidden``,
``rate_limited``, ``user_rejection``, ``idempotency_conflict``) are not
(:func:`toolgate.model.stats.counts_as_failure`).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from .model import CallStatus
from .model.stats import ToolStats, counts_as_failure
from .pipeline.concurrency import ToolLoad
from .pipeline.observers import FinishedCall
from .redaction import record_masker, redact, redact_text

__all__ = [
    "InMemoryStats",
    "Phase",
    "StatsSource",
    "ToolStats",
    "ToolStatus",
]

WEEK = 7 * 24 * 3600.0
HOUR = 3600.0


class Phase(StrEnum):
    """The one-word state of a tool."""

    READY = "Ready"
    DEGRADED = "Degraded"
    UNAVAILABLE = "Unavailable"
    FAILED = "Failed"


class StatsSource(Protocol):
    """Where statistics come from (the in-memory collector, or the audit log)."""

    def stats(self, tool_id: str, *, since: float) -> ToolStats:
        """The tool's statistics since ``since`` (``time.time()``)."""
        ...


@dataclass(frozen=True, slots=True)
class ToolStatus:
    """What ``toolgate tools list/show`` and the surfaces report for a tool."""

    tool_id: str
    phase: Phase
    total_calls_7d: int
    failure_rate_7d: float
    p50: float | None
    p95: float | None
    last_error: str | None
    reason: str | None = None
    """Why the phase is not ``Ready`` (or why the figures are missing)."""
    stats_error: str | None = None
    """Why the figures could not be read (the audit log is unreadable); they are zero then."""
    load: ToolLoad | None = None
    """Its calls running and waiting for a slot now, its limits and its ``busy`` refusals
    (``None``: not called since the gateway started)."""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready, with the status field names of Kubernetes-style resources."""
        return {
            "tool": self.tool_id,
            "phase": str(self.phase),
            "totalCalls7d": self.total_calls_7d,
            "failureRate7d": round(self.failure_rate_7d, 4),
            "p50": self.p50,
            "p95": self.p95,
            "lastError": self.last_error,
            "reason": self.reason,
            **({} if self.load is None else {"load": self.load.to_dict()}),
        }


def _percentile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class InMemoryStats:
    """An observer keeping the last calls of each tool in memory (bounded per tool)."""

    def __init__(self, *, per_tool: int = 10_000) -> None:
        self._per_tool = per_tool
        self._calls: dict[str, deque[tuple[float, bool, float, str | None]]] = {}
        self._lock = threading.Lock()

    def observe(self, call: FinishedCall) -> None:
        """Record one finished call (cheap; never raises)."""
        outcome = call.outcome
        if outcome.status is CallStatus.PENDING_APPROVAL:
            return  # not finished: the decided call is recorded when it ends
        failed = counts_as_failure(outcome)
        error = _redacted_error(call) if failed else None
        with self._lock:
            calls = self._calls.get(call.tool_id)
            if calls is None:
                calls = self._calls[call.tool_id] = deque(maxlen=self._per_tool)
            calls.append((call.started_at, failed, outcome.duration, error))

    def stats(self, tool_id: str, *, since: float) -> ToolStats:
        """The tool's statistics since ``since``."""
        with self._lock:
            calls = list(self._calls.get(tool_id, ()))
        recent = calls[bisect.bisect_left(calls, (since,)) :] if calls else []
        if not recent:
            return ToolStats()
        durations = sorted(duration for _, _, duration, _ in recent if duration > 0)
        errors = [(at, error) for at, failed, _, error in recent if failed]
        return ToolStats(
            total=len(recent),
            failures=len(errors),
            p50=_percentile(durations, 0.5),
            p95=_percentile(durations, 0.95),
            last_error=errors[-1][1] if errors else None,
            last_error_at=errors[-1][0] if errors else None,
        )


def _redacted_error(call: FinishedCall) -> str:
    """``[code] message`` with the tool's secrets and redacted argument values masked, as the
    audit log would record it (statistics are shown to operators and surfaces)."""
    outcome = call.outcome
    removed: set[str] = set()
    paths = call.tool.observability.redact_fields if call.tool is not None else ()
    if paths:
        redact(call.arguments, paths, prefix="args", removed=removed)
    return redact_text(f"[{outcome.code}] {outcome.message}", record_masker(call.secrets, removed))


def tool_status(
    tool_id: str,
    stats: StatsSource,
    *,
    unavailable_reason: str | None = None,
    degraded_threshold: float = 0.25,
    min_calls: int = 5,
    now: float | None = None,
) -> ToolStatus:
    """The status of a registered tool."""
    now = time.time() if now is None else now
    unreadable: str | None = None
    try:
        week = stats.stats(tool_id, since=now - WEEK)
        hour = stats.stats(tool_id, since=now - HOUR)
    except Exception as exc:  # noqa: BLE001 - any stats source failing, not only SQLite
        # An unreadable statistics store (a corrupt audit database) must not hide the tool: its
        # phase still comes from the registry, and the reason says the figures are missing.
        week = hour = ToolStats()
        unreadable = f"no statistics: {exc}"
    phase, reason = Phase.READY, unreadable
    if unavailable_reason is not None:
        phase, reason = Phase.UNAVAILABLE, unavailable_reason
    elif hour.total >= min_calls and hour.failure_rate > degraded_threshold:
        phase = Phase.DEGRADED
        reason = (
            f"{hour.failures} of the last hour's {hour.total} calls failed "
            f"(over {degraded_threshold:.0%})"
        )
    return ToolStatus(
        tool_id=tool_id,
        phase=phase,
        total_calls_7d=week.total,
        failure_rate_7d=week.failure_rate,
        p50=week.p50,
        p95=week.p95,
        last_error=week.last_error,
        reason=reason,
        stats_error=unreadable,
    )


def failed_status(tool_id: str, reason: str) -> ToolStatus:
    """The status of a declaration that does not load."""
    return ToolStatus(tool_id, Phase.FAILED, 0, 0.0, None, None, None, reason)
