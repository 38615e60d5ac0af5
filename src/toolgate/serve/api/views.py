"""Gateway values as the JSON the HTTP API sends (the shapes of :mod:`.models`)."""

from __future__ import annotations

import shlex
from typing import Any

from ...formats._common.diagnostics import Diagnostic
from ...formats.declarations import SourceAlert
from ...health import ToolStatus
from ...model import ApprovalRequest, CallOutcome, CallStatus, Grant, TileDisplay, Tool
from ...model.display import render_display, safe_text
from ...model.names import to_mcp_name, to_provider_name
from ...pipeline.approval_policy import ApprovalPolicy
from ...redaction import redact_url_credentials
from ...registry import RegisteredTool

__all__ = [
    "alert_view",
    "approval_view",
    "diagnostic_view",
    "grant_view",
    "outcome_view",
    "status_view",
    "tool_detail",
    "tool_schemas",
    "tool_summary",
]


def _tile(ui: TileDisplay | None) -> str | None:
    """The tile as a template, each argument as ``<name>``."""
    if ui is None:
        return None
    parts = [ui.prefix or ""]
    for arg in ui.args:
        parts.extend((arg.prefix or "", f"<{arg.name}>", arg.suffix or ""))
    parts.append(ui.suffix or "")
    return safe_text(" ".join(part for part in parts if part.strip()))


def _requires_approval(tool: Tool, policy: ApprovalPolicy | None) -> bool:
    return tool.requires_approval if policy is None else policy.requires_approval(tool)


def tool_summary(
    entry: RegisteredTool, status: ToolStatus, policy: ApprovalPolicy | None
) -> dict[str, Any]:
    """One catalog entry (:class:`~.models.ToolSummary`)."""
    tool = entry.tool
    return {
        "id": tool.id,
        "name": tool.name,
        "namespace": tool.namespace,
        "title": tool.display_title,
        "description": tool.description,
        "provider_name": to_provider_name(tool.id),
        "mcp_name": to_mcp_name(tool.id),
        "side_effect": str(tool.side_effect),
        "requires_approval": _requires_approval(tool, policy),
        "kind": str(tool.kind),
        "source_format": str(tool.source.format),
        "source": tool.source.location,
        "capability": tool.capability,
        "available": entry.available,
        "unavailable_reason": entry.unavailable_reason,
        "phase": str(status.phase),
        "tile": _tile(tool.display.ui),
        "examples": list(tool.display.examples),
        "dangerous": tool.display.dangerous,
    }


def tool_schemas(entry: RegisteredTool) -> dict[str, Any]:
    """What calling a tool takes besides its summary: its input schema and timeout."""
    return {"input_schema": entry.tool.input_schema_dict(), "timeout": entry.tool.timeout}


def status_view(status: ToolStatus) -> dict[str, Any]:
    """A tool's health (:class:`~.models.ToolStatusView`)."""
    return status.to_dict()


def tool_detail(
    entry: RegisteredTool, status: ToolStatus, policy: ApprovalPolicy | None
) -> dict[str, Any]:
    """One tool with its schemas and health (:class:`~.models.ToolDetail`)."""
    tool = entry.tool
    hints = tool.resolved_hints
    return {
        **tool_summary(entry, status, policy),
        **tool_schemas(entry),
        "output_schema": tool.output_schema_dict(),
        "hints": {
            "readOnlyHint": bool(hints.read_only),
            "destructiveHint": bool(hints.destructive),
            "idempotentHint": bool(hints.idempotent),
            "openWorldHint": bool(hints.open_world),
        },
        "status": status_view(status),
    }


def _facts(request: ApprovalRequest) -> list[list[str]]:
    return [list(fact) for fact in request.shown_facts()]


def outcome_view(outcome: CallOutcome, *, approve_link: str | None = None) -> dict[str, Any]:
    """How a call ended (:class:`~.models.CallOutcomeView`); a pending one says where it is
    decided (``approve_link``: the web UI's page template with ``{id}``)."""
    data = outcome.to_dict()
    data["text"] = outcome.text
    data.setdefault("content", None)
    data.setdefault("blocks", None)
    data.setdefault("code", None)
    data.setdefault("message", None)
    request = outcome.approval
    if outcome.status is CallStatus.PENDING_APPROVAL and request is not None:
        data["approval"] = {
            "id": request.id,
            "title": request.title,
            "risk": request.risk,
            "facts": _facts(request),
            "display": None if not request.display else redact_url_credentials(request.display),
            "created_at": request.created_at,
            "expires_at": request.expires_at,
            "status_url": f"/v1/approvals/{request.id}",
            "approve_url": None if approve_link is None else approve_link.format(id=request.id),
            "cli": f"toolgate approvals approve {shlex.quote(request.id)}",
        }
    else:
        # A decided request is described by GET /v1/approvals/{id}; the outcome only names it.
        data.pop("approval", None)
    return data


def approval_view(request: ApprovalRequest, tool: Tool | None) -> dict[str, Any]:
    """An approval request (:class:`~.models.ApprovalView`), with the call's one-line display
    (the request's own, else rendered from the tool when it is still registered)."""
    display = request.display
    if not display and tool is not None:
        display = render_display(tool, request.arguments)
    return request.to_dict(display)


def grant_view(grant: Grant) -> dict[str, Any]:
    """An "always allow" grant (:class:`~.models.GrantView`)."""
    return grant.to_dict()


def alert_view(alert: SourceAlert) -> dict[str, Any]:
    """A plugin alert (:class:`~.models.AlertView`)."""
    return {"source": alert.source, "level": alert.level, "message": alert.message}


def diagnostic_view(problem: Diagnostic) -> dict[str, Any]:
    """A declaration problem (:class:`~.models.DiagnosticView`)."""
    return {
        "path": problem.path,
        "field": problem.field,
        "message": problem.message,
        "severity": str(problem.severity),
    }
