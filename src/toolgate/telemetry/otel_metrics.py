"""The OpenTelemetry metrics of tool calls: the same figures as the Prometheus endpoint.

* ``toolgate.calls`` (counter, ``{call}``) — by ``gen_ai.tool.name`` and ``toolgate.outcome``;
* ``toolgate.call.errors`` (counter, ``{call}``) — by ``gen_ai.tool.name`` and ``error.type``
  (the error code);
* ``toolgate.call.duration`` (histogram, ``s``) — by ``gen_ai.tool.name``, with the buckets of
  :data:`~toolgate.telemetry.metrics.DURATION_BUCKETS`;
* ``toolgate.approvals.pending`` and ``toolgate.audit.queue.depth`` (gauges), read when the
  metrics are exported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..pipeline.observers import FinishedCall
from .metrics import DURATION_BUCKETS, Gauges, tool_label

__all__ = ["OtelCallMetrics"]

log = logging.getLogger("toolgate.telemetry")


def _reader(
    name: str, read: Callable[[], int]
) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(options: CallbackOptions) -> Iterable[Observation]:
        try:
            return [Observation(read())]
        except Exception:  # a failing source skips one export
            log.warning("cannot read the gauge %s", name, exc_info=True)
            return []

    return callback


class OtelCallMetrics:
    """Records every finished call in OpenTelemetry instruments (a call observer)."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self._calls = meter.create_counter(
            "toolgate.calls", unit="{call}", description="Finished tool calls by outcome."
        )
        self._errors = meter.create_counter(
            "toolgate.call.errors", unit="{call}", description="Failed tool calls by error code."
        )
        self._duration = meter.create_histogram(
            "toolgate.call.duration",
            unit="s",
            description="Duration of tool calls, from the gateway receiving them to their outcome.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )

    def observe(self, call: FinishedCall) -> None:
        """Count ``call`` and record its duration."""
        tool = tool_label(call)
        outcome = call.outcome
        self._calls.add(1, {"gen_ai.tool.name": tool, "toolgate.outcome": outcome.status.value})
        if outcome.code is not None:
            self._errors.add(1, {"gen_ai.tool.name": tool, "error.type": str(outcome.code)})
        self._duration.record(max(0.0, time.time() - call.started_at), {"gen_ai.tool.name": tool})

    def bind(self, gauges: Gauges) -> None:
        """Report the gauges from ``gauges``."""
        self.meter.create_observable_gauge(
            "toolgate.approvals.pending",
            callbacks=[_reader("toolgate.approvals.pending", gauges.approvals_pending)],
            unit="{request}",
            description="Approval requests waiting for a decision.",
        )
        self.meter.create_observable_gauge(
            "toolgate.audit.queue.depth",
            callbacks=[_reader("toolgate.audit.queue.depth", gauges.audit_queue_depth)],
            unit="{call}",
            description="Finished calls queued for the audit log's writer.",
        )
