"""What :class:`toolgate.Client` sends and reads: URLs and path segments, and the API's JSON
(:mod:`toolgate.serve.api.views`) back as the values the in-process gateway returns."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import quote

import httpx2

from ..errors import ErrorCode, ToolgateError
from ..integrations.base import ToolSpec
from ..model import (
    ApprovalRequest,
    ApprovalStatus,
    CallOutcome,
    CallStatus,
    Overflow,
    PermissionKey,
)
from ..model.approval import Decision
from ..model.content import content_from_fields

__all__ = ["approval_of", "base_url", "outcome_of", "segment", "spec_of"]


def segment(value: str) -> str:
    """``value`` as one path segment: every reserved character percent-encoded, dots too (so
    ``..`` is not a step up that a URL normalizer would apply)."""
    return quote(value, safe="").replace(".", "%2E")


def base_url(url: str) -> httpx2.URL:
    """The server's base URL, checked: http(s), a host, no credentials, query or fragment."""
    if not isinstance(url, str):
        raise ToolgateError(f"url must be a string such as 'http://127.0.0.1:8470', not {url!r}")
    try:
        parsed = httpx2.URL(url.strip())
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise ToolgateError(f"not a URL: {url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise ToolgateError(f"the gateway's URL must start with http:// or https://, not {url!r}")
    if not parsed.host:
        raise ToolgateError(f"the gateway's URL names no host: {url!r}")
    if parsed.userinfo:
        raise ToolgateError(
            "the gateway's URL must not carry credentials (user:password@); pass the API key "
            "as key="
        )
    if parsed.query or parsed.fragment:
        raise ToolgateError(f"the gateway's URL must not have a query or fragment: {url!r}")
    return parsed.copy_with(path=parsed.path.rstrip("/") or "")


def spec_of(row: Mapping[str, Any]) -> ToolSpec:
    """A tool of ``GET /v1/tools?schemas=true`` or of a search, as adapters take it."""
    schema = dict(row.get("input_schema") or {})
    schema.setdefault("type", "object")
    annotations = {
        name: row[name]
        for name in ("requires_approval", "dangerous", "tile", "examples")
        if row.get(name) is not None
    }
    return ToolSpec(
        id=str(row["id"]),
        name=str(row["provider_name"]),
        description=str(row.get("description") or ""),
        parameters=schema,
        title=row.get("title"),
        side_effect=str(row.get("side_effect") or "read_only"),
        annotations=annotations,
    )


def _code(value: Any) -> ErrorCode | None:
    if value is None:
        return None
    try:
        return ErrorCode(value)
    except ValueError:
        # A code of a newer server: kept as the server said it (CallOutcome.text shows it).
        return cast(ErrorCode, str(value))


def outcome_of(data: Mapping[str, Any], body: Mapping[str, Any], agent: str | None) -> CallOutcome:
    """A call's answer (``CallOutcomeView``) as the :class:`CallOutcome` it was made from;
    ``body`` is the call's request body, ``agent`` who called."""
    overflow = data.get("overflow")
    pending = data.get("approval")
    approval = None
    if isinstance(pending, Mapping):
        # The API does not send the request's digests: they stay empty (approval_of too).
        approval = ApprovalRequest(
            id=str(pending["id"]),
            tool_id=str(data["tool"]),
            title=str(pending.get("title") or ""),
            risk=str(pending.get("risk") or ""),
            facts=tuple((str(k), str(v)) for k, v in pending.get("facts") or ()),
            arguments=body["arguments"],
            arguments_digest="",
            definition_hash="",
            # A server before created_at was sent: about now (the call just made it).
            created_at=float(pending.get("created_at") or time.time()),
            expires_at=float(pending.get("expires_at") or 0.0),
            workspace=body.get("workspace"),
            agent=agent,
            session_id=body.get("session_id"),
            display=pending.get("display"),
        )
    return CallOutcome(
        status=CallStatus(data["status"]),
        tool_id=str(data["tool"]),
        call_id=str(data.get("call_id") or ""),
        content=content_from_fields(data),
        code=_code(data.get("code")),
        message=data.get("message"),
        visualization=data.get("visualization"),
        overflow=None
        if not isinstance(overflow, Mapping)
        else Overflow(str(overflow["path"]), int(overflow["original_size"])),
        approval=approval,
        duration=float(data.get("duration") or 0.0),
        metadata=dict(data.get("metadata") or {}),
    )


def approval_of(data: Mapping[str, Any]) -> ApprovalRequest:
    """An approval request of ``GET /v1/approvals/{id}`` (``ApprovalView``).

    The API does not send the request's digests (``arguments_digest``, ``definition_hash``):
    they stay empty; ``arguments`` are as people are shown them (URL credentials masked)."""
    permission = data.get("permission") or {}
    decision = data.get("decision")
    return ApprovalRequest(
        id=str(data["id"]),
        tool_id=str(data["tool"]),
        title=str(data.get("title") or ""),
        risk=str(data.get("risk") or ""),
        facts=tuple((str(label), str(value)) for label, value in data.get("facts") or ()),
        arguments=dict(data.get("arguments") or {}),
        arguments_digest="",
        definition_hash="",
        created_at=float(data.get("created_at") or 0.0),
        expires_at=float(data.get("expires_at") or 0.0),
        workspace=data.get("workspace"),
        agent=data.get("agent"),
        session_id=data.get("session_id"),
        permission=PermissionKey(
            str(permission.get("type", "tool")), str(permission.get("key", "*"))
        ),
        security_message=data.get("security_message"),
        display=data.get("display"),
        status=ApprovalStatus(data.get("status", "pending")),
        decision=None if decision is None else Decision(decision),
        decided_by=data.get("decided_by"),
        decided_at=data.get("decided_at"),
        decision_message=data.get("decision_message"),
    )
