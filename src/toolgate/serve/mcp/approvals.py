"""Approvals over MCP: ask the user through the protocol, or say where to approve.

A call that needs approval never hangs the client. What the client gets depends on what it
declared and which protocol era it speaks (the same split the MCP SDK's own ``MCPServer`` makes):

* **2026-07-28 with form elicitation** — the ``tools/call`` answers with an ``input_required``
  result (SEP-2322): one ``elicitation/create`` form (Allow once / Always allow / Deny) and the
  approval id as ``requestState``. The client shows the form and retries the call with the
  user's answer; the retry decides the request and returns the call's outcome. The SDK's
  :class:`~mcp.server.request_state.RequestStateBoundary` seals the state (AES-GCM, bound to the
  tool, the exact arguments, the agent and a deadline), so a client cannot name someone else's
  request; the request's agent and tool are checked again on top.
* **Handshake era (2025-11-25 and older) with form elicitation and a back-channel** (stdio, a
  stateful HTTP session) — a classic ``elicitation/create`` request is sent while the call waits,
  racing a decision made meanwhile in the web UI or the CLI; whichever comes first wins.
* **Otherwise** — an ``isError`` result saying approval is pending, with the approval id, the web
  UI link and the CLI command; the agent's retry with the same arguments attaches to the same
  request and, once approved, runs (or collects the outcome of the run the approval started).

Trust: elicitation hands the decision to the MCP client application, which is trusted to show
the form to a person — a headless program holding an agent's key could answer it itself. Turn
elicitation off (``elicitation=False``) where agents run unattended; approvals then happen only in
the web UI or with ``toolgate approvals``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
from mcp.server.context import ServerRequestContext
from mcp_types import (
    CallToolRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ...approvals import ApprovalService
from ...errors import ApprovalClosedError
from ...gateway import Gateway
from ...model import ApprovalRequest, ApprovalStatus, CallOutcome, Decision

__all__ = [
    "APPROVAL_INPUT_KEY",
    "APPROVAL_META_KEY",
    "CHOICES",
    "DECISION_FIELD",
    "NO_PROMPT",
    "McpApprovals",
    "approval_form",
    "pending_result",
    "read_decision",
]

logger = logging.getLogger(__name__)

#: The key of the approval form in ``inputRequests`` / ``inputResponses``.
APPROVAL_INPUT_KEY: Final = "approval"
#: The form field holding the user's choice.
DECISION_FIELD: Final = "decision"
#: The choices, as (decision value, label the user sees) — the three answers a person has.
CHOICES: Final = (
    (Decision.APPROVE, "Allow once"),
    (Decision.ALWAYS, "Always allow"),
    (Decision.DENY, "Deny"),
)
#: ``_meta`` key of a pending result: the approval id, its status and where to decide it.
APPROVAL_META_KEY: Final = "toolgate/approval"
#: Arguments shown in the form are cut here (the web UI shows them whole).
_ARGUMENTS_SHOWN = 4000
#: Statuses of a request decided elsewhere that the waiting call's own re-call attaches to.
_ATTACHABLE: Final = frozenset(
    {ApprovalStatus.APPROVED, ApprovalStatus.COMPLETED, ApprovalStatus.DENIED}
)
#: The longest a handshake-era call waits for the user's answer, whatever the request's TTL.
_MAX_WAIT = 600.0


class _NoPrompt:
    """The user dismissed the form: answer "pending" without asking again in this request."""


NO_PROMPT: Final = _NoPrompt()


def approval_form(request: ApprovalRequest) -> tuple[str, dict[str, Any]]:
    """The message and ``requestedSchema`` of the approval form for ``request``.

    The message carries what the web UI shows: the confirmation title, the risk, the facts, the
    security check's message and the exact arguments; the schema is one titled single-select
    field whose values are the decisions.
    """
    lines = [request.title, f"Risk: {request.risk}"]
    lines.extend(f"{label}: {value}" for label, value in request.shown_facts())
    if request.security_message:
        lines.append(f"Security check: {request.security_message}")
    lines.append(
        f"Tool: {request.tool_id}" + (f" (agent {request.agent})" if request.agent else "")
    )
    arguments = json.dumps(
        _plain(request.shown_arguments()), ensure_ascii=False, indent=2, default=str
    )
    if len(arguments) > _ARGUMENTS_SHOWN:
        arguments = arguments[:_ARGUMENTS_SHOWN] + "\n… (cut; the web UI shows them whole)"
    lines.append(f"Arguments:\n{arguments}")
    lines.append(f"Approval request {request.id}.")
    schema = {
        "type": "object",
        "properties": {
            DECISION_FIELD: {
                "type": "string",
                "title": "Decision",
                "oneOf": [{"const": str(value), "title": label} for value, label in CHOICES],
            }
        },
        "required": [DECISION_FIELD],
    }
    return "\n".join(lines), schema


def read_decision(response: Any) -> Decision | None:
    """The decision in the client's answer to the form; ``None`` when the user decided nothing.

    ``decline`` is a denial (the user said no); ``cancel`` (dismissed) and anything malformed
    decide nothing, so the request keeps waiting for a decision made elsewhere.
    """
    if not isinstance(response, ElicitResult):
        return None
    if response.action == "decline":
        return Decision.DENY
    if response.action != "accept" or not response.content:
        return None
    choice = response.content.get(DECISION_FIELD)
    if not isinstance(choice, str):
        return None
    for value, label in CHOICES:
        if choice.strip().lower() in (str(value), label.lower()):
            return value
    return None


def pending_result(
    outcome: CallOutcome, approvals_url: str | None, *, command: str = "toolgate"
) -> dict[str, Any]:
    """The ``isError`` result for a pending call: the gateway's message plus where to decide
    (the web UI page when ``approvals_url`` is given, and ``command approvals approve ID``)."""
    request = outcome.approval
    text = outcome.text
    meta: dict[str, Any] = {}
    if request is not None:
        meta = {"id": request.id, "status": str(request.status)}
        if request.status is ApprovalStatus.PENDING:
            where = [f"run `{command} approvals approve {request.id}`"]
            if approvals_url:
                url = f"{approvals_url.rstrip('/')}/approvals/{request.id}"
                meta["url"] = url
                where.insert(0, f"open {url}")
            text += " To approve it: " + ", or ".join(where) + "."
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if meta:
        result["_meta"] = {APPROVAL_META_KEY: meta}
    return result


class McpApprovals:
    """Asks the MCP client's user to decide pending calls, when the client can."""

    def __init__(self, gateway: Gateway, *, elicitation: bool = True) -> None:
        self.gateway = gateway
        self.elicitation = elicitation
        """Whether clients that declare form elicitation are asked at all."""

    @property
    def _service(self) -> ApprovalService | None:
        return self.gateway.approvals

    async def ask(
        self,
        ctx: ServerRequestContext[Any, Any],
        outcome: CallOutcome,
        agent: str | None,
        recall: Callable[[], Awaitable[CallOutcome]],
    ) -> CallOutcome | InputRequiredResult:
        """Ask about a ``pending_approval`` outcome; return what to answer now.

        An ``input_required`` result (2026-07-28 clients), the call's final outcome (the user
        answered a handshake-era form, or the request was decided elsewhere meanwhile), or
        ``outcome`` itself when nobody can be asked through this client. ``recall`` makes the
        call again (it attaches to the request) when a decision was made elsewhere first.
        """
        request = outcome.approval
        if (
            request is None
            or request.status is not ApprovalStatus.PENDING
            or not self.elicitation
            or self._service is None
            or not _can_elicit_form(ctx)
        ):
            return outcome
        message, schema = approval_form(request)
        form = ElicitRequest(
            params=ElicitRequestFormParams(message=message, requested_schema=schema)
        )
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # The approval id is the whole state: the retry finds the request by it (sealed on the
            # way out by the RequestStateBoundary middleware, so the client cannot alter it).
            return InputRequiredResult(
                input_requests={APPROVAL_INPUT_KEY: form}, request_state=request.id
            )
        if not ctx.session.can_send_request:
            return outcome  # a stateless HTTP exchange: no channel to ask on
        return await self._ask_now(ctx, outcome, request, (message, schema), agent, recall)

    async def resume(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: CallToolRequestParams,
        agent: str | None,
    ) -> _NoPrompt | None:
        """Apply the user's answer carried by a 2026-07-28 retry.

        Returns :data:`NO_PROMPT` when the user dismissed the form (answer "pending" without
        asking again), else ``None``: the call proceeds through the pipeline, where it attaches
        to the request — just decided by the user's answer, or pending still when the retry
        carried no usable answer for a pending request of this call.
        """
        service = self._service
        state = params.request_state
        if service is None or not state or not self.elicitation:
            return None
        try:
            request = service.get(state)
        except ApprovalClosedError:
            return None
        entry = self.gateway.registry.get(params.name)
        if (
            entry is None
            or entry.tool.id != request.tool_id
            or request.agent != agent
            or request.status is not ApprovalStatus.PENDING
        ):
            return None
        answer = (params.input_responses or {}).get(APPROVAL_INPUT_KEY)
        if answer is None:
            return None
        decision = read_decision(answer)
        if decision is None:
            return NO_PROMPT
        self._decide(service, request, decision, agent)
        return None  # the call proceeds, attaches to the decided request and runs (or is refused)

    async def _ask_now(
        self,
        ctx: ServerRequestContext[Any, Any],
        outcome: CallOutcome,
        request: ApprovalRequest,
        form: tuple[str, dict[str, Any]],
        agent: str | None,
        recall: Callable[[], Awaitable[CallOutcome]],
    ) -> CallOutcome:
        """Send ``elicitation/create`` and wait for the answer, or for a decision made elsewhere.

        The wait ends at the request's expiry; a client that fails to answer or a dismissed form
        leaves the request pending (``outcome`` is returned)."""
        service = self._service
        assert service is not None
        message, schema = form
        wait = max(0.0, min(request.expires_at - time.time(), _MAX_WAIT))
        answer: list[ElicitResult] = []
        elsewhere: list[ApprovalRequest] = []

        async def ask_client() -> None:
            try:
                answer.append(
                    await ctx.session.elicit_form(
                        message, schema, related_request_id=ctx.request_id
                    )
                )
            except Exception:
                logger.info("the MCP client did not answer the approval form", exc_info=True)
            scope.cancel()

        async def watch_queue() -> None:
            # Only watch: the approved call runs below, outside this cancellable scope, so a
            # form the user dismisses (or the deadline) can never cut a run half-way.
            decided = await service.wait_for_decision(request, wait)
            if decided is not None:
                elsewhere.append(decided)
                scope.cancel()

        with anyio.move_on_after(wait) as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(ask_client)
                group.start_soon(watch_queue)
        if elsewhere:
            decided = elsewhere[0]
            if decided.status is ApprovalStatus.RUNNING:  # run elsewhere (approve --run)
                settled = await service.settle(decided)
                return outcome if settled is None else settled
            if decided.status in _ATTACHABLE:
                return await recall()  # the caller's own call attaches: it runs it, once
            return outcome  # expired, or another caller already has the outcome
        decision = read_decision(answer[0]) if answer else None
        if decision is None:
            return outcome
        self._decide(service, request, decision, agent)
        return await recall()

    def _decide(
        self,
        service: ApprovalService,
        request: ApprovalRequest,
        decision: Decision,
        agent: str | None,
    ) -> None:
        """Record the user's decision; the caller's own call then runs the approved call (or
        collects the refusal) by attaching to the request. A request decided elsewhere first
        keeps that decision."""
        # Recorded as the decider (request events, grants, the denial message).
        by = f"the user of the MCP client of agent {agent or 'default'}"
        with contextlib.suppress(ApprovalClosedError):
            service.decide(request.id, decision, by=by)


def _can_elicit_form(ctx: ServerRequestContext[Any, Any]) -> bool:
    # A bare ``elicitation: {}`` (the only shape before modes existed) means form support;
    # URL-only does not (the same rule as the SDK's MCPServer).
    capabilities = ctx.session.client_capabilities
    elicitation = None if capabilities is None else capabilities.elicitation
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
