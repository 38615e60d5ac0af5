"""The audit pages: a filterable, paged table of calls, and one call with its visualization."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...audit.log_base import COUNT_LIMIT
from ...audit.record import AuditRecord
from ...model import CallStatus
from ...model.display import render_display
from .state import WebUi, ui_of

__all__ = ["routes"]

_STATUSES: Final = tuple(str(status) for status in CallStatus)
#: The "last …" choices of the time filter, in seconds.
RANGES: Final = {"1h": 3_600.0, "24h": 86_400.0, "7d": 7 * 86_400.0, "30d": 30 * 86_400.0}
_MAX_FILTER_CHARS: Final = 200
_AUDIT_OFF: Final = (
    "The audit log is off for this gateway, so there are no calls to show. 'toolgate serve' "
    "records every call in $TOOLGATE_HOME/audit.db."
)


@dataclass
class Filters:
    """The audit table's filters, as read from the query string."""

    tool: str = ""
    agent: str = ""
    status: str = ""
    since: str = ""
    until: str = ""
    range: str = ""
    page: int = 1
    problems: list[str] = field(default_factory=list)

    def query(self, now: float) -> dict[str, Any]:
        """Keyword arguments for the audit log's ``query`` and ``count``."""
        found: dict[str, Any] = {}
        if self.tool:
            found["tool_id"] = self.tool
        if self.agent:
            found["agent"] = self.agent
        if self.status in _STATUSES:
            found["status"] = self.status
        elif self.status:
            found["code"] = self.status  # an error code, as `toolgate audit list --status`
        if self.range in RANGES:
            found["since"] = now - RANGES[self.range]
        for name, key in (("since", "since"), ("until", "until")):
            text = getattr(self, name)
            if not text:
                continue
            try:
                found[key] = datetime.fromisoformat(text).timestamp()
            except (ValueError, OverflowError, OSError):
                self.problems.append(f"{name}: {text!r} is not a date and time")
        return found

    def link(self, page: int) -> str:
        """The query string of this filter on another page."""
        values = {
            "tool": self.tool,
            "agent": self.agent,
            "status": self.status,
            "since": self.since,
            "until": self.until,
            "range": self.range,
        }
        return urlencode({**{k: v for k, v in values.items() if v}, "page": page})


def _filters(request: Request) -> Filters:
    params = request.query_params

    def text(name: str) -> str:
        return params.get(name, "").strip()[:_MAX_FILTER_CHARS]

    filters = Filters(
        tool=text("tool"),
        agent=text("agent"),
        status=text("status"),
        since=text("since"),
        until=text("until"),
        range=text("range"),
    )
    try:
        filters.page = max(1, min(int(params.get("page", "1")), 1_000_000))
    except ValueError:
        filters.problems.append("page: not a number")
    return filters


def _display(ui: WebUi, record: AuditRecord) -> str | None:
    entry = ui.gateway.registry.get(record.tool_id)
    if entry is None or not isinstance(record.args, dict):
        return None
    return render_display(entry.tool, record.args)


@dataclass(frozen=True)
class _Found:
    records: list[AuditRecord]
    total: int
    """Matching records, counted up to :data:`COUNT_LIMIT` (``exact`` says whether it is all)."""
    exact: bool
    more: bool
    """Whether an older page exists."""


def _search(ui: WebUi, filters: Filters) -> _Found:
    audit = ui.gateway.audit
    assert audit is not None
    query = filters.query(time.time())
    size = ui.options.page_size
    # The count stops at COUNT_LIMIT and one record past the page says whether there is an
    # older one: a page of a log of millions costs what a page of a small one does.
    counted = audit.count(**query, up_to=COUNT_LIMIT + 1)
    records = audit.query(**query, limit=size + 1, offset=(filters.page - 1) * size)
    return _Found(
        records[:size], min(counted, COUNT_LIMIT), counted <= COUNT_LIMIT, len(records) > size
    )


async def audit_page(request: Request) -> Response:
    ui = ui_of(request)
    filters = _filters(request)
    if ui.gateway.audit is None:
        return ui.page(
            request,
            "audit.html",
            {"nav": "audit", "off_message": _AUDIT_OFF, "filters": filters, "rows": []},
        )
    found = await ui.blocking(_search, ui, filters)
    records, total = found.records, found.total
    pages = max(1, math.ceil(total / ui.options.page_size))
    if not found.exact and found.records:
        # Past the counted records: as many pages as this one shows to exist.
        pages = max(pages, filters.page + found.more)
    return ui.page(
        request,
        "audit.html",
        {
            "nav": "audit",
            "off_message": None,
            "filters": filters,
            "rows": [(record, _display(ui, record)) for record in records],
            "total": total,
            "pages": pages,
            "exact": found.exact,
            "more": found.more,
            "ranges": list(RANGES),
            "statuses": _STATUSES,
            "tool_ids": [entry.tool.id for entry in ui.gateway.entries()],
        },
    )


def _find(ui: WebUi, call_id: str, at: float) -> AuditRecord | None:
    audit = ui.gateway.audit
    assert audit is not None
    # The record's start time is in the link: the time index finds it without a scan.
    for record in audit.query(since=at, until=math.nextafter(at, math.inf), limit=1_000):
        if record.call_id == call_id:
            return record
    return None


async def call_page(request: Request) -> Response:
    ui = ui_of(request)
    call_id = request.path_params["call_id"]
    if ui.gateway.audit is None:
        return ui.page(
            request, "error.html", {"title": "No audit log", "message": _AUDIT_OFF}, status_code=404
        )
    try:
        at = float(request.query_params.get("at", ""))
        if not math.isfinite(at):
            raise ValueError(at)
    except ValueError:
        return ui.page(
            request,
            "error.html",
            {
                "title": "Which call?",
                "message": "open a call from the audit table: its link carries the call's time",
            },
            status_code=400,
        )
    record = await ui.blocking(_find, ui, call_id, at)
    if record is None:
        return ui.page(
            request,
            "error.html",
            {
                "title": "No such call",
                "message": f"the audit log has no call {call_id!r} at that time (it may have "
                "been pruned)",
            },
            status_code=404,
        )
    return ui.page(
        request,
        "call.html",
        {"nav": "audit", "record": record, "display": _display(ui, record)},
    )


def routes() -> list[Route]:
    """The audit pages' routes."""
    return [
        Route("/audit", audit_page, name="audit"),
        Route("/audit/calls/{call_id}", call_page, name="call"),
    ]
