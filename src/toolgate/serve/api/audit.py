"""Routes for operators: the audit log, plugin alerts and declaration diagnostics."""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import Field
from starlette.responses import Response

from ...audit.log_base import COUNT_LIMIT
from .deps import ERRORS, Context, Operator
from .models import AlertList, AuditPage, DiagnosticList
from .problems import ApiJSONResponse
from .views import alert_view, diagnostic_view

__all__ = ["router"]

#: The most records one audit page holds.
MAX_PAGE = 500


#: A point in time: Unix seconds, or ISO 8601 (UTC when it names no zone).
Moment = Annotated[float, Field(allow_inf_nan=False)] | datetime


def _seconds(moment: float | datetime | None) -> float | None:
    """Unix seconds; a time without a zone is UTC."""
    if moment is None or isinstance(moment, float):
        return moment
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


router = APIRouter(prefix="/v1", responses=ERRORS)
"""The operator routes for the audit log, alerts and diagnostics."""


@router.get("/audit", response_model=AuditPage, summary="Query the audit log")
def query_audit(
    who: Operator,
    context: Context,
    tool: Annotated[str | None, Query(max_length=500, description="A tool id.")] = None,
    agent: Annotated[str | None, Query(max_length=200, description="An agent name.")] = None,
    status: Annotated[
        Literal["ok", "error", "pending_approval"] | None, Query(description="How it ended.")
    ] = None,
    code: Annotated[str | None, Query(max_length=100, description="An error code.")] = None,
    since: Annotated[
        Moment | None,
        Query(description="Calls from this time on: Unix seconds, or ISO 8601 (UTC)."),
    ] = None,
    until: Annotated[
        Moment | None, Query(description="Calls before this time (exclusive), likewise.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="Records per page.")] = 50,
    offset: Annotated[int, Query(ge=0, le=10**9, description="Records to skip.")] = 0,
) -> Response:
    """One redacted record per call, newest first, filtered and paged (operators only).
    `next_offset` is the offset of the next page, `null` on the last one."""
    log = context.gateway.audit
    if log is None:
        return ApiJSONResponse(
            {
                "enabled": False,
                "records": [],
                "total": 0,
                "total_exact": True,
                "limit": limit,
                "offset": offset,
                "next_offset": None,
            }
        )
    filters: dict[str, Any] = {
        "tool_id": tool,
        "agent": agent,
        "status": status,
        "code": code,
        "since": _seconds(since),
        "until": _seconds(until),
    }
    # One record more than the page says whether a next page exists; the count stops at
    # COUNT_LIMIT, so a page of ten million records costs what a page of ten thousand does.
    records = log.query(**filters, limit=limit + 1, offset=offset)
    more = len(records) > limit
    records = records[:limit]
    counted = log.count(**filters, up_to=COUNT_LIMIT + 1)
    return ApiJSONResponse(
        {
            "enabled": True,
            "records": [record.to_dict() for record in records],
            "total": min(counted, COUNT_LIMIT),
            "total_exact": counted <= COUNT_LIMIT,
            "limit": limit,
            "offset": offset,
            "next_offset": offset + len(records) if more else None,
        }
    )


@router.get("/alerts", response_model=AlertList, summary="Plugin alerts")
def list_alerts(who: Operator, context: Context) -> Response:
    """What the declaration sources (plugins) asked the operator to see on their last load
    (operators only)."""
    return ApiJSONResponse({"alerts": [alert_view(alert) for alert in context.gateway.alerts()]})


@router.get("/diagnostics", response_model=DiagnosticList, summary="Declaration problems")
def list_diagnostics(who: Operator, context: Context) -> Response:
    """Problems in the tool declarations, each naming the file and the field (operators
    only)."""
    return ApiJSONResponse(
        {"diagnostics": [diagnostic_view(problem) for problem in context.gateway.diagnostics()]}
    )
