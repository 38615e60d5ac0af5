"""Calls and their outcomes: the values that cross every surface."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .._json import to_text
from ..errors import ErrorCode
from .approval import ApprovalRequest
from .content import ContentResult, content_fields

__all__ = [
    "ApprovalRequest",
    "CallOutcome",
    "CallStatus",
    "Overflow",
    "ToolCall",
]


class CallStatus(StrEnum):
    """How a call ended."""

    OK = "ok"
    ERROR = "error"
    PENDING_APPROVAL = "pending_approval"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A request to call a tool, as parsed from a provider payload or built by a caller."""

    tool_id: str
    """The namespaced id, or a provider-safe name that maps back to one."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    call_id: str | None = None
    """The provider's id for this call (OpenAI ``tool_call_id``, Anthropic ``tool_use_id``…)."""


@dataclass(frozen=True, slots=True)
class Overflow:
    """Set when the model-facing content was too large and was spilled to a file."""

    path: str
    """The file holding the full content."""
    original_size: int
    """Characters in the full content."""


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """The end of every call: ``ok``, ``error`` (with a stable ``code``) or ``pending_approval``.

    ``content`` is exactly what the model may see: the tool's result without ``_visualization`` and
    bookkeeping fields, or a preview plus a note when it overflowed. ``visualization`` is for people
    only. Surfaces render ``text`` for the model.
    """

    status: CallStatus
    tool_id: str
    call_id: str
    content: Any = None
    """Model-facing content: a JSON value, a string preview after an overflow, or a
    :class:`~toolgate.model.content.ContentResult` when the tool answered with content blocks
    (images, resource links… from an MCP upstream)."""
    code: ErrorCode | None = None
    """For errors: the stable machine code."""
    message: str | None = None
    """For errors: what went wrong and what to do next, written for the model."""
    visualization: Mapping[str, Any] | None = None
    """A validated ``_visualization`` (one of the nine types), for people only."""
    overflow: Overflow | None = None
    approval: ApprovalRequest | None = None
    duration: float = 0.0
    """Seconds spent in the tool (0 when it did not run)."""
    detail: str | None = None
    """Operator-only detail (a traceback, why a visualization was dropped). Never for the model."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.status is CallStatus.OK

    @property
    def is_error(self) -> bool:
        """True when the call ended in an error."""
        return self.status is CallStatus.ERROR

    @property
    def text(self) -> str:
        """The text to hand to the model for this outcome."""
        if self.status is CallStatus.OK:
            if isinstance(self.content, ContentResult):
                # Text blocks' text and a note per other block: never base64.
                return self.content.text
            return to_text(self.content)
        if self.status is CallStatus.PENDING_APPROVAL and self.approval is not None:
            return self.message or f"Approval pending (request {self.approval.id})."
        return f"Error [{self.code}]: {self.message}"

    @property
    def blocks(self) -> list[dict[str, Any]] | None:
        """The result's content blocks as MCP defines them (base64 included) when the tool
        answered with content blocks, else ``None``."""
        if self.status is CallStatus.OK and isinstance(self.content, ContentResult):
            return self.content.to_mcp()
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (what the CLI's ``--json`` prints and surfaces send).

        For a result made of content blocks, ``content`` is its ``structuredContent`` when the
        tool gave one, else its text (:attr:`text`), and ``blocks`` holds the blocks."""
        data: dict[str, Any] = {
            "status": str(self.status),
            "tool": self.tool_id,
            "call_id": self.call_id,
        }
        if self.status is CallStatus.OK:
            data.update(content_fields(self.content))
        else:
            data["code"] = None if self.code is None else str(self.code)
            data["message"] = self.message
        if self.visualization is not None:
            data["visualization"] = dict(self.visualization)
        if self.overflow is not None:
            data["overflow"] = {
                "path": self.overflow.path,
                "original_size": self.overflow.original_size,
            }
        if self.approval is not None:
            data["approval"] = {
                "id": self.approval.id,
                "title": self.approval.title,
                "risk": self.approval.risk,
                "facts": [list(f) for f in self.approval.shown_facts()],
                "expires_at": self.approval.expires_at,
            }
        data["duration"] = self.duration
        if self.metadata:
            data["metadata"] = dict(self.metadata)
        return data
