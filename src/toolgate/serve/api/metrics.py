"""``GET /metrics``: the call metrics in the Prometheus text format (operators only)."""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from ..._loop_watchdog import LOOP_STALLS, LoopStalls
from ...telemetry.metrics import CallMetrics
from .deps import ERRORS, Context, Operator
from .problems import ApiProblem, HttpErrorCode

__all__ = ["METRICS_PATH", "router"]

#: Where Prometheus scrapes (its default ``metrics_path``).
METRICS_PATH = "/metrics"
#: Where an application keeps its exposition (made on the first scrape) in its state.
_EXPOSITION_STATE_KEY = "prometheus_exposition"

_TEXT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The metrics in the Prometheus text exposition format (0.0.4).",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


router = APIRouter(responses=ERRORS)
"""The ``/metrics`` route over the context's ``metrics`` (``None``: it answers ``404``)."""


def _exposition(request: Request, metrics: CallMetrics) -> tuple[Any, str]:
    """The application's Prometheus exposition of ``metrics`` and its content type, made on
    the first scrape: ``prometheus_client`` is never loaded by a server nobody scrapes."""
    state = request.app.state
    exposition: tuple[Any, str] | None = getattr(state, _EXPOSITION_STATE_KEY, None)
    if exposition is None:
        from ...telemetry.prometheus import CONTENT_TYPE, PrometheusExposition

        exposition = (PrometheusExposition(metrics), CONTENT_TYPE)
        exposition[0].registry.register(_stall_collector(LOOP_STALLS))
        setattr(state, _EXPOSITION_STATE_KEY, exposition)
    return exposition


@router.get(
    METRICS_PATH,
    summary="Metrics (Prometheus)",
    response_class=Response,
    responses=_TEXT,
)
def prometheus_metrics(who: Operator, context: Context, request: Request) -> Response:
    """Calls by tool and outcome, errors by code, the call-duration histogram, approvals
    pending, the audit queue's depth and the event-loop stalls, in the Prometheus text
    format (operators only: give the scraper an operator's key)."""
    if context.metrics is None:
        raise ApiProblem(404, HttpErrorCode.NOT_FOUND, "this server does not collect call metrics")
    exposition, content_type = _exposition(request, context.metrics)
    body: bytes = exposition.render()
    return Response(body, media_type=content_type)


def _stall_collector(stalls: LoopStalls) -> Any:
    """A ``prometheus_client`` collector of the event-loop stalls the loop watchdog counted:

    * ``toolgate_event_loop_blocked_total{tool}`` — times the loop did not answer for longer
      than ``serve.loop_blocked_after``, by the tool call running on it (``(none)``: no call);
    * ``toolgate_event_loop_blocked_seconds_total{tool}`` — how long those stalls lasted (counted
      when the loop answers again).
    """
    from prometheus_client.core import CounterMetricFamily, Metric
    from prometheus_client.registry import Collector

    class StallCollector(Collector):
        def collect(self) -> Iterator[Metric]:
            counts = sorted(stalls.snapshot().items())
            family = CounterMetricFamily(
                "toolgate_event_loop_blocked",
                "Times the event loop did not answer for longer than serve.loop_blocked_after, by "
                "the tool call running on it.",
                labels=("tool",),
            )
            seconds = CounterMetricFamily(
                "toolgate_event_loop_blocked_seconds",
                "Seconds the counted event-loop stalls lasted.",
                labels=("tool",),
            )
            for tool, (count, lasted) in counts:
                family.add_metric((tool,), count)
                seconds.add_metric((tool,), lasted)
            yield family
            yield seconds

    return StallCollector()
