"""The protocols stores implement. The pipeline and the gateway depend on these, never on a
concrete store, so a server database can replace SQLite behind the same calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..model import ApprovalRequest, ApprovalStatus, Decision, Grant, PermissionKey

__all__ = ["ApprovalStore", "ClosedRequestError", "DuplicateRequestError"]


class ClosedRequestError(LookupError):
    """The request does not exist, or is no longer in the state the operation needs."""


class DuplicateRequestError(Exception):
    """This exact call already has a pending request (another caller created it first)."""


class ApprovalStore(Protocol):
    """Approval requests, their decisions and outcomes, "always allow" grants, and an event log.

    Every state change is atomic: two deciders racing on one request, or two retries racing to
    use one approval, see exactly one winner.
    """

    def create(self, request: ApprovalRequest) -> None:
        """Store a new pending request."""
        ...

    def get(self, request_id: str) -> ApprovalRequest | None:
        """The request with this id (any status), or ``None``."""
        ...

    def find_open(
        self,
        *,
        tool_id: str,
        definition_hash: str,
        arguments_digest: str,
        workspace: str | None,
        agent: str | None,
        now: float,
    ) -> ApprovalRequest | None:
        """The newest request for exactly this call that is not yet closed.

        "Not closed": ``pending`` and not expired (a pending request found expired is marked
        ``expired`` and not returned), ``approved``, ``running``, ``completed`` or ``denied``.
        :meth:`create` refuses a second pending request for the same call
        (:class:`DuplicateRequestError`).
        """
        ...

    def pending(self, *, now: float) -> list[ApprovalRequest]:
        """Every pending, unexpired request, oldest first (expired ones are marked so)."""
        ...

    def count_pending(self, *, agent: str | None, tool_id: str, now: float) -> tuple[int, int]:
        """How many unexpired requests of ``agent`` wait for a decision: (for ``tool_id``, for
        every tool). ``agent`` matches NULL-safely."""
        ...

    def decide(
        self,
        request_id: str,
        decision: Decision,
        *,
        decided_by: str | None,
        message: str | None,
        now: float,
    ) -> ApprovalRequest:
        """Record a decision on a pending, unexpired request; return the updated request.

        ``approve`` / ``always`` → ``approved``; ``deny`` → ``denied``. Raises
        :class:`ClosedRequestError` when the request is unknown, already decided or expired.
        """
        ...

    def transition(
        self, request_id: str, *, from_status: ApprovalStatus, to_status: ApprovalStatus
    ) -> bool:
        """Move a request between two states atomically; False when it was not in
        ``from_status`` (someone else moved it first)."""
        ...

    def store_outcome(self, request_id: str, outcome: Mapping[str, Any]) -> None:
        """Keep the outcome of the approved call (JSON-ready) and mark it ``completed``."""
        ...

    def outcome(self, request_id: str) -> dict[str, Any] | None:
        """The stored outcome of the approved call, if it has run."""
        ...

    def add_grant(self, grant: Grant) -> None:
        """Store an "always allow" grant."""
        ...

    def find_grant(
        self,
        *,
        workspace: str | None,
        tool_id: str,
        permission: PermissionKey,
        definition_hash: str,
        now: float,
    ) -> Grant | None:
        """A live grant covering exactly this workspace, tool, key and tool definition."""
        ...

    def grants(self, *, now: float) -> list[Grant]:
        """Every live (unrevoked, unexpired) grant, newest first."""
        ...

    def revoke_grant(self, grant_id: str, *, now: float) -> bool:
        """Revoke a grant; False when there was no live grant with this id."""
        ...

    def record_event(
        self,
        request_id: str,
        kind: str,
        *,
        actor: str | None,
        at: float,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append to the approval log: who did what, when (the audit feature reads it)."""
        ...

    def events(self, request_id: str) -> list[dict[str, Any]]:
        """The log of one request, oldest first."""
        ...

    def close(self) -> None:
        """Release the database."""
        ...
