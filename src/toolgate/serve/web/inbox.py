"""The approvals inbox: pending requests with their confirmation, decided with one click.

The inbox checks for new requests every ``poll_interval`` seconds (htmx polling): the page
sends a digest of the requests it shows, and the server answers ``204 No Content`` while the
queue is unchanged, so nothing on the page moves under the operator's cursor until a request
arrives or leaves.
"""

from __future__ import annotations

import hashlib
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...errors import ApprovalClosedError
from ...model import ApprovalRequest, Decision
from ...model.approval import TOOL_WIDE_KEY
from ...model.display import render_display
from .security import form_of, operator_of
from .state import WebUi, path_to, ui_of

__all__ = ["routes"]

#: The longest message a person may attach to a decision.
MAX_MESSAGE_CHARS: Final = 2_000
_NO_APPROVALS: Final = (
    "Approvals are off: this gateway has no approver, so calls that need a person are denied. "
    "'toolgate serve' keeps them in a queue for this inbox."
)


def _digest(requests: list[ApprovalRequest]) -> str:
    return hashlib.sha256(",".join(r.id for r in requests).encode()).hexdigest()[:16]


def _display(ui: WebUi, request: ApprovalRequest) -> str | None:
    if request.display:
        return request.display
    entry = ui.gateway.registry.get(request.tool_id)
    return None if entry is None else render_display(entry.tool, request.arguments)


def _item(ui: WebUi, request: ApprovalRequest, operator: str) -> dict[str, Any]:
    return {
        "request": request,
        "display": _display(ui, request),
        "tool_wide": request.permission == TOOL_WIDE_KEY,
        # As over the HTTP API: nobody decides a request their own agent name made.
        "own": request.agent == operator,
    }


def _pending(ui: WebUi) -> list[ApprovalRequest]:
    approvals = ui.gateway.approvals
    return [] if approvals is None else approvals.pending()


async def inbox_page(request: Request) -> Response:
    ui = ui_of(request)
    pending = await ui.blocking(_pending, ui)
    return ui.page(
        request,
        "approvals.html",
        {
            "nav": "approvals",
            "items": [_item(ui, r, operator_of(request)) for r in pending],
            "digest": _digest(pending),
            "off_message": None if ui.gateway.approvals is not None else _NO_APPROVALS,
        },
    )


async def inbox_fragment(request: Request) -> Response:
    """The pending list alone, for polling: 204 while it is what the page already shows."""
    ui = ui_of(request)
    pending = await ui.blocking(_pending, ui)
    digest = _digest(pending)
    if request.query_params.get("seen") == digest:
        return Response(status_code=204)
    return ui.page(
        request,
        "_inbox.html",
        {"items": [_item(ui, r, operator_of(request)) for r in pending], "digest": digest},
    )


async def pending_badge(request: Request) -> Response:
    """The navigation's count of waiting requests, for polling."""
    ui = ui_of(request)
    return ui.page(request, "_badge.html", {})


async def approval_page(
    request: Request, *, error: str | None = None, status_code: int = 200
) -> Response:
    ui = ui_of(request)
    approvals = ui.gateway.approvals
    if approvals is None:
        return ui.page(
            request,
            "error.html",
            {"title": "Approvals are off", "message": _NO_APPROVALS},
            status_code=404,
        )
    approval_id = request.path_params["approval_id"]
    try:
        found = await ui.blocking(approvals.get, approval_id)
        outcome = await ui.blocking(approvals.result, approval_id)
        events = await ui.blocking(approvals.events, approval_id)
    except ApprovalClosedError:
        return ui.page(
            request,
            "error.html",
            {
                "title": "No such approval request",
                "message": f"no approval request has the id {approval_id!r}",
            },
            status_code=404,
        )
    return ui.page(
        request,
        "approval.html",
        {
            "nav": "approvals",
            "item": _item(ui, found, operator_of(request)),
            "outcome": outcome,
            "events": events,
            "error": error,
        },
        status_code=status_code,
    )


async def decide(request: Request) -> Response:
    """Allow once, Always allow or Deny, then show the request (with the call's outcome once
    the agent's retry has run it)."""
    ui = ui_of(request)
    approvals = ui.gateway.approvals
    approval_id = request.path_params["approval_id"]
    form = form_of(request)
    if approvals is None:
        return await approval_page(request)
    try:
        decision = Decision(form.get("decision", ""))
    except ValueError:
        return await approval_page(
            request, error="choose Allow once, Always allow or Deny", status_code=400
        )
    message = form.get("message", "").strip()[:MAX_MESSAGE_CHARS] or None
    operator = operator_of(request)
    try:
        if approvals.get(approval_id).agent == operator:
            return await approval_page(
                request,
                error=f"{operator!r} made this request and cannot decide it itself",
                status_code=403,
            )
        # Only the decision is written: the agent's retry runs the call, as that agent.
        await ui.blocking(approvals.decide, approval_id, decision, by=operator, message=message)
    except ApprovalClosedError as exc:
        return await approval_page(request, error=str(exc), status_code=409)
    return RedirectResponse(path_to(request, "approvals", approval_id), status_code=303)


def routes() -> list[Route]:
    """The inbox's routes."""
    return [
        Route("/approvals", inbox_page, name="approvals"),
        Route("/approvals/inbox", inbox_fragment, name="approvals_inbox"),
        Route("/approvals/count", pending_badge, name="approvals_count"),
        Route("/approvals/{approval_id}", approval_page, methods=["GET"], name="approval"),
        Route("/approvals/{approval_id}", decide, methods=["POST"], name="decide"),
    ]
