"""A gateway outcome as Pydantic AI hands it to the model, and the facts of a pending approval.

The model reads :attr:`~toolgate.CallOutcome.text` and nothing else: a result (an overflow's
preview and note), or ``Error [code]: message``. What only people and the application need —
the visualization, the overflow file, toolgate's call id — rides in
:attr:`pydantic_ai.messages.ToolReturn.metadata`, which Pydantic AI keeps in the history for
the application and never sends to the model.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pydantic_ai import ModelRetry, ToolFailed
from pydantic_ai.messages import BinaryContent, BinaryImage, ToolReturn

from ..._json import thaw
from ...errors import ErrorCode
from ...model import ApprovalRequest, CallOutcome, CallStatus

__all__ = ["METADATA_KEY", "approval_facts", "is_closed", "tool_result"]

#: The key toolgate's facts live under, in a deferral's metadata and a tool return's metadata.
METADATA_KEY = "toolgate"


def is_closed(error: Exception) -> bool:
    """Whether ``error`` says the approval request is no longer pending (decided, expired or
    voided) — in-process :class:`~toolgate.errors.ApprovalClosedError`, remote 409 alike."""
    return getattr(error, "code", None) == ErrorCode.APPROVAL_CLOSED


def approval_facts(approval: ApprovalRequest) -> dict[str, Any]:
    """What the application shows a person deciding a pending call (URL credentials masked),
    and the approval id it records the decision under."""
    shown = approval.to_dict()  # masks URL credentials in the title and display
    return {
        "approval_id": approval.id,
        "tool_id": approval.tool_id,
        "title": shown["title"],
        "display": shown["display"],
        "risk": approval.risk,
        "facts": [list(fact) for fact in approval.shown_facts()],
        "expires_at": approval.expires_at,
    }


def tool_result(outcome: CallOutcome) -> ToolReturn[Any]:
    """The return of a finished call (``ok``); raises the framework's failure for an error.

    ``invalid_arguments`` raises :class:`~pydantic_ai.ModelRetry` (the model should correct its
    arguments; it counts against the tool's retries). Every other error code raises
    :class:`~pydantic_ai.ToolFailed`: the model reads the failure and adapts, and a rate limit
    or a denial never uses up the retries that would end the run.
    """
    if outcome.status is CallStatus.ERROR:
        if outcome.code is ErrorCode.INVALID_ARGUMENTS:
            raise ModelRetry(outcome.text)
        raise ToolFailed(outcome.text)
    if outcome.status is not CallStatus.OK:  # a pending call is the caller's to handle
        raise ValueError(f"not a finished call: {outcome.status}")
    return ToolReturn(
        return_value=_model_content(outcome), metadata={METADATA_KEY: _facts(outcome)}
    )


def _facts(outcome: CallOutcome) -> dict[str, Any]:
    facts: dict[str, Any] = {"tool_id": outcome.tool_id, "call_id": outcome.call_id}
    if outcome.visualization is not None:
        facts["visualization"] = thaw(outcome.visualization)
    if outcome.overflow is not None:
        facts["overflow"] = {
            "path": outcome.overflow.path,
            "original_size": outcome.overflow.original_size,
        }
    if outcome.approval is not None:
        facts["approval_id"] = outcome.approval.id
    replayed = outcome.metadata.get("idempotency")
    if isinstance(replayed, Mapping):
        facts["idempotency"] = thaw(replayed)
    return facts


def _model_content(outcome: CallOutcome) -> Any:
    """The text, plus each image or audio block as the framework's binary content (sent to the
    model natively in the tool result); other blocks are described in the text already."""
    blocks = outcome.blocks
    binaries = [item for item in (_binary(block) for block in blocks or ()) if item is not None]
    if not binaries:
        return outcome.text
    return [outcome.text, *binaries]


def _binary(block: Mapping[str, Any]) -> BinaryContent | None:
    """The block as binary content the model can take, or ``None`` (its note in the text stands
    for it). The upstream's ``mimeType`` is its own word: an "image" labelled ``text/html``
    would fail ``BinaryImage``'s check (ending the run after the tool ran), and an "audio"
    labelled ``image/png`` would reach the model as a picture, so the label must match."""
    kind = block.get("type")
    data = block.get("data")
    media_type = block.get("mimeType")
    if (
        kind not in ("image", "audio")
        or not isinstance(data, str)
        or not isinstance(media_type, str)
        or not media_type.lower().startswith(f"{kind}/")
    ):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None  # an upstream's broken block: its note in the text stands for it
    if kind == "image":
        return BinaryImage(data=raw, media_type=media_type)
    return BinaryContent(data=raw, media_type=media_type)
