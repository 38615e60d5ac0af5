"""The approval queue, decisions and approvers: what surfaces use to let people decide.

``gateway.approvals`` lists pending requests, records decisions (``approve``; ``always`` also
stores a grant; ``deny`` ends the call with ``user_rejection``), lists and revokes grants, and —
for callers that asked to wait — consults the configured approver. A decision is all a person's
surface writes (CLI, web UI, HTTP API): the call belongs to the agent that asked, and its retry
runs the approved call, once (``run`` does it in the deciding process, when a person asks for
that explicitly). An approver that raises, returns something that is not a decision, or does not
answer in time denies.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .errors import ApprovalClosedError
from .model import ApprovalRequest, ApprovalStatus, CallOutcome, Decision, Grant
from .pipeline.approval_outcomes import denied_outcome, replayed_outcome
from .registry import Registry
from .stores.approvals import ApprovalStore, ClosedRequestError

__all__ = ["ApprovalService", "Approver", "parse_decision"]

#: A person (or program) deciding: sync or async, returning a decision, optionally with a message.
Approver = Callable[
    [ApprovalRequest],
    "Decision | str | tuple[Decision | str, str | None] | Awaitable[Any]",
]
RunCall = Callable[[ApprovalRequest], Awaitable[CallOutcome]]

#: Seconds between two looks at the store while a caller waits for a decision made elsewhere.
POLL_INTERVAL = 0.1


def parse_decision(value: Any) -> tuple[Decision, str | None]:
    """Read what an approver returned: a decision (or its name), optionally with a message."""
    message = None
    if isinstance(value, tuple) and len(value) == 2:
        value, message = value
    if isinstance(value, bool):
        raise ValueError("an approver must return approve, always or deny, not a bool")
    return Decision(value), None if message is None else str(message)


class ApprovalService:
    """The pending-queue API: ``pending()``, ``decide(id, ...)``, ``result(id)``, grants."""

    def __init__(
        self,
        *,
        store: ApprovalStore,
        registry: Registry,
        run: RunCall,
        approver: Approver | None = None,
        clock: Callable[[], float] = time.time,
        on_denied: Callable[[ApprovalRequest, CallOutcome], None] | None = None,
        scrub: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self._run = run
        self._on_denied = on_denied
        self._scrub = scrub
        """Masks the secrets the tool (by id) received in an outcome before it is stored."""
        """Told about each denial, so that the audit log records how the call ended."""
        self.approver = approver
        self.clock = clock

    # -- the queue ------------------------------------------------------------------------------

    def pending(self) -> list[ApprovalRequest]:
        """Requests waiting for a decision, oldest first."""
        return self.store.pending(now=self.clock())

    def get(self, request_id: str) -> ApprovalRequest:
        """A request by id (any status). Raises :class:`ApprovalClosedError` when unknown."""
        request = self.store.get(request_id)
        if request is None:
            raise ApprovalClosedError(f"no approval request {request_id!r}")
        return request

    def events(self, request_id: str) -> list[dict[str, Any]]:
        """Who asked, who decided, what ran — the request's log, oldest first."""
        return self.store.events(request_id)

    def decide(
        self,
        request_id: str,
        decision: Decision | str,
        *,
        by: str | None = None,
        message: str | None = None,
        grant_ttl: float | None = None,
        void_if_changed: bool = True,
    ) -> ApprovalRequest:
        """Record a person's decision on a pending request, and return the decided request.

        Only the decision is written; nothing runs here. The call belongs to the agent that
        asked: its retry with the same arguments runs an approved call, once, as that agent
        (or a caller waiting with :meth:`wait` runs it). ``always`` also stores a grant
        (expiring after ``grant_ttl`` seconds, if given); ``deny`` ends the call in
        ``user_rejection`` (:meth:`result` gives that outcome at once). Every process sharing
        the state sees the decision at its next look: the request lives in the store, never
        in a copy. Raises :class:`ApprovalClosedError` when the request is unknown, already
        decided or expired, or when this gateway knows the tool with another definition than
        the one the request was made for: the request is then voided — unless
        ``void_if_changed`` is false, as for a process that does not serve the request (the
        CLI in another folder may read another version of the tool than the server runs).
        """
        decision = Decision(decision)
        request = self.get(request_id)
        now = self.clock()
        entry = self.registry.get(request.tool_id)
        # A deciding process that does not declare the tool (the CLI in another folder) still
        # records the decision: the retry only matches a request made for the definition it
        # runs, so a changed tool never runs on an old approval.
        if entry is not None and entry.tool.definition_hash != request.definition_hash:
            if not void_if_changed:
                raise ApprovalClosedError(
                    f"the tool {request.tool_id} is declared here with another definition than "
                    f"the one request {request_id} was made for; nothing was decided — decide "
                    "it where the server's toolgate.yaml is found (or pass --config), or in "
                    "the web UI"
                )
            self._void(request, now)
            raise ApprovalClosedError(
                f"the tool {request.tool_id} changed since request {request_id} was made; it "
                "was voided — call the tool again to ask anew"
            )
        try:
            decided = self.store.decide(
                request_id, decision, decided_by=by, message=message, now=now
            )
        except ClosedRequestError as exc:
            raise ApprovalClosedError(str(exc)) from None
        self.store.record_event(
            request_id, "decided", actor=by, at=now, detail={"decision": str(decision)}
        )
        if decision is Decision.DENY:
            if self._on_denied is not None:
                # A person's denial means "not this"; the gateway's own (a failed approver)
                # does not.
                self._on_denied(decided, denied_outcome(decided, retry_hint=by != "toolgate"))
            return decided
        if decision is Decision.ALWAYS:
            self.store.add_grant(
                Grant(
                    id="grt_" + os.urandom(12).hex(),
                    workspace=decided.workspace,
                    tool_id=decided.tool_id,
                    permission=decided.permission,
                    definition_hash=decided.definition_hash,
                    granted_by=by,
                    granted_at=now,
                    expires_at=None if grant_ttl is None else now + grant_ttl,
                    approval_id=decided.id,
                )
            )
            self.store.record_event(request_id, "granted", actor=by, at=now)
        return decided

    async def run(self, request_id: str) -> CallOutcome:
        """Run an approved call now, in this process, and keep its outcome for the agent.

        Only for a person who asked for it explicitly (``toolgate approvals approve --run``) or
        for the caller that waited for the decision: the agent's retry then collects the stored
        outcome instead of running the tool again. When the call already runs (the agent's retry
        took the approval first) its outcome is awaited. Raises :class:`ApprovalClosedError`
        when the request is not approved, or this gateway does not have the tool's definition
        the request was made for.
        """
        request = self.get(request_id)
        if request.status is ApprovalStatus.DENIED:
            return denied_outcome(request)
        if request.status not in (
            ApprovalStatus.APPROVED,
            ApprovalStatus.RUNNING,
            ApprovalStatus.COMPLETED,
        ):
            raise ApprovalClosedError(f"request {request_id} is {request.status}, not approved")
        entry = self.registry.get(request.tool_id)
        if entry is None or entry.tool.definition_hash != request.definition_hash:
            raise ApprovalClosedError(
                f"the tool {request.tool_id} of request {request_id} is not declared here with "
                "the definition the request was made for, so it cannot run here; the agent's "
                "retry runs it where it is served"
            )
        return await self._run_once(request)

    async def _run_once(self, request: ApprovalRequest) -> CallOutcome:
        """Run the approved call now — unless a retry took the approval first; then its outcome."""
        if not self.store.transition(
            request.id, from_status=ApprovalStatus.APPROVED, to_status=ApprovalStatus.RUNNING
        ):
            return await self._outcome_of(request)
        return await self._execute(request)

    async def _execute(self, request: ApprovalRequest) -> CallOutcome:
        """Run a request this caller moved to ``running``, and store its (scrubbed) outcome."""
        store = self.store
        try:
            outcome = await self._run(request)
        except BaseException:
            store.transition(
                request.id, from_status=ApprovalStatus.RUNNING, to_status=ApprovalStatus.DELIVERED
            )
            raise
        kept = outcome.to_dict()
        if self._scrub is not None:
            kept = self._scrub(request.tool_id, kept)
        store.store_outcome(request.id, kept)  # collectable by the agent's retry
        store.record_event(request.id, "ran", actor=request.agent, at=self.clock())
        return outcome

    async def _outcome_of(self, request: ApprovalRequest) -> CallOutcome:
        """Wait for the run another caller started, and return its outcome."""
        current = await self._when_run(request)
        stored = self.store.outcome(request.id)
        if stored is not None:
            return replayed_outcome(current, stored)
        return denied_outcome(current, retry_hint=False)

    async def _when_run(self, request: ApprovalRequest) -> ApprovalRequest:
        """The request once the run another caller started has ended (or the tool's timeout,
        with a margin, has passed)."""
        entry = self.registry.get(request.tool_id)
        deadline = self.clock() + (entry.tool.timeout if entry else 60.0) + 30.0
        current = self.get(request.id)
        while current.status is ApprovalStatus.RUNNING and self.clock() < deadline:
            await asyncio.sleep(POLL_INTERVAL)
            current = self.get(request.id)
        return current

    def _void(self, request: ApprovalRequest, now: float) -> None:
        if request.status is ApprovalStatus.PENDING:
            with contextlib.suppress(ClosedRequestError):  # decided meanwhile: nothing to void
                self.store.decide(
                    request.id,
                    Decision.DENY,
                    decided_by="toolgate",
                    message="the tool changed since the request was made",
                    now=now,
                )

    def result(self, request_id: str) -> CallOutcome | None:
        """The outcome of a decided request (``None`` while it waits or runs)."""
        request = self.get(request_id)
        if request.decision is Decision.DENY:
            return denied_outcome(request)
        stored = self.store.outcome(request_id)
        return None if stored is None else replayed_outcome(request, stored)

    def collect(self, request: ApprovalRequest) -> CallOutcome | None:
        """Hand the final outcome of a decided request to the caller that waited for it, once."""
        outcome = self.result(request.id)
        if outcome is not None and not self.store.transition(
            request.id, from_status=request.status, to_status=ApprovalStatus.DELIVERED
        ):
            return None  # a retry collected it first
        return outcome

    # -- grants ---------------------------------------------------------------------------------

    def grants(self) -> list[Grant]:
        """Live "always allow" grants, newest first."""
        return self.store.grants(now=self.clock())

    def revoke(self, grant_id: str) -> bool:
        """Revoke a grant; False when no live grant has this id."""
        return self.store.revoke_grant(grant_id, now=self.clock())

    # -- waiting --------------------------------------------------------------------------------

    async def wait(self, request: ApprovalRequest, timeout: float) -> CallOutcome | None:
        """Wait up to ``timeout`` seconds for a decision on ``request`` and return the outcome.

        The caller is the agent's call that made the request: once approved, it runs the call
        itself, here. With an approver configured it is asked; without one, the queue is
        watched (see :meth:`wait_for_decision`). ``None`` when nothing was decided in time, or
        another caller (the agent's own retry) took the approval first.
        """
        if self.approver is not None:
            return await self._ask_approver(request, timeout)
        decided = await self.wait_for_decision(request, timeout)
        return None if decided is None else await self.settle(decided)

    async def wait_for_decision(
        self, request: ApprovalRequest, timeout: float
    ) -> ApprovalRequest | None:
        """Wait up to ``timeout`` seconds for ``request`` to leave ``pending``, and return it as
        it is then; ``None`` when it did not. Runs nothing.

        With an approver configured it is asked (its answer is recorded); otherwise the store is
        watched (a short poll, :data:`POLL_INTERVAL`) for a decision made anywhere — the CLI,
        the HTTP API, the web UI, another replica.
        """
        if self.approver is not None:
            await self._approver_decides(request, timeout)
            current = self.get(request.id)
            return None if current.status is ApprovalStatus.PENDING else current
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            current = self.get(request.id)
            if current.status is not ApprovalStatus.PENDING:
                return current
            await asyncio.sleep(POLL_INTERVAL)
        return None

    async def settle(self, request: ApprovalRequest) -> CallOutcome | None:
        """The outcome of a decided request for the caller that waited for it, handed over
        once: an approved call runs now, here (this caller is the agent's call); a run another
        caller started is waited for; a refusal or a stored outcome is collected. ``None`` when
        it expired, or another caller has (or took) the outcome."""
        current = self.get(request.id)
        if current.status is ApprovalStatus.APPROVED:
            return await self._run_and_deliver(current)
        if current.status is ApprovalStatus.RUNNING:
            return await self._collect_when_done(current)
        if current.status in (ApprovalStatus.COMPLETED, ApprovalStatus.DENIED):
            return self.collect(current)
        return None

    async def _run_and_deliver(self, request: ApprovalRequest) -> CallOutcome | None:
        """Run an approved call for the caller that waited for it, and close the request: this
        caller has the outcome, nothing is left for a retry to collect. When another caller
        took the approval first, its outcome is collected if nobody has it yet."""
        if not self.store.transition(
            request.id, from_status=ApprovalStatus.APPROVED, to_status=ApprovalStatus.RUNNING
        ):
            return await self._collect_when_done(request)
        outcome = await self._execute(request)
        self.store.transition(
            request.id, from_status=ApprovalStatus.COMPLETED, to_status=ApprovalStatus.DELIVERED
        )
        return outcome

    async def _collect_when_done(self, request: ApprovalRequest) -> CallOutcome | None:
        """Wait for the run another caller started, then collect its outcome — once: ``None``
        when that caller (or another) has it."""
        current = await self._when_run(request)
        return self.collect(current) if current.status is ApprovalStatus.COMPLETED else None

    async def _ask_approver(self, request: ApprovalRequest, timeout: float) -> CallOutcome:
        """Ask the approver, record its decision, and settle the request for this caller."""
        closed = await self._approver_decides(request, timeout)
        settled = await self.settle(request)
        if settled is not None:
            return settled
        return denied_outcome(
            dataclasses.replace(
                request,
                decided_by="toolgate",
                decision_message=closed or "another caller took the approval first",
            ),
            retry_hint=False,
        )

    async def _approver_decides(self, request: ApprovalRequest, timeout: float) -> str | None:
        """Ask the approver and record its answer (a failing approver denies); runs nothing.
        Returns why the answer could not be recorded (decided elsewhere, expired), else
        ``None``."""
        approver = self.approver
        assert approver is not None
        try:
            answer: Any
            if inspect.iscoroutinefunction(approver):
                answer = await asyncio.wait_for(approver(request), timeout)
            else:
                answer = await asyncio.wait_for(asyncio.to_thread(approver, request), timeout)
            if inspect.isawaitable(answer):
                answer = await asyncio.wait_for(answer, timeout)
            decision, message = parse_decision(answer)
            # An approver may say whom it decided for (the terminal prompt: the OS user).
            by = str(getattr(approver, "name", None) or "approver")
        except Exception as exc:  # noqa: BLE001 - an approver that fails denies
            reason = "did not answer in time" if isinstance(exc, TimeoutError) else f"failed: {exc}"
            decision, message, by = Decision.DENY, f"the approver {reason}", "toolgate"
        try:
            self.decide(request.id, decision, by=by, message=message)
        except ApprovalClosedError as exc:
            return str(exc)  # decided elsewhere (CLI, web UI) meanwhile, or expired
        return None
