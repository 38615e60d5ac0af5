"""``GET /healthz``: whether the server is alive and its audit log and shared state are well."""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from fastapi import APIRouter
from starlette.responses import Response

from .deps import ERRORS, Context
from .models import Health
from .problems import ApiJSONResponse

__all__ = ["router"]

router = APIRouter(responses=ERRORS)
"""The liveness route (no key needed)."""


@router.get("/healthz", response_model=Health, summary="Liveness")
def healthz(context: Context) -> Response:
    """Alive, how many tools are registered, the audit log's health and the shared state's
    (no key needed). `degraded` when the audit log failed to write (tools above local_write
    then refuse to run until it recovers) or when the shared PostgreSQL or Redis does not
    answer (calls that need it end `unavailable` until it is back)."""
    gateway = context.gateway
    log = gateway.audit
    healthy = log is None or log.healthy
    state = gateway.state_health()
    reachable = all(up is not False for up in state.values())
    return ApiJSONResponse(
        {
            "status": "ok" if healthy and reachable else "degraded",
            "state": {"shared": any(up is not None for up in state.values()), **state},
            "tools": len(gateway.registry),
            "audit": {
                "enabled": log is not None,
                "healthy": healthy,
                "lost": 0 if log is None else log.lost,
                "pending": 0 if log is None else log.pending,
            },
        }
    )
