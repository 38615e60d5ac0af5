"""Rows of the approval database ↔ values: requests, grants and the columns they fill.

Used by :mod:`toolgate.stores.sqlite_approvals`; this module imports :mod:`sqlite3` (for types
only).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any, Final

from .._json import canonical_json, thaw
from ..model import ApprovalRequest, ApprovalStatus, Decision, Grant, PermissionKey

# The statuses ``find_open`` returns (a pending one only while unexpired).
_OPEN: Final = (
    ApprovalStatus.PENDING.value,
    ApprovalStatus.APPROVED.value,
    ApprovalStatus.RUNNING.value,
    ApprovalStatus.COMPLETED.value,
    ApprovalStatus.DENIED.value,
)

_REQUEST_COLUMNS: Final = (
    "id, tool_id, title, risk, facts, arguments, arguments_digest, definition_hash, "
    "created_at, expires_at, workspace, agent, session_id, permission_type, permission_key, "
    "security_message, display, status, decision, decided_by, decided_at, decision_message, "
    "namespaces"
)

_GRANT_COLUMNS: Final = (
    "id, workspace, tool_id, permission_type, permission_key, definition_hash, granted_by, "
    "granted_at, expires_at, approval_id, metadata"
)


def _request_from_row(row: sqlite3.Row) -> ApprovalRequest:
    """The one place a row of ``approvals`` becomes an :class:`ApprovalRequest`."""
    decision = row["decision"]
    return ApprovalRequest(
        id=row["id"],
        tool_id=row["tool_id"],
        title=row["title"],
        risk=row["risk"],
        facts=tuple((str(label), str(value)) for label, value in json.loads(row["facts"])),
        arguments=json.loads(row["arguments"]),
        arguments_digest=row["arguments_digest"],
        definition_hash=row["definition_hash"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        workspace=row["workspace"],
        agent=row["agent"],
        session_id=row["session_id"],
        permission=PermissionKey(row["permission_type"], row["permission_key"]),
        security_message=row["security_message"],
        display=row["display"],
        status=ApprovalStatus(row["status"]),
        decision=Decision(decision) if decision is not None else None,
        decided_by=row["decided_by"],
        decided_at=row["decided_at"],
        decision_message=row["decision_message"],
        namespaces=_namespaces(row["namespaces"]),
    )


def _namespaces(text: str | None) -> frozenset[str] | None:
    """The stored namespaces of a request: ``NULL`` is any; anything unreadable allows none
    (fail closed)."""
    if text is None:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        return frozenset()
    if not isinstance(found, list):
        return frozenset()
    return frozenset(item for item in found if isinstance(item, str))


def _request_to_row(request: ApprovalRequest) -> tuple[Any, ...]:
    """The values of :data:`_REQUEST_COLUMNS` for a request, in order."""
    return (
        request.id,
        request.tool_id,
        request.title,
        request.risk,
        canonical_json([[label, value] for label, value in request.facts]),
        canonical_json(thaw(request.arguments)),
        request.arguments_digest,
        request.definition_hash,
        request.created_at,
        request.expires_at,
        request.workspace,
        request.agent,
        request.session_id,
        request.permission.type,
        request.permission.key,
        request.security_message,
        request.display,
        request.status.value,
        request.decision.value if request.decision is not None else None,
        request.decided_by,
        request.decided_at,
        request.decision_message,
        None if request.namespaces is None else canonical_json(sorted(request.namespaces)),
    )


def _grant_from_row(row: sqlite3.Row) -> Grant:
    """The one place a row of ``grants`` becomes a :class:`Grant`."""
    return Grant(
        id=row["id"],
        workspace=row["workspace"],
        tool_id=row["tool_id"],
        permission=PermissionKey(row["permission_type"], row["permission_key"]),
        definition_hash=row["definition_hash"],
        granted_by=row["granted_by"],
        granted_at=row["granted_at"],
        expires_at=row["expires_at"],
        approval_id=row["approval_id"],
        metadata=json.loads(row["metadata"]),
    )


def _grant_to_row(grant: Grant) -> tuple[Any, ...]:
    """The values of :data:`_GRANT_COLUMNS` for a grant, in order."""
    return (
        grant.id,
        grant.workspace,
        grant.tool_id,
        grant.permission.type,
        grant.permission.key,
        grant.definition_hash,
        grant.granted_by,
        grant.granted_at,
        grant.expires_at,
        grant.approval_id,
        canonical_json(thaw(grant.metadata)),
    )


def _timestamp(at: float) -> str:
    """A Unix time as ISO 8601 UTC, for messages."""
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="seconds")


def _placeholders(values: tuple[Any, ...]) -> str:
    return ", ".join("?" * len(values))
