"""The SecurityCheck stage: run the tool's check before the tool, and act on the verdict.

Fail closed: a check that is missing, crashes, times out or prints something other than a verdict
denies the call. The verdict that asks for a person (``allowed: false, requiresApproval: true``)
is handed to the Approval stage with its permission type and key; with no approver configured it
is denied there: a host with no way to ask a person denies.
"""

from __future__ import annotations

from typing import Protocol

from ..errors import ErrorCode
from ..model import CallOutcome, SecurityVerdict
from ..registry import RegisteredTool
from .state import CallState, Handler, error_outcome

__all__ = ["SecurityCheckStage", "SecurityChecker"]


class SecurityChecker(Protocol):
    """Produces a verdict for a call, or raises when it cannot."""

    async def check(self, state: CallState) -> SecurityVerdict:
        """The verdict; any exception counts as a denial."""
        ...


class SecurityCheckStage:
    """Runs the security check of tools that declare one."""

    name = "security_check"
    suspends = True

    def __init__(self, checker: SecurityChecker) -> None:
        self.checker = checker

    def applies_to(self, entry: RegisteredTool) -> bool:
        return entry.tool.security_check is not None

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        tool = state.tool
        try:
            verdict = await self.checker.check(state)
        except Exception as exc:  # noqa: BLE001 - fail closed, whatever went wrong
            return error_outcome(
                state,
                ErrorCode.SECURITY_BLOCKED,
                f"The security check of tool {tool.id} failed, so the call was denied: "
                f"{str(exc).rstrip('.')}. "
                "Tell the user the tool's security check is broken.",
                detail=repr(exc),
            )
        state.metadata["security"] = {
            "allowed": verdict.allowed,
            "requiresApproval": verdict.requires_approval,
            "asksAPerson": verdict.asks_a_person,
            "permissionType": verdict.permission_type,
            "permissionKey": verdict.permission_key,
            "message": verdict.message,
        }
        if verdict.allowed or verdict.asks_a_person:
            return await proceed(state)
        reason = verdict.message or "no reason given"
        return error_outcome(
            state,
            ErrorCode.SECURITY_BLOCKED,
            f"The security check of tool {tool.id} blocked this call: {reason}",
        )
