"""The Approval stage: calls that need a person never run without one.

For a call that needs approval (see :mod:`~toolgate.pipeline.approval_policy`):

1. a live "always allow" grant for (workspace, tool, permission key, tool definition) lets it run;
2. otherwise the request for exactly this call — same tool definition, same arguments (by digest
   of their canonical JSON), same workspace and agent — is looked up, so a retried call attaches to
   it instead of asking twice: still ``pending`` → the same ``pending_approval`` outcome;
   ``approved`` → the call runs now, once (the request is taken atomically, so two retries cannot
   both run it); ``completed`` (it already ran when it was approved) → the stored outcome, once;
   ``denied`` → ``user_rejection``, once;
3. otherwise a new request is created with its confirmation and returned as ``pending_approval`` —
   or, with no approver configured at all, the call is denied (Jean2: "denied by default for
   safety").

Nothing in the arguments can carry or forge an approval: requests are found by the call itself.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
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
)
from ..registry import RegisteredTool
from ..stores.base import ApprovalStore
from .approval_policy import ApprovalPolicy
from .confirmation import ConfirmationError, build_confirmation
from .state import CallState, Handler, error_outcome

__all__ = [
    "DECIDER_RUN",
    "DEFAULT_APPROVAL_TTL",
    "ApprovalSettings",
    "ApprovalStage",
    "denied_outcome",
    "new_approval_id",
    "replayed_outcome",
]

#: Metadata flag of the run a decision starts: its outcome stays stored for the agent to collect.
DECIDER_RUN = "approval_decider_run"

#: How long a request waits for a decision before it expires (seconds).
DEFAULT_APPROVAL_TTL = 300.0


def new_approval_id() -> str:
    """An unguessable request id (128 bits): knowing one is what lets a person decide it."""
    return "apr_" + os.urandom(16).hex()


@dataclass(frozen=True, slots=True)
class ApprovalSettings:
    """How approvals work on this gateway."""

    enabled: bool = False
    """Whether anyone can decide requests (an approver or the pending queue). Without one,
    calls that need approval are denied."""
    ttl: float = DEFAULT_APPROVAL_TTL
    """Seconds a request waits for a decision."""


def _ask_user_message(tool_id: str, reason: str) -> str:
    return (
        f"Tool {tool_id} needs a person's approval before it runs ({reason}), and no approver "
        "is configured, so the call was denied. Ask the user to approve it, or to configure an "
        "approver."
    )


class ApprovalStage:
    """Grants, attached retries, new requests — or a denial when nobody can be asked."""

    name = "approval"
    suspends = False

    def __init__(
        self,
        *,
        store: ApprovalStore | None,
        policy: ApprovalPolicy,
        settings: ApprovalSettings,
        builders: Callable[[RegisteredTool], Callable[[Mapping[str, Any]], Any] | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.policy = policy
        self.settings = settings
        self.builders = builders
        self.clock = clock

    def applies_to(self, entry: RegisteredTool) -> bool:
        tool = entry.tool
        return self.policy.requires_approval(tool) or tool.security_check is not None

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        tool = state.tool
        verdict = state.metadata.get("security") or {}
        asked_by_check = bool(verdict.get("asksAPerson"))
        if not asked_by_check and not self.policy.requires_approval(tool):
            return await proceed(state)
        if asked_by_check:
            permission = PermissionKey(
                str(verdict.get("permissionType") or "security"),
                str(verdict.get("permissionKey") or "*"),
            )
            reason = str(verdict.get("message") or "its security check asks for permission")
        else:
            permission = TOOL_WIDE_KEY
            reason = f"side effect: {tool.side_effect}"
        store = self.store
        if not self.settings.enabled or store is None:
            return error_outcome(
                state, ErrorCode.USER_REJECTION, _ask_user_message(tool.id, reason)
            )

        now = self.clock()
        workspace = None if state.workspace is None else str(state.workspace)
        definition_hash = tool.definition_hash
        arguments_digest = digest(dict(state.arguments))
        request = store.find_open(
            tool_id=tool.id,
            definition_hash=definition_hash,
            arguments_digest=arguments_digest,
            workspace=workspace,
            agent=state.agent,
            now=now,
        )
        if request is not None and request.status is not ApprovalStatus.PENDING:
            attached = await self._attached(state, request, proceed)
            if attached is not None:
                return attached
        grant = store.find_grant(
            workspace=workspace,
            tool_id=tool.id,
            permission=permission,
            definition_hash=definition_hash,
            now=now,
        )
        if grant is not None:
            state.metadata["approval"] = {"grant": grant.id}
            return await proceed(state)
        if request is not None and request.status is ApprovalStatus.PENDING:
            state.metadata["approval"] = {"id": request.id}
            return self.pending(state, request)

        try:
            confirmation = build_confirmation(
                tool, state.arguments, builder=self.builders(state.entry)
            )
        except ConfirmationError as exc:
            return error_outcome(
                state,
                ErrorCode.USER_REJECTION,
                f"Tool {tool.id} needs a person's approval, but its confirmation could not be "
                f"built, so the call was denied: {exc}",
            )
        request = ApprovalRequest(
            id=new_approval_id(),
            tool_id=tool.id,
            title=confirmation.title,
            risk=confirmation.risk,
            facts=confirmation.facts,
            arguments=dict(state.arguments),
            arguments_digest=arguments_digest,
            definition_hash=definition_hash,
            created_at=now,
            expires_at=now + self.settings.ttl,
            workspace=workspace,
            agent=state.agent,
            session_id=state.session_id,
            permission=permission,
            security_message=str(verdict["message"]) if verdict.get("message") else None,
        )
        store.create(request)
        store.record_event(request.id, "requested", actor=state.agent, at=now)
        return self.pending(state, request)

    async def _attached(
        self, state: CallState, request: ApprovalRequest, proceed: Handler
    ) -> CallOutcome | None:
        """The outcome for a call that already has a request (``None``: ask anew)."""
        store = self.store
        assert store is not None
        state.metadata["approval"] = {"id": request.id}
        if request.status in (ApprovalStatus.PENDING, ApprovalStatus.RUNNING):
            return self.pending(state, request)
        if request.status is ApprovalStatus.APPROVED:
            # Taken atomically: of two racing callers, exactly one runs the approved call.
            if not store.transition(
                request.id, from_status=ApprovalStatus.APPROVED, to_status=ApprovalStatus.RUNNING
            ):
                return None
            state.metadata["approval"]["decision"] = str(request.decision)
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
            store.store_outcome(request.id, outcome.to_dict())
            store.record_event(request.id, "ran", actor=state.agent, at=self.clock())
            if not state.metadata.get(DECIDER_RUN):
                # The caller that ran it has its outcome: nothing is left to collect.
                store.transition(
                    request.id,
                    from_status=ApprovalStatus.COMPLETED,
                    to_status=ApprovalStatus.DELIVERED,
                )
            return outcome
        # completed (it ran when it was approved) or denied: hand the final outcome over, once.
        if not store.transition(
            request.id, from_status=request.status, to_status=ApprovalStatus.DELIVERED
        ):
            return None
        if request.status is ApprovalStatus.DENIED:
            return denied_outcome(state, request)
        stored = store.outcome(request.id) or {}
        return replayed_outcome(state, request, stored)

    def pending(self, state: CallState, request: ApprovalRequest) -> CallOutcome:
        """The ``pending_approval`` outcome for ``request``."""
        return CallOutcome(
            status=CallStatus.PENDING_APPROVAL,
            tool_id=state.tool.id,
            call_id=state.call_id,
            approval=request,
            message=(
                f"Tool {state.tool.id} needs a person's approval before it runs; request "
                f"{request.id} is waiting for a decision (it expires in "
                f"{max(0, int(request.expires_at - self.clock()))} s). Tell the user, and call the "
                "tool again with the same arguments once it is approved."
            ),
            metadata=state.metadata,
        )


def denied_outcome(state: CallState, request: ApprovalRequest) -> CallOutcome:
    """``user_rejection`` for a call a person denied."""
    note = f": {request.decision_message}" if request.decision_message else ""
    who = f" by {request.decided_by}" if request.decided_by else ""
    return error_outcome(
        state,
        ErrorCode.USER_REJECTION,
        f"The call to {state.tool.id} was denied{who}{note}. Do not retry it unchanged; ask the "
        "user what to do instead.",
    )


def replayed_outcome(
    state: CallState, request: ApprovalRequest, stored: Mapping[str, Any]
) -> CallOutcome:
    """The stored outcome of an approved call, as the outcome of the retry that collects it."""
    code = stored.get("code")
    return CallOutcome(
        status=CallStatus(stored.get("status", "error")),
        tool_id=state.tool.id,
        call_id=str(stored.get("call_id", state.call_id)),
        content=stored.get("content"),
        code=None if code is None else ErrorCode(code),
        message=stored.get("message"),
        visualization=stored.get("visualization"),
        duration=float(stored.get("duration", 0.0)),
        metadata={**state.metadata, "approval": {"id": request.id, "replayed": True}},
    )
