"""Approval requests, decisions and "always allow" grants: values, no behaviour."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .._json import freeze, thaw
from ..redaction import record_masker, redact_url_credentials, redact_values

__all__ = [
    "TOOL_WIDE_KEY",
    "ApprovalRequest",
    "ApprovalStatus",
    "Decision",
    "Grant",
    "PermissionKey",
]


class Decision(StrEnum):
    """What a person decided: "Allow once", "Always allow" or deny."""

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
    """What a grant covers: it is keyed by tool name, permission type and permission key."""

    type: str
    key: str

    def to_dict(self) -> dict[str, str]:
        """``{"type": ..., "key": ...}``."""
        return {"type": self.type, "key": self.key}


#: The key of a tool without a security script: a grant covers the tool as a whole.
TOOL_WIDE_KEY = PermissionKey("tool", "*")


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for (or past) a person's decision. Returned as a value, never raised."""

    id: str
    tool_id: str
    title: str
    """Confirmation title (``buildConfirmation``), else the tool's title."""
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
    namespaces: frozenset[str] | None = None
    """The tool namespaces the credentials the call was requested with allow (an OAuth token's
    scopes; ``None``: any). The run a decision starts is checked against them again."""
    status: ApprovalStatus = ApprovalStatus.PENDING
    decision: Decision | None = None
    decided_by: str | None = None
    decided_at: float | None = None
    decision_message: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "arguments", freeze(self.arguments))

    def shown_arguments(self) -> Any:
        """The arguments as people are shown them (API, CLI, web UI, MCP elicitation): the
        credentials of any URL in them masked. The call itself runs with the exact ones."""
        return redact_values(thaw(self.arguments), record_masker())

    def shown_facts(self) -> list[tuple[str, str]]:
        """The facts as people are shown them (URL credentials masked)."""
        return [(str(label), redact_url_credentials(str(value))) for label, value in self.facts]

    def to_dict(self, display: str | None = None) -> dict[str, Any]:
        """JSON-ready (times are Unix seconds), with the call's one-line ``display`` (else the
        request's own): what the CLI's ``--json`` and the HTTP API print. URL credentials in
        the arguments, the title, the display and the facts are masked."""
        shown = display or self.display or None
        return {
            "id": self.id,
            "tool": self.tool_id,
            "title": redact_url_credentials(self.title),
            "display": None if shown is None else redact_url_credentials(shown),
            "risk": self.risk,
            "facts": [list(fact) for fact in self.shown_facts()],
            "arguments": self.shown_arguments(),
            "workspace": self.workspace,
            "agent": self.agent,
            "session_id": self.session_id,
            "permission": self.permission.to_dict(),
            "security_message": self.security_message,
            "status": str(self.status),
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "decision": None if self.decision is None else str(self.decision),
            "decided_by": self.decided_by,
            "decided_at": self.decided_at,
            "decision_message": self.decision_message,
        }


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

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (times are Unix seconds)."""
        return {
            "id": self.id,
            "tool": self.tool_id,
            "workspace": self.workspace,
            "permission": self.permission.to_dict(),
            "granted_by": self.granted_by,
            "granted_at": self.granted_at,
            "expires_at": self.expires_at,
            "approval_id": self.approval_id,
        }
