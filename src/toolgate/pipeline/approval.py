"""The Approval stage: calls that need a person never run without one.

For a call that needs approval (see :mod:`~toolgate.pipeline.approval_policy`), the request for
exactly this call — same tool definition, same arguments (by digest of their canonical JSON), same
workspace and agent, and the same tool call id when the agent's framework gave one — is looked up
first, so a retried call attaches to it instead of asking twice:

* ``approved`` → the call runs now, once (the approval is taken atomically: of two racing
  callers exactly one runs it);
* ``running`` → the caller is told the approved call is running and to call again for its result;
* ``completed`` (it ran when it was approved) → the stored outcome, once; ``denied`` →
  ``user_rejection``, once. A decided request is collectable for one approval TTL after its
  decision; after that the call asks anew.

Otherwise a live "always allow" grant for (workspace, tool, permission key, tool definition) lets
the call run; otherwise the pending request is returned again, or a new one is created with its
confirmation — or, with no approver configured at all, the call is denied ("denied by default
for safety").

Nothing in the arguments can carry or forge an approval: requests are found by the call itself,
and the run a decision starts is marked by the gateway, never by the caller.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._json import digest
from ..errors import ErrorCode
from ..model import (
    TOOL_WIDE_KEY,
    ApprovalRequest,
    ApprovalStatus,
    CallOutcome,
    CallStatus,
    PermissionKey,
    Tool,
)
from ..model.display import render_display
from ..registry import RegisteredTool
from ..stores.approvals import ApprovalStore, DuplicateRequestError
from .approval_keys import APPROVAL_DECISION, APPROVAL_TAKEN
from .approval_outcomes import denied_outcome, replayed_outcome
from .approval_policy import ApprovalPolicy, ApprovalRule
from .authorize import POLICY_APPROVAL
from .confirmation import ConfirmationError, build_confirmation
from .state import CallState, Handler, error_outcome

__all__ = [
    "APPROVAL_TAKEN",
    "DEFAULT_APPROVAL_TTL",
    "DEFAULT_MAX_PENDING_PER_AGENT",
    "DEFAULT_MAX_PENDING_PER_TOOL",
    "ApprovalSettings",
    "ApprovalStage",
    "new_approval_id",
]

#: How long a request waits for a decision before it expires (seconds).
DEFAULT_APPROVAL_TTL = 300.0
#: Requests of one agent that may wait for a person at once, for one tool and in all. A person
#: reviews a handful at a time: ten lets an agent queue a real batch for one tool (a few file
#: deletions, a few messages), fifty across tools; beyond that it is a loop flooding the inbox.
DEFAULT_MAX_PENDING_PER_TOOL = 10
DEFAULT_MAX_PENDING_PER_AGENT = 50
#: Seconds a confirmation builder may take; a slow one is a denial, not a stalled gateway.
CONFIRMATION_TIMEOUT = 5.0


def new_approval_id() -> str:
    """A request id (128 random bits). Deciding goes through the approval API of a surface the
    person is authenticated to; the id only names the request."""
    return "apr_" + os.urandom(16).hex()


@dataclass(frozen=True, slots=True)
class ApprovalSettings:
    """How approvals work on this gateway. Who decides is not a setting: a gateway without an
    approver has no approval store, and denies the calls that need approval."""

    ttl: float = DEFAULT_APPROVAL_TTL
    """Seconds a request waits for a decision, and a decided one stays collectable."""
    max_pending_per_tool: int | None = DEFAULT_MAX_PENDING_PER_TOOL
    """Requests of one agent for one tool that may wait at once (``None``: no limit); past it
    a new call is ``rate_limited`` without a request."""
    max_pending_per_agent: int | None = DEFAULT_MAX_PENDING_PER_AGENT
    """Requests of one agent, all tools together, that may wait at once (``None``: no limit)."""
    rules: Sequence[ApprovalRule] = ()
    """Operator rules that make approval stricter (or, with ``override``, waive it) per tool,
    namespace or level. Kept as a tuple."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))


#: Statuses of a decided request whose retry is the decided call (it runs or collects it).
_SETTLED = frozenset({ApprovalStatus.APPROVED, ApprovalStatus.COMPLETED, ApprovalStatus.DENIED})


