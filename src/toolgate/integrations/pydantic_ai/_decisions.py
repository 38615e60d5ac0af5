"""From a paused run to the results it resumes with, with every decision recorded in toolgate.

A run that ends with :class:`~pydantic_ai.DeferredToolRequests` resumes with
:class:`~pydantic_ai.DeferredToolResults`. :func:`record_decisions` takes a person's answers,
records them in toolgate (audit, "always allow" grants) and builds the results;
:func:`decisions_from_toolgate` builds them from decisions made in toolgate itself (the web
UI, ``toolgate approvals approve``, the HTTP API), waiting for them if asked to.

When a request was already decided in toolgate, that decision wins over the framework's answer:
it is the one the audit, the web UI and any grant already show, and a call someone denied in
toolgate must not run because another person approved it elsewhere. The results then carry
toolgate's decision, and ``metadata[id]["toolgate"]`` says who made it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Mapping
from typing import Any, Literal

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ToolCallPart

from ...errors import ToolgateError
from ...model import ApprovalRequest, ApprovalStatus
from ...model.approval import Decision
from ...model.names import to_provider_name
from ...pipeline.approval_outcomes import denied_outcome
from ..base import ToolGateway
from ._results import METADATA_KEY, is_closed

__all__ = ["DecisionValue", "decisions_from_toolgate", "record_decisions", "toolgate_approvals"]

#: A person's answer: ``"approve"`` (once), ``"always"`` (and a grant), ``"deny"``; ``True`` is
#: ``"approve"`` and ``False`` ``"deny"``.
DecisionValue = Literal["approve", "always", "deny"] | bool

#: Longest approval id taken from a deferral's metadata (toolgate's are far shorter).
MAX_APPROVAL_ID = 200


def toolgate_approvals(requests: DeferredToolRequests) -> dict[str, dict[str, Any]]:
    """The calls of ``requests`` that wait for a toolgate approval: tool call id → the facts
    a person decides on (``approval_id``, ``tool_id``, ``title``, ``risk``, ``facts``…)."""
    found: dict[str, dict[str, Any]] = {}
    for call in requests.approvals:
        facts = requests.metadata.get(call.tool_call_id, {}).get(METADATA_KEY)
        if not isinstance(facts, Mapping):
            continue  # another toolset's approval: not toolgate's to record
        approval_id = facts.get("approval_id")
        if isinstance(approval_id, str) and 0 < len(approval_id) <= MAX_APPROVAL_ID:
            found[call.tool_call_id] = dict(facts)
    return found


async def record_decisions(
    gateway: ToolGateway,
    requests: DeferredToolRequests,
    decisions: Mapping[str, DecisionValue],
    *,
    by: str,
    message: str | None = None,
) -> DeferredToolResults:
    """Record a person's decisions in toolgate and build the results to resume the run with.

    ``decisions`` maps a tool call id of ``requests.approvals`` to ``"approve"``, ``"always"``
    (also stores an "always allow" grant) or ``"deny"`` (``True``/``False`` for approve/deny);
    ``by`` names the person (recorded in the audit), ``message`` is their note. A call left
    out stays pending (the resumed run asks for it again). A call of another toolset that
    needs approval is answered in the framework only. A request already decided in toolgate
    keeps that decision (see the module's note). Raises :class:`ValueError` for a tool call id
    that is not pending in ``requests`` or a decision that is none of the above, and the
    gateway's error when it refuses the decision (a :class:`toolgate.Client` needs an
    operator's ``approver_key``; the server then records that operator as the decider).
    """
    if not isinstance(by, str) or not by.strip():
        raise ValueError("by must name the person who decided (a non-empty string)")
    pending = {call.tool_call_id: call for call in requests.approvals}
    ours = toolgate_approvals(requests)
    results = DeferredToolResults()
    for tool_call_id, value in decisions.items():
        if tool_call_id not in pending:
            raise ValueError(f"tool call {tool_call_id!r} does not wait for approval in requests")
        decision = _decision(tool_call_id, value)
        facts = ours.get(tool_call_id)
        if facts is None:
            results.approvals[tool_call_id] = (
                ToolDenied(message)
                if decision is Decision.DENY and message
                else ToolDenied()
                if decision is Decision.DENY
                else ToolApproved()
            )
            results.answered_by[tool_call_id] = by
            continue
        approval_id = facts["approval_id"]
        _check_belongs(await gateway.approval(approval_id), pending[tool_call_id], gateway.agent)
        try:
            decided = await gateway.decide(approval_id, str(decision), by=by, message=message)
        except ToolgateError as exc:
            if not is_closed(exc):
                raise  # e.g. a remote client without an operator key: nothing was recorded
            # Decided (or expired) in toolgate already: read what stands.
            decided = await gateway.approval(approval_id)
        _answer(results, tool_call_id, decided)
    return results


async def decisions_from_toolgate(
    gateway: ToolGateway,
    requests: DeferredToolRequests,
    *,
    wait: float = 0.0,
    poll_interval: float = 0.5,
) -> DeferredToolResults:
    """The results of the toolgate calls in ``requests`` that people decided in toolgate
    (web UI, CLI, HTTP API), waiting up to ``wait`` seconds until each is decided.

    A call still pending after ``wait`` is left out, so the resumed run pauses for it again.
    Usable as a :class:`~pydantic_ai.capabilities.HandleDeferredToolCalls` handler, which then
    resumes the run inline once the person decides:
    ``HandleDeferredToolCalls(handler=lambda ctx, requests: decisions_from_toolgate(gateway,
    requests, wait=300))``.
    """
    # ``not (x >= 0)`` refuses NaN too: no deadline is ever past it, so the loop never ended.
    if not (wait >= 0) or not (0 < poll_interval < math.inf):
        raise ValueError(
            f"wait must be ≥ 0 and poll_interval a finite number > 0 (seconds), not "
            f"wait={wait!r}, poll_interval={poll_interval!r}"
        )
    ours = toolgate_approvals(requests)
    calls = {call.tool_call_id: call for call in requests.approvals}
    results = DeferredToolResults()
    deadline = time.monotonic() + wait
    while True:
        for tool_call_id, facts in ours.items():
            if tool_call_id in results.approvals:
                continue
            request = await gateway.approval(facts["approval_id"])
            _check_belongs(request, calls[tool_call_id], gateway.agent)
            if request.status is not ApprovalStatus.PENDING:
                _answer(results, tool_call_id, request)
        left = deadline - time.monotonic()
        if len(results.approvals) == len(ours) or left <= 0:
            return results
        await asyncio.sleep(min(poll_interval, left))


def _check_belongs(request: ApprovalRequest, call: ToolCallPart, agent: str | None) -> None:
    """Refuse an approval request that cannot be the one ``call`` raised.

    The deferral's metadata names the request, and it travels with the paused run (through
    another process, a form, a queue): altered, it could make a person's answer about this
    call decide another agent's request or another tool's, and that call would run on it.
    (The arguments are not compared: after ``ToolApproved(override_args=...)`` the request
    the run pauses on covers the changed arguments, not the call's own.)
    """
    if to_provider_name(request.tool_id) != call.tool_name or request.agent != agent:
        raise ValueError(
            f"the approval request {request.id} that requests.metadata names is not for tool "
            f"call {call.tool_call_id!r} ({call.tool_name}): it asks for {request.tool_id} as "
            f"agent {request.agent!r}; nothing was recorded. Use the DeferredToolRequests the "
            "paused run returned, unaltered."
        )


def _decision(tool_call_id: str, value: object) -> Decision:
    if value is True:
        return Decision.APPROVE
    if value is False:
        return Decision.DENY
    if isinstance(value, str):
        try:
            return Decision(value)
        except ValueError:
            pass
    raise ValueError(
        f"the decision for tool call {tool_call_id!r} must be 'approve', 'always', 'deny' or a "
        f"bool, not {value!r}"
    )


def _answer(results: DeferredToolResults, tool_call_id: str, request: ApprovalRequest) -> None:
    """The framework's answer for a request as it stands in toolgate."""
    if request.status is ApprovalStatus.PENDING:
        return
    if request.decision is Decision.DENY:
        answer: ToolApproved | ToolDenied = ToolDenied(denied_outcome(request).text)
    elif request.decision in (Decision.APPROVE, Decision.ALWAYS):
        answer = ToolApproved()
    else:  # expired or voided undecided: the call must not run on it
        answer = ToolDenied(
            f"Error [user_rejection]: the approval request {request.id} for {request.tool_id} "
            f"{request.status} before anyone decided it; the call did not run. Call the tool "
            "again to ask anew."
        )
    results.approvals[tool_call_id] = answer
    if request.decided_by:
        results.answered_by[tool_call_id] = request.decided_by
    results.metadata[tool_call_id] = {
        METADATA_KEY: {
            "approval_id": request.id,
            "decision": None if request.decision is None else str(request.decision),
            "by": request.decided_by,
            "status": str(request.status),
        }
    }
