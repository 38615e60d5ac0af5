"""Approval payloads and the decisions a LangGraph run is resumed with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model import ApprovalRequest
from ...model.approval import Decision

__all__ = [
    "APPROVAL_PAYLOAD_TYPE",
    "approval_payload",
    "decision_for",
]

#: The ``type`` of every interrupt payload this adapter raises.
APPROVAL_PAYLOAD_TYPE = "toolgate.approval"

_DECISIONS = {
    "approve": Decision.APPROVE,
    "always": Decision.ALWAYS,
    "deny": Decision.DENY,
    # LangChain's HumanInTheLoopMiddleware calls a denial "reject".
    "reject": Decision.DENY,
}


class NotRecorded(Exception):
    """A resume value's decision that toolgate did not record; the person is asked again."""


@dataclass(frozen=True, slots=True)
class ResumeDecision:
    """One person's decision, as a resume value carries it."""

    decision: Decision
    by: str | None = None
    message: str | None = None


def decision_for(
    payload: Mapping[str, Any] | Any,
    decision: str,
    *,
    by: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """A resume value bound to the approval of one interrupt.

    ``payload`` is the interrupt (``langgraph.types.Interrupt``) or its value. The result names
    the approval, so it reaches the right tool call however LangGraph hands resume values out —
    use it when several approvals can wait in one node (a plain ``ToolNode`` running parallel
    tool calls gives resume values out by order, not by interrupt)::

        Command(resume={i.id: decision_for(i, "approve", by="alice") for i in interrupts})
    """
    value = getattr(payload, "value", payload)
    if not isinstance(value, Mapping) or value.get("type") != APPROVAL_PAYLOAD_TYPE:
        raise ValueError("decision_for takes a toolgate approval interrupt or its payload")
    _parse_decision(decision)
    bound: dict[str, Any] = {"approval_id": value["approval_id"], "decision": decision}
    if by is not None:
        bound["by"] = by
    if message is not None:
        bound["message"] = message
    return bound


def approval_payload(request: ApprovalRequest, *, tool_call_id: str | None) -> dict[str, Any]:
    """What a waiting call shows through ``interrupt()``: JSON-ready, with the arguments and
    facts as people are shown them (credentials in URLs masked)."""
    return {
        "type": APPROVAL_PAYLOAD_TYPE,
        "approval_id": request.id,
        "tool_call_id": tool_call_id,
        "tool": request.tool_id,
        "title": request.title,
        "risk": request.risk,
        "facts": [[label, value] for label, value in request.shown_facts()],
        "arguments": request.shown_arguments(),
        "expires_at": request.expires_at,
        "decisions": ["approve", "always", "deny"],
    }


def _parse_decision(value: object) -> Decision:
    if isinstance(value, Decision):
        return value
    if isinstance(value, str) and value in _DECISIONS:
        return _DECISIONS[value]
    raise ValueError(
        f"{value!r} is not a decision: resume with 'approve', 'always' or 'deny' "
        "(or a dict with 'decision')"
    )


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"the decision's {key!r} must be a string, not {type(value).__name__}")
    return value


def _one_decision(value: object) -> ResumeDecision:
    if isinstance(value, Mapping):
        return ResumeDecision(
            _parse_decision(value.get("decision", value.get("type"))),
            by=_optional_text(value, "by"),
            message=_optional_text(value, "message"),
        )
    return ResumeDecision(_parse_decision(value))


def resume_decisions(value: object, own_id: str) -> dict[str, ResumeDecision]:
    """The decisions a resume value carries, by approval id.

    A bare decision is the receiving call's own; one with ``approval_id`` (or a mapping of
    approval ids to decisions) names its approvals, whichever call LangGraph handed it to.
    """
    if isinstance(value, Mapping):
        if "decision" in value or "type" in value:
            approval_id = value.get("approval_id", own_id)
            if not isinstance(approval_id, str):
                raise ValueError("the decision's 'approval_id' must be a string")
            return {approval_id: _one_decision(value)}
        if value and all(isinstance(key, str) for key in value):
            return {key: _one_decision(item) for key, item in value.items()}
    return {own_id: _one_decision(value)}
