"""Approval payloads and the decisions a LangGraph run is resumed with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...model import ApprovalRequest
from ...model.approval import Decision

__all__ = [
    "APPROVAL_PAYLOAD_TYPE",
    "RESPONSE_SCHEMA",
    "approval_payload",
    "decision_for",
    "is_toolgate_approval",
]

#: The ``type`` of every interrupt payload this adapter raises: the one of LangChain's
#: ``HumanInTheLoopMiddleware`` per-call approvals (``ToolApprovalRequest``), so a client made
#: for those shows and answers toolgate's too. ``"gateway": "toolgate"`` tells them apart.
APPROVAL_PAYLOAD_TYPE = "tool_approval"

#: The resume values a toolgate approval takes, as the interrupt's ``response_schema`` tells
#: clients (LangGraph does not check a dict schema: :func:`resume_decisions` does).
RESPONSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "type": {"enum": ["approve", "always", "reject"]},
        "message": {"type": "string"},
        "by": {"type": "string"},
    },
    "required": ["type"],
}

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
    if not is_toolgate_approval(value):
        raise ValueError("decision_for takes a toolgate approval interrupt or its payload")
    _parse_decision(decision)
    bound: dict[str, Any] = {"approval_id": value["approval_id"], "decision": decision}
    if by is not None:
        bound["by"] = by
    if message is not None:
        bound["message"] = message
    return bound


def is_toolgate_approval(value: object) -> bool:
    """Whether an interrupt's value (or the interrupt) is a toolgate approval."""
    value = getattr(value, "value", value)
    return (
        isinstance(value, Mapping)
        and value.get("type") == APPROVAL_PAYLOAD_TYPE
        and value.get("gateway") == "toolgate"
        and isinstance(value.get("approval_id"), str)
    )


def approval_payload(
    request: ApprovalRequest, *, tool_call_id: str | None, name: str
) -> dict[str, Any]:
    """What a waiting call shows through ``interrupt()``: JSON-ready, with the arguments and
    facts as people are shown them (credentials in URLs masked).

    ``type``, ``tool_call_id``, ``name``, ``args`` and ``description`` are those of LangChain's
    per-call ``ToolApprovalRequest``; the rest is toolgate's."""
    facts = [[str(label), str(value)] for label, value in request.shown_facts()]
    summary = "; ".join(f"{label}: {value}" for label, value in facts)
    return {
        "type": APPROVAL_PAYLOAD_TYPE,
        "tool_call_id": tool_call_id,
        "name": name,
        "args": request.shown_arguments(),
        "description": f"{request.title} ({request.risk} risk)"
        + (f" — {summary}" if summary else ""),
        "gateway": "toolgate",
        "approval_id": request.id,
        "tool": request.tool_id,
        "title": request.title,
        "risk": request.risk,
        "facts": facts,
        "expires_at": request.expires_at,
        "decisions": ["approve", "always", "deny"],
    }


def _parse_decision(value: object) -> Decision:
    if isinstance(value, Decision):
        return value
    if isinstance(value, str) and value in _DECISIONS:
        return _DECISIONS[value]
    if value in ("edit", "respond"):
        # HumanInTheLoopMiddleware's other decisions: an approval covers exact arguments
        # and the tool's own run, so neither has a toolgate meaning.
        raise ValueError(
            f"{value!r} is not a toolgate decision: an approval covers these exact arguments "
            "— approve, always or reject (deny) them; changed arguments are a new call"
        )
    raise ValueError(
        f"{str(value)[:80]!r} is not a decision: resume with 'approve', 'always' or 'deny' "
        "(or a dict with 'decision' or 'type')"
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


def resume_decisions(
    value: object, own_id: str, *, shared: bool = False
) -> dict[str, ResumeDecision]:
    """The decisions a resume value carries, by approval id.

    A bare decision is the receiving call's own; one with ``approval_id`` (or a mapping of
    approval ids to decisions) names its approvals, whichever call LangGraph handed it to.
    ``shared``: the call shares its LangGraph task with other tool calls, so a bare decision
    may have been meant for another one — it is refused (:class:`NotRecorded`).
    """
    if isinstance(value, Mapping):
        if "decision" in value or "type" in value:
            approval_id = value.get("approval_id", own_id)
            if not isinstance(approval_id, str):
                raise ValueError("the decision's 'approval_id' must be a string")
            if shared and "approval_id" not in value:
                _one_decision(value)  # a malformed answer is told so first
                raise NotRecorded(_ambiguous(own_id))
            return {approval_id: _one_decision(value)}
        if value.keys() & {"by", "message", "approval_id"}:
            raise ValueError("a decision dict needs 'decision' (or 'type'): approve, always, deny")
        if value and all(isinstance(key, str) for key in value):
            return {key: _one_decision(item) for key, item in value.items()}
    decision = _one_decision(value)
    if shared:
        raise NotRecorded(_ambiguous(own_id))
    return {own_id: decision}


def _ambiguous(own_id: str) -> str:
    return (
        "this call shares its LangGraph task with other tool calls, and LangGraph hands a bare "
        "answer to whichever of them asks first, so it was not taken: answer with the approval "
        f"it is for — decision_for(interrupt, ...), i.e. {{'approval_id': {own_id!r}, "
        "'decision': 'approve'|'always'|'deny'}, or a map of approval ids to decisions"
    )
