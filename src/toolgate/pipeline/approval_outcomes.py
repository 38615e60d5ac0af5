"""The outcomes a decided approval request hands over: one place for their shape and wording."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ErrorCode
from ..model import ApprovalRequest, CallOutcome, CallStatus
from ..model.content import content_from_fields

__all__ = ["denied_outcome", "replayed_outcome"]


def denied_outcome(
    request: ApprovalRequest,
    *,
    call_id: str = "",
    metadata: Mapping[str, Any] | None = None,
    retry_hint: bool | None = None,
) -> CallOutcome:
    """``user_rejection`` for a call a person (or a failing approver) denied.

    ``retry_hint`` (default: when a person decided, not the gateway itself) tells the agent
    not to retry the call unchanged."""
    if retry_hint is None:
        retry_hint = request.decided_by != "toolgate"
    who = f" by {request.decided_by}" if request.decided_by else ""
    note = f": {request.decision_message}" if request.decision_message else ""
    hint = " Do not retry it unchanged; ask the user what to do instead." if retry_hint else ""
    return CallOutcome(
        status=CallStatus.ERROR,
        tool_id=request.tool_id,
        call_id=call_id,
        code=ErrorCode.USER_REJECTION,
        message=f"The call to {request.tool_id} was denied{who}{note}.{hint}",
        approval=request,
        metadata={} if metadata is None else metadata,
    )


def replayed_outcome(
    request: ApprovalRequest,
    stored: Mapping[str, Any],
    *,
    call_id: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> CallOutcome:
    """The stored outcome of an approved call, handed to the caller that collects it."""
    code = stored.get("code")
    return CallOutcome(
        status=CallStatus(stored.get("status", "error")),
        tool_id=request.tool_id,
        call_id=str(stored.get("call_id", call_id)),
        content=content_from_fields(stored),
        code=None if code is None else ErrorCode(code),
        message=stored.get("message"),
        visualization=stored.get("visualization"),
        duration=float(stored.get("duration", 0.0)),
        approval=request,
        metadata={**(metadata or {}), "approval": {"id": request.id, "replayed": True}},
    )
