"""Stores hold the gateway's state behind protocols; SQLite is the embedded default."""

from .base import ApprovalStore, ClosedRequestError

__all__ = ["ApprovalStore", "ClosedRequestError"]
