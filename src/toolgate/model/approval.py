"""Approval requests, decisions and "always allow" grants: values, no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .._json import freeze

__all__ = [
    "TOOL_WIDE_KEY",
    "ApprovalRequest",
    "ApprovalStatus",
    "Decision",
    "Grant",
    "PermissionKey",
]


class Decision(StrEnum):
    """What a person decided (Jean2: "Allow once" / "Always allow" / deny)."""

    APPROVE = "approve"
    """Run this exact call once."""
    ALWAYS = "always"
    """Run it, and store a grant so calls with the same key no longer ask."""
    DENY = "deny"


class ApprovalStatus(StrEnum):
    """Where a request is in its life."""

    PENDING = "pending"
    """Waiting for a person."""
    APPROVED = "approved"
    """Approved; the call has not run yet."""
    RUNNING = "running"
    """Approved and taken: the call is running now (exactly once)."""
    COMPLETED = "completed"
    """Approved and run; the outcome is stored under the request's id."""
    DENIED = "denied"
    EXPIRED = "expired"
    DELIVERED = "delivered"
    """The final outcome was handed to a retried call; the request is closed for good."""


@dataclass(frozen=True, slots=True)
class PermissionKey:
    """What a grant covers (Jean2: keyed by tool name, permission type and permission key)."""

    type: str
    key: str


#: The key of a tool without a security script: a grant covers the tool as a whole.
TOOL_WIDE_KEY = PermissionKey("tool", "*")


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for (or past) a person's decision. Returned as a value, never raised."""

    id: str
    tool_id: str
    title: str
    """Confirmation title (Jingle ``buildConfirmation``), else the tool's title."""
    risk: str
    """Risk label: the tool's own, else derived from its side-effect level."""
    facts: tuple[tuple[str, str], ...]
    """Label/value pairs the person sees."""
    arguments: Mapping[str, Any]
    """The exact arguments the approval covers."""
    arguments_digest: str
    """SHA-256 of the canonical JSON of ``arguments``."""
    definition_hash: str
    """The tool definition the person saw; a changed tool voids the request."""
    created_at: float
    expires_at: float
    workspace: str | None = None
    agent: str | None = None
    session_id: str | None = None
    permission: PermissionKey = TOOL_WIDE_KEY
    security_message: str | None = None
    """The security script's message, when the request comes from its verdict."""
    display: str | None = None
    """The one-line display of the call (tile ``ui``)."""
    status: ApprovalStatus = ApprovalStatus.PENDING
    decision: Decision | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    decision_message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", freeze(self.arguments))


@dataclass(frozen=True, slots=True)
class Grant:
    """An "always allow": calls of ``tool_id`` in ``workspace`` with this permission key run
    without asking, while the tool's definition is the one the person saw."""

    id: str
    workspace: str | None
    tool_id: str
    permission: PermissionKey
    definition_hash: str
    granted_by: str | None
    granted_at: float
    expires_at: float | None = None
    approval_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
