"""Metadata keys the approval machinery passes along a call (shared by several stages)."""

from __future__ import annotations

__all__ = ["APPROVAL_DECISION", "APPROVAL_TAKEN"]

#: ``state.metadata`` key: the id of the approved request whose run this call is.
APPROVAL_TAKEN = "approval_taken"
#: ``state.metadata`` key: the decision (``approve`` or ``always``) behind that run.
APPROVAL_DECISION = "approval_decision"
