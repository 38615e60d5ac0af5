"""The call metrics kept in process, for the Prometheus ``/metrics`` endpoint.

:class:`CallMetrics` is a call observer: per tool it counts calls by outcome, errors by code,
and call durations in a fixed-bucket histogram. It holds plain integers under a lock (``observe``
runs on the caller's path, possibly from several threads) and imports nothing; the exposition
format is written by :mod:`toolgate.telemetry.prometheus` at scrape time.

Tool labels are the ids of registered tools only: a call naming an unknown tool is counted under
:data:`UNKNOWN_TOOL`, so that callers cannot grow the label set without bound.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from ..pipeline.observers import FinishedCall

__all__ = ["DURATION_BUCKETS", "UNKNOWN_TOOL", "CallMetrics", "Gauges", "Histogram"]

#: Upper bounds (seconds) of the call-duration buckets, shared with the OpenTelemetry histogram:
#: from in-process Python tools (tens of µs) to slow scripts and remote tools (a minute).
DURATION_BUCKETS: Final = (
    0.0001,
    0.0005,
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

#: The tool label of calls that named no registered tool.
UNKNOWN_TOOL: Final = "(unknown)"


@dataclass(frozen=True)
class Gauges:
    """Where the current values of the gauges come from (read at scrape or export time)."""

    approvals_pending: Callable[[], int] = lambda: 0
    """Approval requests waiting for a decision."""
    audit_queue_depth: Callable[[], int] = lambda: 0
    """Finished calls queued for the audit log's writer."""
    tool_load: Callable[[], Mapping[str, tuple[int, int, int]]] = dict
    """Per tool that was called: calls running now, calls waiting for a slot now, and calls
    refused ``busy`` since the gateway started."""


@dataclass
class Histogram:
    """Counts per bucket (the last is ``+Inf``), the sum and the count, of one tool."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    total: float = 0.0
    count: int = 0


def tool_label(call: FinishedCall) -> str:
    """The tool a call is counted under (see :data:`UNKNOWN_TOOL`)."""
    return call.tool_id if call.tool is not None else UNKNOWN_TOOL


class CallMetrics:
    """Counts every finished call (a call observer); read by the ``/metrics`` endpoint."""

    def __init__(self, gauges: Gauges | None = None) -> None:
        self.gauges = gauges or Gauges()
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], int] = {}
        self._errors: dict[tuple[str, str], int] = {}
        self._durations: dict[str, Histogram] = {}

    def observe(self, call: FinishedCall) -> None:
        """Count ``call``: its outcome, its error code, its duration since it began."""
        duration = max(0.0, time.time() - call.started_at)
        tool = tool_label(call)
        outcome = call.outcome
        status = outcome.status.value
        code = None if outcome.code is None else str(outcome.code)
        bucket = bisect.bisect_left(DURATION_BUCKETS, duration)
        with self._lock:
            key = (tool, status)
            self._calls[key] = self._calls.get(key, 0) + 1
            if code is not None:
                error = (tool, code)
                self._errors[error] = self._errors.get(error, 0) + 1
            histogram = self._durations.get(tool)
            if histogram is None:
                histogram = self._durations[tool] = Histogram()
            histogram.counts[bucket] += 1
            histogram.total += duration
            histogram.count += 1

    def snapshot(
        self,
    ) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int], dict[str, Histogram]]:
        """Copies of the counters: calls by (tool, outcome), errors by (tool, code), and the
        duration histogram by tool."""
        with self._lock:
            histograms = {
                tool: Histogram(list(h.counts), h.total, h.count)
                for tool, h in self._durations.items()
            }
            return dict(self._calls), dict(self._errors), histograms