@dataclass(frozen=True, slots=True)
class _CallKey:
    """What makes two calls "the same call" for approval purposes."""

    tool_id: str
    definition_hash: str
    arguments_digest: str
    workspace: str | None
    agent: str | None

    @classmethod
    def of(cls, state: CallState) -> _CallKey:
        """The key of the call ``state`` is making. A call the agent's framework named (its tool
        call id) is its own call: the id and the session are part of the digest, so two
        parallel calls with the same arguments get a request each, each resumed call finds its
        own, and an id a test model reuses in another conversation is another call.

        A named call's digest is of a JSON array, never an object: a plain call's is of its
        arguments (an object), so no arguments can be shaped to take a named call's request
        (and the approval a person gave for other arguments)."""
        arguments = dict(state.arguments)
        return cls(
            tool_id=state.tool.id,
            definition_hash=state.tool.definition_hash,
            arguments_digest=digest(
                arguments
                if state.tool_call_id is None
                else ["named-call", state.tool_call_id, state.session_id, arguments]
            ),
            workspace=None if state.workspace is None else str(state.workspace),
            agent=state.agent,
        )

    def find(self, store: ApprovalStore, now: float) -> ApprovalRequest | None:
        return store.find_open(
            tool_id=self.tool_id,
            definition_hash=self.definition_hash,
            arguments_digest=self.arguments_digest,
            workspace=self.workspace,
            agent=self.agent,
            now=now,
        )


def _no_approver_message(tool_id: str, reason: str) -> str:
    return (
        f"Tool {tool_id} needs a person's approval before it runs ({reason}), but no approver "
        "is configured on this gateway, so the call was denied. Tell the user: an operator "
        "must configure an approver (or an approval rule) before this tool can run."
    )


