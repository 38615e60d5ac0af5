"""The pieces of an SDK tool call that need no SDK run: the keys handed to the gateway, the
arguments as the model sent them, and the output the model reads."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.tool import ToolOutputImage, ToolOutputText

from ...errors import ToolgateError
from ...model import CallOutcome, CallStatus
from ...model.content import ContentResult, ImageContent

__all__ = [
    "MAX_KEY",
    "MAX_QUERY",
    "SEARCH_TOOL",
    "ApprovalPendingError",
    "CallKey",
    "bounded",
    "canonical",
    "idempotency_key",
    "model_output",
    "parse_arguments",
]

#: The longest idempotency key or tool call id handed to the gateway; longer ones are hashed.
MAX_KEY = 200
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


_DIGEST = "sha256:"


def _digest(text: str) -> str:
    return _DIGEST + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: valid in JSON ("\udc80"), not in UTF-8
        return False
    return True


def bounded(text: str) -> str:
    """``text`` if it fits :data:`MAX_KEY`, else a digest of it (stable, so a resume finds the
    same key; the model chooses call ids, so their length is not ours to trust). A text that
    already looks like a digest is digested too, so no call id can pose as another's digest,
    and so is one that is not UTF-8 (stores and the HTTP API cannot carry it)."""
    if len(text) <= MAX_KEY and not text.startswith(_DIGEST) and _utf8(text):
        return text
    return _digest(text)


def idempotency_key(session_id: str, call_id: str) -> str:
    """The idempotency key of the SDK's call ``call_id`` in ``session_id``: the same on every
    resume of the run, so a call that already completed replays instead of running again.

    ``<session_id>:<call_id>`` when that names one pair only (the session id holds no colon);
    otherwise a digest of the pair. The gateway scopes keys by agent and tool, not by session:
    with ``"team:7"`` + ``"call_1"`` and ``"team"`` + ``"7:call_1"`` (a call id is model or
    provider text) one conversation's call would replay another's outcome."""
    if not session_id or ":" in session_id:
        # Digested from a text no plain key is made of (those never start with a colon).
        return _digest(":" + json.dumps([session_id, call_id], ensure_ascii=False))
    return bounded(f"{session_id}:{call_id}")


def canonical(arguments: Mapping[str, Any]) -> str:
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
