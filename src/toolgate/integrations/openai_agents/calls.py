"""The pieces of an SDK tool call that need no SDK run: the arguments as the model sent them,
the call as this adapter remembers it, and the output the model reads. The tool call id and
idempotency key handed to the gateway are :mod:`toolgate.integrations.keys`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.tool import ToolOutputImage, ToolOutputText

from ...errors import ToolgateError
from ...model import CallOutcome, CallStatus
from ...model.content import ContentResult, ImageContent

__all__ = [
    "MAX_QUERY",
    "SEARCH_TOOL",
    "ApprovalPendingError",
    "CallKey",
    "canonical",
    "model_output",
    "parse_arguments",
]

#: The longest search query the model may send (the gateway's search reads a sentence, not a book).
MAX_QUERY = 1_000
#: The name of the optional search tool (provider names of gateway tools always hold ``__``).
SEARCH_TOOL = "toolgate_search_tools"


class ApprovalPendingError(ToolgateError):
    """A call the SDK was about to run is waiting for a person in toolgate.

    Raised (it fails the run, so the model never reads "approval pending" as a result) when
    the SDK approved a call toolgate has no decision for — ``RunState.approve`` was used
    instead of :meth:`ToolgateTools.approve` — or when the gateway asked for a person only as
    the call ran (a tool's security check) and nobody decided within ``approval_wait``."""

    def __init__(self, message: str, *, approval_id: str, tool_id: str, call_id: str) -> None:
        super().__init__(message)
        self.approval_id = approval_id
        self.tool_id = tool_id
        self.call_id = call_id


def canonical(arguments: Mapping[str, Any]) -> str:
    """The arguments as one text, equal for equal arguments (a :class:`CallKey`'s part)."""
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_arguments(arguments: str | None) -> dict[str, Any] | None:
    """The model's arguments as an object, or ``None`` when they are not a JSON object."""
    if arguments is None or not arguments.strip():
        return {}
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):  # the model's text: malformed, or nested too deep
        return None
    return parsed if isinstance(parsed, dict) else None


@dataclass(frozen=True, slots=True)
class CallKey:
    """One SDK call: the same call id with other arguments (or another tool) is another call."""

    tool_id: str
    call_id: str
    arguments: str


def model_output(outcome: CallOutcome) -> str | list[ToolOutputText | ToolOutputImage]:
    """What the model reads for ``outcome``: its text (an overflow's preview and note, an error
    as ``Error [code]: message``), or — for a result made of content blocks with images —
    the SDK's image outputs in their place among the others' text: each block's own note, as
    :attr:`CallOutcome.text` has it (a link's URI, an embedded text, an audio clip's type and
    size). A visualization is never part of it."""
    content = outcome.content
    if (
        outcome.status is not CallStatus.OK
        or not isinstance(content, ContentResult)
        or not any(isinstance(block, ImageContent) for block in content.blocks)
    ):
        return outcome.text
    parts: list[ToolOutputText | ToolOutputImage] = []
    for block in content.blocks:
        if isinstance(block, ImageContent):
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append(ToolOutputImage(image_url=url))
        else:
            parts.append(ToolOutputText(text=block.note()))
    return parts