class ApprovalStage:
    """Attached retries, grants, new requests — or a denial when nobody can be asked."""

    name = "approval"
    suspends = True  # confirmation builders run in a worker thread, with a deadline

    def __init__(
        self,
        *,
        store: ApprovalStore | None,
        policy: ApprovalPolicy,
        settings: ApprovalSettings,
        builders: Callable[[RegisteredTool], Callable[[Mapping[str, Any]], Any] | None],
        clock: Callable[[], float] = time.time,
        every_tool: bool = False,
        scrub: Callable[[Tool, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.every_tool = every_tool
        """Check every tool: access policies may require approval for any call."""
        self.settings = settings
        self.builders = builders
        self.scrub = scrub
        self._create_lock = threading.Lock()
        """Masks what a stored outcome must not keep (the secrets the tool received, URL
        credentials) before an approved call's outcome is stored on its request."""
        self.clock = clock

    def applies_to(self, entry: RegisteredTool) -> bool:
        tool = entry.tool
        return (
            self.every_tool
            or self.policy.requires_approval(tool)
            or tool.security_check is not None
        )

    def would_ask(self, tool: Tool, *, required_by_policy: bool, workspace: str | None) -> bool:
        """Whether a call of ``tool`` would ask a person now, before any security check runs:
        approval is required (by the tool, the operator's rules, or ``required_by_policy``, an
        access rule of the calling agent) and no live "always allow" grant for this workspace
        covers the tool as declared. Without an approver nobody would be asked: the call is
        denied, so ``False``. A security check may still ask when the call runs."""
        store = self.store
        if store is None or not (required_by_policy or self.policy.requires_approval(tool)):
            return False
        grant = store.find_grant(
            workspace=workspace,
            tool_id=tool.id,
            permission=TOOL_WIDE_KEY,
            definition_hash=tool.definition_hash,
            now=self.clock(),
        )
        return grant is None

    def decided(self, state: CallState) -> bool:
        """Whether this call attaches to a request a person has decided (the agent's retry
        after a decision): it was counted by the stages before this one when it asked, so the
        rate limit does not count it again (see :class:`~toolgate.pipeline.rate_limit.
        RateLimitStage`). One store lookup, only for calls of tools that may need approval."""
        store = self.store
        if store is None or not self.applies_to(state.entry):
            return False
        request = _CallKey.of(state).find(store, self.clock())
        # Not "running": a retry then only gets "call again" and is counted like any other.
        return request is not None and request.status in _SETTLED

    @staticmethod
    def _charged(state: CallState, proceed: Handler) -> Handler:
        """``proceed``, but charging the rate limit the call passed uncounted (as a likely
        retry after a decision) first: a call that runs as a new call is counted."""
        charge = state.uncounted
        state.uncounted = None
        if charge is None:
            return proceed

        async def counted(state: CallState) -> CallOutcome:
            refused = charge(state)
            return await proceed(state) if refused is None else refused

        return counted

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        # The approved run itself (``_attached``) gets ``decided_run``, uncounted; every other
        # way on is counted if the rate limit let this call through on the strength of a decision.
        decided_run = proceed
        proceed = self._charged(state, proceed)
        tool = state.tool
        verdict = state.metadata.get("security") or {}
        asked_by_check = bool(verdict.get("asksAPerson"))
        by_policy = state.metadata.get(POLICY_APPROVAL)
        if not asked_by_check and not by_policy and not self.policy.requires_approval(tool):
            return await proceed(state)
        taken = state.metadata.pop(APPROVAL_TAKEN, None)
        if taken:
            decision = state.metadata.pop(APPROVAL_DECISION, "approve")
            state.metadata["approval"] = {"id": taken, "decision": decision}
            return await proceed(state)  # the run a person's decision started
        if asked_by_check:
            permission = PermissionKey(
                str(verdict.get("permissionType") or "security"),
                str(verdict.get("permissionKey") or "*"),
            )
            reason = str(verdict.get("message") or "its security check asks for permission")
        else:
            permission = TOOL_WIDE_KEY
            reason = str(by_policy) if by_policy else f"side effect: {tool.side_effect}"
        store = self.store
        if store is None:
            return error_outcome(
                state, ErrorCode.USER_REJECTION, _no_approver_message(tool.id, reason)
            )

        now = self.clock()
        call = _CallKey.of(state)
        request = call.find(store, now)
        if request is not None and request.status is not ApprovalStatus.PENDING:
            attached = await self._attached(state, request, decided_run, now)
            if attached is not None:
                return attached
            request = None
        grant = store.find_grant(
            workspace=call.workspace,
            tool_id=tool.id,
            permission=permission,
            definition_hash=call.definition_hash,
            now=now,
        )
        if grant is not None:
            if request is not None:
                # Pending when looked up, and a grant now: an "always" decision on this very
                # request landed in between. Take the request, so it is not left approved
                # (and runnable once more) after this call ran.
                current = call.find(store, self.clock())
                if current is not None and current.status is not ApprovalStatus.PENDING:
                    attached = await self._attached(state, current, decided_run, now)
                    if attached is not None:
                        return attached
            state.metadata["approval"] = {"grant": grant.id}
            return await proceed(state)
        if request is not None:
            return self.pending(state, request)
        flooded = self._flooded(store, call, now)
        if flooded is not None:
            return error_outcome(state, ErrorCode.RATE_LIMITED, flooded)

        builder = self.builders(state.entry)
        try:
            confirmation = await asyncio.wait_for(
                asyncio.to_thread(build_confirmation, tool, state.arguments, builder=builder),
                CONFIRMATION_TIMEOUT,
            )
        except (ConfirmationError, TimeoutError) as exc:
            problem = str(exc) or f"it took longer than {CONFIRMATION_TIMEOUT:g} s"
            return error_outcome(
                state,
                ErrorCode.USER_REJECTION,
                f"Tool {tool.id} needs a person's approval, but its confirmation could not be "
                f"built, so the call was denied: {problem}",
            )
        request = ApprovalRequest(
            id=new_approval_id(),
            tool_id=call.tool_id,
            definition_hash=call.definition_hash,
            arguments_digest=call.arguments_digest,
            workspace=call.workspace,
            agent=call.agent,
            title=confirmation.title,
            risk=confirmation.risk,
            facts=confirmation.facts,
            arguments=dict(state.arguments),
            created_at=now,
            expires_at=now + self.settings.ttl,
            session_id=state.session_id,
            permission=permission,
            security_message=str(verdict["message"]) if verdict.get("message") else None,
            display=render_display(tool, state.arguments),
            namespaces=state.namespaces,
        )
        try:
            # Counted again with the request's creation under one lock, with nothing awaited
            # in between: in this process the limit is exact however many calls come at once
            # (the first count, above, only spares a flood building confirmations).
            with self._create_lock:
                flooded = self._flooded(store, call, now)
                if flooded is None:
                    store.create(request)
            if flooded is not None:
                return error_outcome(state, ErrorCode.RATE_LIMITED, flooded)
        except DuplicateRequestError:
            # An identical call created its request first: attach to that one.
            existing = call.find(store, self.clock())
            if existing is None or existing.status is not ApprovalStatus.PENDING:
                return await self.__call__(state, proceed)
            return self.pending(state, existing)
        store.record_event(request.id, "requested", actor=state.agent, at=now)
        return self.pending(state, request)

    def _flooded(self, store: ApprovalStore, call: _CallKey, now: float) -> str | None:
        """Why this new request is refused — its agent already has too many waiting — or
        ``None``. Exact within one process (see the caller); replicas sharing the state may
        each let one call past it at the same moment."""
        per_tool, per_agent = (
            self.settings.max_pending_per_tool,
            self.settings.max_pending_per_agent,
        )
        if per_tool is None and per_agent is None:
            return None
        for_tool, for_agent = store.count_pending(agent=call.agent, tool_id=call.tool_id, now=now)
        who = "This caller" if call.agent is None else f"Agent '{call.agent}'"
        if per_tool is not None and for_tool >= per_tool:
            waiting = f"{for_tool} requests for tool {call.tool_id}"
            limit, key = per_tool, "approval.max_pending_per_tool"
        elif per_agent is not None and for_agent >= per_agent:
            waiting = f"{for_agent} requests"
            limit, key = per_agent, "approval.max_pending_per_agent"
        else:
            return None
        return (
            f"{who} already has {waiting} waiting for a person's decision (the limit is "
            f"{limit}), so this call was not queued for approval. Wait until the person has "
            "decided them (or they expired) before asking for more; calling again with the same "
            "arguments as a waiting request still reaches that request. The operator sets the "
            f"limit with {key} in toolgate.yaml."
        )

    async def _attached(
        self, state: CallState, request: ApprovalRequest, proceed: Handler, now: float
    ) -> CallOutcome | None:
        """The outcome for a call whose request was decided (``None``: ask anew)."""
        store = self.store
        assert store is not None
        decided_at = request.decided_at or request.created_at
        if now - decided_at > self.settings.ttl:
            # Decided too long ago to hand over: close it, and let this call ask anew.
            store.transition(
                request.id, from_status=request.status, to_status=ApprovalStatus.EXPIRED
            )
            return None
        # The decision rides along, so the audit record of the run says "always" or "approve".
        state.metadata["approval"] = {"id": request.id, "decision": str(request.decision)}
        if request.status is ApprovalStatus.RUNNING:
            return self.pending(state, request)
        if request.status is ApprovalStatus.APPROVED:
            # Taken atomically: of two racing callers, exactly one runs the approved call.
            if not store.transition(
                request.id, from_status=ApprovalStatus.APPROVED, to_status=ApprovalStatus.RUNNING
            ):
                return None
            try:
                outcome = await proceed(state)
            except BaseException:
                # Cut off (the caller was cancelled): the single-use approval is spent.
                store.transition(
                    request.id,
                    from_status=ApprovalStatus.RUNNING,
                    to_status=ApprovalStatus.DELIVERED,
                )
                raise
            kept = outcome.to_dict()
            if self.scrub is not None:
                kept = self.scrub(state.tool, kept)  # people read it on the request's page
            store.store_outcome(request.id, kept)
            store.record_event(request.id, "ran", actor=state.agent, at=self.clock())
            # This caller has the outcome: nothing is left for anyone to collect.
            store.transition(
                request.id, from_status=ApprovalStatus.COMPLETED, to_status=ApprovalStatus.DELIVERED
            )
            return outcome
        # completed (it ran when it was approved) or denied: hand the final outcome over, once.
        if not store.transition(
            request.id, from_status=request.status, to_status=ApprovalStatus.DELIVERED
        ):
            return None
        store.record_event(request.id, "delivered", actor=state.agent, at=self.clock())
        if request.status is ApprovalStatus.DENIED:
            return denied_outcome(request, call_id=state.call_id, metadata=state.metadata)
        return replayed_outcome(
            request, store.outcome(request.id) or {}, call_id=state.call_id, metadata=state.metadata
        )

    def pending(self, state: CallState, request: ApprovalRequest) -> CallOutcome:
        """The ``pending_approval`` outcome for ``request`` (waiting, or approved and running)."""
        state.metadata["approval"] = {"id": request.id}
        if request.status is ApprovalStatus.RUNNING:
            text = (
                f"The call to {state.tool.id} was approved and is running now (request "
                f"{request.id}). Call the tool again with the same arguments in a moment to "
                "receive its result."
            )
        else:
            text = (
                f"Tool {state.tool.id} needs a person's approval before it runs; request "
                f"{request.id} is waiting for a decision (it expires in "
                f"{max(0, int(request.expires_at - self.clock()))} s). Tell the user, and call "
                "the tool again with the same arguments once it is approved."
            )
        return CallOutcome(
            status=CallStatus.PENDING_APPROVAL,
            tool_id=state.tool.id,
            call_id=state.call_id,
            approval=request,
            message=text,
            metadata=state.metadata,
        )
