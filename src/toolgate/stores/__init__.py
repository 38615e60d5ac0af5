"""Stores hold the gateway's state behind protocols; SQLite is the embedded default."""

from .approvals import ApprovalStore, ClosedRequestError, DuplicateRequestError

__all__ = ["ApprovalStore", "ClosedRequestError", "DuplicateRequestError"]
