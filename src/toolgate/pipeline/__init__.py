"""The call pipeline. This module is the only place where the order of the stages is written.

    Resolve → AuditGuard → Authorize → ValidateArgs → RateLimit → Idempotency → SecurityCheck
            → Approval → Concurrency (a slot of the tool, or a bounded wait for one)
            → AuditReservation (the audit log can keep the record of a side effect)
            → Execute (run with timeout, contain failures) → ShapeResult

Stages are given to the :class:`Pipeline` by the gateway (the composition root) and always run in
:data:`STAGE_ORDER`, whatever order they were passed in. Each says which tools it applies to, and a
per-tool *plan* chains only the stages that apply, so a tool pays for no rule it does not have.
"""

from __future__ import annotations

import functools
import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..call_state import new_call_id
from ..errors import ErrorCode, StateUnavailableError
from ..model import CallOutcome, Tool
from ..registry import RegisteredTool, Registry
from .authorize import AccessRules, unknown_tool_message
from .call_fields import call_fields_problem
from .execute import Executor, relative_paths
from .observers import CallObserver, FinishedCall
from .state import CallState, Handler, Stage, error_outcome
from .tracing import CallTracer, StageCall
from .validation import ValidateArgumentsStage

__all__ = ["STAGE_ORDER", "Pipeline", "Plan", "Stage"]

#: The order of the checks before a tool runs, by stage name.
STAGE_ORDER = (
    "audit_guard",
    "authorize",
    "validate_arguments",
    "rate_limit",
    "idempotency",
    "security_check",
    "approval",
    "concurrency",
    "audit_reservation",
)

log = logging.getLogger("toolgate.pipeline")


class Plan:
    """The chain of stages compiled for one registered tool."""

    __slots__ = ("entry", "handler", "inline")

    def __init__(self, entry: RegisteredTool, handler: Handler, inline: bool) -> None:
        self.entry = entry
        self.handler = handler
        self.inline = inline
        """True when ``call_sync`` may run this plan without an event loop."""


