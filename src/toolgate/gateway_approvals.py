"""What a gateway answers about approval before a call runs: would a call wait for a person
now (:meth:`GatewayApprovals.approval_needed`), and the approval request of exactly this call,
found or made without running it (:meth:`GatewayApprovals.request_approval`) — the questions the
framework adapters ask before a framework decides to pause.

:class:`GatewayApprovals` is mixed into :class:`~toolgate.gateway.Gateway`, which builds the
registry, access rules, pipeline and approval stage these read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .model import ApprovalRequest, CallOutcome, CallStatus
from .pipeline import Pipeline
from .pipeline.approval import ApprovalStage
from .pipeline.approval_keys import REQUEST_ONLY
from .pipeline.authorize import POLICY_APPROVAL, AccessRules
from .pipeline.call_fields import call_fields_problem
from .pipeline.idempotency import IdempotencyStage
from .registry import Registry

__all__ = ["GatewayApprovals", "call_workspace"]


class GatewayApprovals:
    """The approval questions of a gateway (see the module docstring)."""

    registry: Registry
    access: AccessRules
    pipeline: Pipeline
    _approval_stage: ApprovalStage

    def _scope_to(self, namespaces: frozenset[str] | None) -> None:
        """A caller limited to ``namespaces`` is coming: from now on the Authorize stage checks
        every tool (it skips tools without rules until then)."""
        if namespaces is not None and not self.access.scoped:
            self.access.scoped = True
            self.pipeline.invalidate()

    def approval_needed(
        self,
        tool_id: str,
        *,
        agent: str | None = None,
        workspace: Path | str | None = None,
        namespaces: frozenset[str] | None = None,
    ) -> bool:
        """Whether a call of ``tool_id`` by ``agent`` would wait for a person now: the tool, the
        operator's approval rules or the agent's access rule require approval, and no live
        "always allow" grant for ``workspace`` covers it. ``False`` for a tool the caller may not
        call or a workspace no call may name (the call itself says why) and when no approver is
        configured (such a call is denied). A tool's security check may still ask when the call
        runs: the call's own ``pending_approval`` is the last word. Framework adapters ask this
        before a call, so that a granted tool is not put to a person again."""
        entry = self.registry.get(tool_id)
        if entry is None or call_fields_problem(None, None, None, workspace) is not None:
            return False
        decision = self.access.decide(entry.tool, agent, namespaces)
        if not decision.allowed:
            return False
        folder = call_workspace(workspace)
        return self._approval_stage.would_ask(
            entry.tool,
            required_by_policy=decision.requires_approval,
            workspace=None if folder is None else str(folder),
        )

    async def request_approval(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        workspace: Path | str | None = None,
        tool_call_id: str | None = None,
        namespaces: frozenset[str] | None = None,
        idempotency_key: str | None = None,
    ) -> ApprovalRequest | None:
        """The approval request of exactly this call — found, or made now and put to people —
        without running the call, ever: ``None`` when the call would not wait for a person now
        (no approval required, an "always allow" grant covers it, or the call would be refused:
        the call itself says why). A request already decided is returned as it stands (its
        ``status`` says approved or denied); only the call takes it. A framework whose pause is
        decided before its tool runs (the OpenAI Agents SDK's ``needs_approval``) asks this, so
        no side effect runs before the framework's own checks. The tool's security check is not
        run here: it may still ask when the call runs. With the call's ``idempotency_key``,
        ``None`` too when an earlier call holds that key: the call replays its outcome (it ran:
        nobody is asked again) or reports the conflict."""
        self._scope_to(namespaces)
        prepared = self.pipeline.prepare(
            tool_id,
            arguments,
            agent=agent,
            session_id=session_id,
            workspace=call_workspace(workspace),
            inline=False,
            metadata={REQUEST_ONLY: True},
            namespaces=namespaces,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )
        if isinstance(prepared, CallOutcome) or not isinstance(prepared[1].arguments, Mapping):
            return None
        _, state = prepared
        tool = state.tool
        decision = self.access.decide(tool, agent, namespaces)
        if not decision.allowed or self.pipeline.argument_problems(tool, state.arguments):
            return None
        if any(
            isinstance(stage, IdempotencyStage) and stage.would_replay(state)
            for stage in self.pipeline.stages
        ):
            return None  # the call ends at its key (a replay, a conflict): that stage comes first
        if decision.requires_approval:
            state.metadata[POLICY_APPROVAL] = decision.reason
        if not self._approval_stage.would_ask(
            tool,
            required_by_policy=decision.requires_approval,
            workspace=None if state.workspace is None else str(state.workspace),
        ):
            return None

        async def not_run(_: Any) -> CallOutcome:
            raise AssertionError("request_approval never runs a call")  # pragma: no cover

        outcome = await self._approval_stage(state, not_run)
        return outcome.approval if outcome.status is CallStatus.PENDING_APPROVAL else None


def call_workspace(workspace: Path | str | None) -> Path | None:
    """The folder a call names, absolute and resolved (``None``: none)."""
    # Absolute and resolved: approvals and grants are keyed by it, so "." must not mean
    # whatever folder the next caller happens to be in.
    if workspace is None:
        return None
    if "\x00" in str(workspace):
        # No folder has such a name: kept as written, for the pipeline to refuse the call
        # naming the field (resolving it would raise).
        return Path(workspace)
    path = Path(workspace).expanduser()
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        # A name that changes while it is resolved (a link swapped in a loop) or a link loop:
        # absolute is enough here; the workspace check and the sandbox resolve it again, from
        # what they open, and refuse it if it is not a folder a tool may have.
        return Path(os.path.abspath(path))
