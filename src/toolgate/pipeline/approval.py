"""The Approval stage: calls that need a person are never run without one.

Whether a tool needs approval is its declaration (``requireApproval``, ``approval.required``…),
else its side-effect level's default. Deny by default (Jean2 seed: "If onPermissionRequest callback
isn't configured and approval is required, the tool is denied by default for safety"): with no
approver configured, such a call ends in ``user_rejection`` with a message that tells the agent to
ask the user — it is never run silently.
"""

from __future__ import annotations

from ..errors import ErrorCode
from ..model import CallOutcome
from ..registry import RegisteredTool
from .state import CallState, Handler, error_outcome

__all__ = ["ApprovalStage"]


class ApprovalStage:
    """Denies calls to tools that need a person's approval when nobody can be asked."""

    name = "approval"
    suspends = False

    def applies_to(self, entry: RegisteredTool) -> bool:
        return entry.tool.requires_approval

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        tool = state.tool
        return error_outcome(
            state,
            ErrorCode.USER_REJECTION,
            f"Tool {tool.id} needs a person's approval before it runs "
            f"(side effect: {tool.side_effect}), and no approver is configured, so the call was "
            "denied. Ask the user to approve it, or to configure an approver.",
        )