class Pipeline:
    """Runs calls: resolve the tool, then its plan."""

    def __init__(
        self,
        registry: Registry,
        executor: Executor,
        *,
        stages: Sequence[Stage] = (),
        observers: Sequence[CallObserver] = (),
        secret_values: Callable[[Tool], tuple[str, ...]] = lambda tool: (),
        tracer: CallTracer | None = None,
        access: AccessRules | None = None,
        workspace_check: Callable[[Tool, Path], str | None] | None = None,
    ) -> None:
        self.registry = registry
        self.access = access
        """Who may see which tool: a call to a tool its caller may not see resolves like a call
        to a tool that does not exist (``None``: every caller sees every tool)."""
        self.workspace_check = workspace_check
        """Why a tool may not have a call's workspace (``None``: it may), asked before any
        stage runs (the sandbox's rule, :meth:`~toolgate.sandbox.runner.Sandbox.workspace_refusal`):
        a refused workspace is ``forbidden`` on every surface, before approval is asked."""
        self.executor = executor
        self.observers: tuple[CallObserver, ...] = tuple(observers)
        """Told about every finished call (audit, statistics)."""
        self.secret_values = secret_values
        self.tracer = tracer
        """Wraps each compiled plan in spans (``None``: tracing is off and plans are bare)."""
        given = (ValidateArgumentsStage(), *stages)
        unknown = [stage.name for stage in given if stage.name not in STAGE_ORDER]
        if unknown:
            raise ValueError(f"unknown pipeline stages {unknown}; known: {STAGE_ORDER}")
        self.stages: tuple[Stage, ...] = tuple(
            sorted(given, key=lambda stage: STAGE_ORDER.index(stage.name))
        )
        self._plans: dict[str, Plan] = {}

    def argument_problems(self, tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
        """What the validation stage would refuse in ``arguments`` for ``tool`` (``[]``: none),
        for a caller that must know before anything runs."""
        stage = next(s for s in self.stages if isinstance(s, ValidateArgumentsStage))
        return stage.problems(tool, arguments)

    def invalidate(self) -> None:
        """Forget every compiled plan (a stage's ``applies_to`` answer may have changed, e.g.
        new access policies)."""
        self._plans = {}

    def plan_for(self, entry: RegisteredTool) -> Plan:
        """The compiled plan for this exact registration (recompiled when it is replaced)."""
        plan = self._plans.get(entry.tool.id)
        if plan is not None and plan.entry is entry:
            return plan
        applicable = [stage for stage in self.stages if stage.applies_to(entry)]
        tracer = self.tracer
        handler: Handler = self.executor
        if tracer is not None:
            handler = tracer.wrap_execute(handler, entry)
        for stage in reversed(applicable):
            traced: StageCall = (
                stage if tracer is None or not stage.suspends else tracer.wrap_stage(stage)
            )
            handler = functools.partial(traced, proceed=handler)
        if tracer is not None:
            handler = tracer.wrap_call(handler)
        backend = self.executor.backend_for(entry.tool.kind)
        inline = (
            backend is not None
            and backend.can_run_inline(entry)
            and not any(stage.suspends for stage in applicable)
        )
        plan = Plan(entry, handler, inline)
        self._plans[entry.tool.id] = plan
        return plan

    def prepare(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None,
        *,
        agent: str | None,
        session_id: str | None,
        workspace: Path | None,
        inline: bool,
        metadata: Mapping[str, Any] | None = None,
        namespaces: frozenset[str] | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[Plan, CallState] | CallOutcome:
        """Resolve the tool. Returns its plan and the call state, or the outcome that ends it."""
        call_id = new_call_id()
        entry = self.registry.get(tool_id)
        hidden_by = (
            None
            if entry is None or self.access is None
            else self.access.hidden_by(entry.tool, agent, namespaces)
        )
        if entry is None or hidden_by is not None:
            # A tool this caller may not see does not exist for it: the same code, message and
            # suggestions (among the tools it may see) as a tool that does not exist at all.
            outcome = error_outcome(
                None,
                ErrorCode.TOOL_NOT_FOUND,
                unknown_tool_message(tool_id, self.suggestions(tool_id, agent, namespaces)),
                tool_id=tool_id,
                call_id=call_id,
            )
            if self.observers:
                # The operator's record says what happened: the rule that refused the call.
                recorded = outcome
                if entry is not None:
                    recorded = error_outcome(
                        None,
                        ErrorCode.FORBIDDEN,
                        f"You may not call tool {entry.tool.id}: {hidden_by}.",
                        tool_id=entry.tool.id,
                        call_id=call_id,
                    )
                self.notify(
                    FinishedCall(
                        call_id=call_id,
                        tool_id=recorded.tool_id,
                        tool=None if entry is None else entry.tool,
                        # No tool: nothing says which values are secret (its redacted paths,
                        # log_args), so none are recorded — not even the keys.
                        arguments=(
                            arguments
                            if entry is not None and isinstance(arguments, Mapping)
                            else {}
                        ),
                        agent=agent,
                        session_id=session_id,
                        workspace=None if workspace is None else str(workspace),
                        started_at=time.time(),
                        outcome=recorded,
                    )
                )
            return outcome
        problem = call_fields_problem(session_id, tool_call_id, idempotency_key, workspace)
        if problem is not None:
            # Kept out of the state: nothing may store or digest them (the audit record).
            session_id = tool_call_id = idempotency_key = None
            workspace = None
        plan = self.plan_for(entry)
        state = CallState(
            call_id=call_id,
            entry=entry,
            arguments={} if arguments is None else arguments,
            agent=agent,
            session_id=session_id,
            workspace=workspace,
            inline=inline and plan.inline,
            namespaces=namespaces,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )
        if metadata:
            state.metadata.update(metadata)
        if problem is not None:
            return self.finish(
                state,
                error_outcome(
                    state,
                    ErrorCode.INVALID_ARGUMENTS,
                    f"The call of {entry.tool.id} was not made: {problem}.",
                ),
            )
        if entry.unavailable_reason is not None:
            return self.finish(
                state,
                error_outcome(
                    state,
                    ErrorCode.UNAVAILABLE,
                    # Relative paths: the caller learns nothing of the host's layout.
                    f"Tool {entry.tool.id} is unavailable: "
                    f"{relative_paths(entry.unavailable_reason, entry.tool)}",
                ),
            )
        if workspace is not None and self.workspace_check is not None:
            refused = self.workspace_check(entry.tool, workspace)
            if refused is not None:
                return self.finish(state, error_outcome(state, ErrorCode.FORBIDDEN, refused))
        return plan, state

    def suggestions(
        self, name: str, agent: str | None, namespaces: frozenset[str] | None
    ) -> tuple[str, ...]:
        """The closest tool ids to ``name`` among the tools this caller may see."""
        access = self.access
        if access is None:
            return self.registry.suggestions(name)
        return self.registry.suggestions(
            name, among=lambda tool: access.visible(tool, agent, namespaces)
        )

    def finish(self, state: CallState, outcome: CallOutcome) -> CallOutcome:
        """Tell the observers how the call ended; return the outcome."""
        if self.observers:
            tool = state.tool
            self.notify(
                FinishedCall(
                    call_id=state.call_id,
                    tool_id=tool.id,
                    tool=tool,
                    arguments=state.arguments,
                    agent=state.agent,
                    session_id=state.session_id,
                    workspace=None if state.workspace is None else str(state.workspace),
                    started_at=state.started_at,
                    outcome=outcome,
                    secrets=self.secret_values(tool) if tool.secrets or tool.env else (),
                    full_content=state.full_content,
                )
            )
        return outcome

    def notify(self, call: FinishedCall) -> None:
        """Show a finished call to every observer (also used for calls that end outside the
        pipeline, such as a person's denial of a pending request)."""
        for observer in self.observers:
            try:
                observer.observe(call)
            except Exception:
                log.exception("call observer %r failed", observer)

    def run_inline(self, plan: Plan, state: CallState) -> CallOutcome:
        """Run a prepared call of an inline plan in the calling thread, without an event loop.

        No stage of an inline plan awaits anything, so the coroutine finishes on its first step:
        it is driven by hand. Never raises.
        """
        coroutine = self.run(plan, state)
        try:
            coroutine.send(None)
        except StopIteration as finished:
            outcome: CallOutcome = finished.value
            return outcome
        coroutine.close()
        return error_outcome(
            state,
            ErrorCode.CRASHED,
            f"The gateway failed while handling this call to {state.tool.id} (an inline stage "
            "suspended). This is not caused by your arguments.",
        )

    async def run(self, plan: Plan, state: CallState) -> CallOutcome:
        """Run a prepared call. Never raises (except cancellation of the caller's own task)."""
        try:
            outcome = await plan.handler(state)
        except StateUnavailableError as exc:
            # PostgreSQL or Redis is down: fail closed, say so, keep serving.
            outcome = error_outcome(
                state,
                ErrorCode.UNAVAILABLE,
                f"{state.tool.id} cannot run now: {exc}. The gateway reconnects by itself; "
                "try again shortly.",
            )
        except Exception as exc:
            log.exception("pipeline failure in call %s to %s", state.call_id, state.tool.id)
            outcome = error_outcome(
                state,
                ErrorCode.CRASHED,
                f"The gateway failed while handling this call to {state.tool.id} "
                f"({type(exc).__name__}). This is not caused by your arguments; try again later.",
                detail=traceback.format_exc(),
            )
        return self.finish(state, outcome)
