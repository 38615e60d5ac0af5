"""``GET /metrics``: the call metrics in the Prometheus text format (operators only)."""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.responses import Response

from ...telemetry.metrics import CallMetrics
from .deps import ERRORS, ApiContext, Caller, caller_dependencies
from .problems import ApiProblem, HttpErrorCode

__all__ = ["METRICS_PATH", "metrics_router"]

#: Where Prometheus scrapes (its default ``metrics_path``).
METRICS_PATH = "/metrics"

_TEXT: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The metrics in the Prometheus text exposition format (0.0.4).",
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


def metrics_router(context: ApiContext, metrics: CallMetrics | None) -> APIRouter:
    """The ``/metrics`` route over ``metrics`` (``None``: it answers ``404``)."""
    _, operator = caller_dependencies(context)
    Operator = Annotated[Caller, Depends(operator)]
    router = APIRouter(responses=ERRORS)
    exposition: Any = None

    @router.get(
        METRICS_PATH,
        summary="Metrics (Prometheus)",
        response_class=Response,
        responses=_TEXT,
    )
    def prometheus_metrics(who: Operator) -> Response:
        """Calls by tool and outcome, errors by code, the call-duration histogram, approvals
        pending and the audit queue's depth, in the Prometheus text format (operators only:
        give the scraper an operator's key)."""
        nonlocal exposition
        if metrics is None:
            raise ApiProblem(
                404, HttpErrorCode.NOT_FOUND, "this server does not collect call metrics"
            )
        if exposition is None:
            # prometheus_client is loaded on the first scrape, never by a server nobody scrapes.
            from ...telemetry.prometheus import CONTENT_TYPE, PrometheusExposition

            exposition = (PrometheusExposition(metrics), CONTENT_TYPE)
        body: bytes = exposition[0].render()
        return Response(body, media_type=exposition[1])

    return router
