"""The Prometheus text exposition of :class:`~toolgate.telemetry.metrics.CallMetrics`.

Written with ``prometheus_client`` (imported by this module only, which ``toolgate serve`` loads
for its ``/metrics`` route): a collector turns a snapshot of the counters into metric families at
scrape time, so calls never touch the library. The names are those the OpenTelemetry metrics get
in Prometheus (``toolgate.calls`` → ``toolgate_calls_total``…):

* ``toolgate_calls_total{tool, outcome}`` — finished calls (``ok``, ``error``,
  ``pending_approval``);
* ``toolgate_call_errors_total{tool, code}`` — failed calls by error code;
* ``toolgate_call_duration_seconds{tool}`` — a histogram of call durations;
* ``toolgate_approvals_pending`` and ``toolgate_audit_queue_depth`` — gauges;
* ``toolgate_tool_calls_running{tool}``, ``toolgate_tool_calls_waiting{tool}`` (gauges) and
  ``toolgate_tool_busy_total{tool}`` — each tool's concurrency slots, queue and ``busy`` refusals.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .metrics import DURATION_BUCKETS, CallMetrics

__all__ = ["CONTENT_TYPE", "PrometheusExposition"]

#: The content type of the text exposition format.
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

log = logging.getLogger("toolgate.telemetry")


def _gauge(name: str, documentation: str, read: Callable[[], int]) -> GaugeMetricFamily | None:
    try:
        value = read()
    except Exception:  # a failing source leaves its gauge out
        log.warning("cannot read the gauge %s", name, exc_info=True)
        return None
    return GaugeMetricFamily(name, documentation, value=value)


class _CallCollector(Collector):
    """Yields the metric families of one :class:`CallMetrics`."""

    def __init__(self, metrics: CallMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        calls, errors, durations = self.metrics.snapshot()
        family = CounterMetricFamily(
            "toolgate_calls", "Finished tool calls by outcome.", labels=("tool", "outcome")
        )
        for (tool, outcome), count in sorted(calls.items()):
            family.add_metric((tool, outcome), count)
        yield family
        family = CounterMetricFamily(
            "toolgate_call_errors", "Failed tool calls by error code.", labels=("tool", "code")
        )
        for (tool, code), count in sorted(errors.items()):
            family.add_metric((tool, code), count)
        yield family
        histogram = HistogramMetricFamily(
            "toolgate_call_duration_seconds",
            "Duration of tool calls, from the gateway receiving them to their outcome.",
            labels=("tool",),
            unit="seconds",
        )
        bounds = [*(repr(float(b)) for b in DURATION_BUCKETS), "+Inf"]
        for tool, values in sorted(durations.items()):
            cumulative: list[tuple[str, float]] = []
            running = 0
            for bound, count in zip(bounds, values.counts, strict=True):
                running += count
                cumulative.append((bound, running))
            histogram.add_metric((tool,), cumulative, values.total)
        yield histogram
        gauges = self.metrics.gauges
        for gauge in (
            _gauge(
                "toolgate_approvals_pending",
                "Approval requests waiting for a decision.",
                gauges.approvals_pending,
            ),
            _gauge(
                "toolgate_audit_queue_depth",
                "Finished calls queued for the audit log's writer.",
                gauges.audit_queue_depth,
            ),
        ):
            if gauge is not None:
                yield gauge
        yield from _tool_load(gauges.tool_load)


def _tool_load(read: Callable[[], Mapping[str, tuple[int, int, int]]]) -> Iterator[Metric]:
    """The per-tool concurrency figures (see :meth:`ConcurrencyStage.loads`)."""
    try:
        loads = read()
    except Exception:  # a failing source leaves its metrics out
        log.warning("cannot read the tools' load", exc_info=True)
        return
    running = GaugeMetricFamily(
        "toolgate_tool_calls_running", "Calls of a tool running now.", labels=("tool",)
    )
    waiting = GaugeMetricFamily(
        "toolgate_tool_calls_waiting",
        "Calls of a tool waiting for one of its concurrency slots now.",
        labels=("tool",),
    )
    busy = CounterMetricFamily(
        "toolgate_tool_busy",
        "Calls of a tool refused busy (its queue was full, or a call waited past its timeout).",
        labels=("tool",),
    )
    for tool, (now_running, now_waiting, refused) in sorted(loads.items()):
        running.add_metric((tool,), now_running)
        waiting.add_metric((tool,), now_waiting)
        busy.add_metric((tool,), refused)
    yield running
    yield waiting
    yield busy


class PrometheusExposition:
    """Renders :class:`CallMetrics` in the Prometheus text format (one registry of its own, not
    ``prometheus_client``'s global one)."""

    def __init__(self, metrics: CallMetrics) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_CallCollector(metrics))

    def render(self) -> bytes:
        """The current metrics as the body of a ``/metrics`` response."""
        return generate_latest(self.registry)
