"""Metadata keys the approval machinery passes along a call (shared by several stages)."""

from __future__ import annotations

__all__ = ["APPROVAL_DECISION", "APPROVAL_TAKEN", "REQUEST_ONLY"]

#: ``state.metadata`` key: the id of the approved request whose run this call is.
APPROVAL_TAKEN = "approval_taken"
#: ``state.metadata`` key: the decision (``approve`` or ``always``) behind that run.
APPROVAL_DECISION = "approval_decision"
#: ``state.metadata`` key: find or make this call's request, but never run it nor take a decided
#: request (:meth:`~toolgate.Gateway.request_approval`).
REQUEST_ONLY = "approval_request_only"
