"""What a call says about itself besides its arguments — its session, the framework's tool call
id, the caller's idempotency key, its workspace — checked before anything uses it.

Each is text a caller (a framework, a model through a framework, an HTTP body) chose: a lone
surrogate (a JSON ``"\\udc80"`` escape) cannot be stored or digested, and a NUL cannot name a
folder. Such a call is refused with ``invalid_arguments`` naming the field, never a crash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from .._json import is_text

__all__ = ["MAX_CALL_NAME", "call_fields_problem"]

#: Characters a tool call id or an idempotency key may have (as the HTTP API's body allows).
MAX_CALL_NAME: Final = 200


def call_fields_problem(
    session_id: str | None,
    tool_call_id: str | None,
    idempotency_key: str | None,
    workspace: Path | str | None,
) -> str | None:
    """Why these fields of a call cannot be used (naming the field), or ``None``."""
    if (
        session_id is None
        and tool_call_id is None
        and idempotency_key is None
        and workspace is None
    ):
        return None  # most calls: checked on every call
    for field, value, longest in (
        ("session_id", session_id, None),
        ("tool_call_id", tool_call_id, MAX_CALL_NAME),
        ("idempotency_key", idempotency_key, MAX_CALL_NAME),
    ):
        if value is None:
            continue
        if not isinstance(value, str):
            return f"{field} must be a string, not {type(value).__name__}"
        if not value or "\x00" in value or not is_text(value):
            return f"{field} must be non-empty Unicode text without NUL characters"
        if longest is not None and len(value) > longest:
            return f"{field} has {len(value)} characters; at most {longest} are allowed"
    if workspace is not None:
        text = str(workspace)
        if "\x00" in text or not is_text(text):
            return "workspace must be a folder's path: Unicode text without NUL characters"
    return None
