"""Cursors for paged tool lists: MCP ``tools/list``, ``GET /v1/tools`` and ``GET /v1/status``.

A cursor is opaque to clients: the base64url of a small JSON object naming the list it belongs
to (``k``) and the id of the last item of the page it follows (``a``). The next page starts
after that id in the list's order (sorted by id), whatever changed in between — keyset paging:

* a client following cursors while the catalog changes never gets an item twice and never gets
  an error for it; an item removed meanwhile is simply not listed, and one added before the
  cursor's position is not either (MCP clients are told ``tools/list_changed`` and list again
  from the start);
* a cursor is a position, not a credential: every page is filtered for its caller again, so an
  edited cursor can only move where a walk continues in what the caller may see.

A cursor that is not one this gateway writes (not base64url, not the JSON above, too long) or
that belongs to another list is refused with :class:`CursorError`, whose message names the
parameter and says what to do.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
from collections.abc import Sequence
from typing import Final, TypeVar

__all__ = [
    "MAX_CURSOR_CHARS",
    "CursorError",
    "decode_cursor",
    "encode_cursor",
    "page_after",
]

#: The longest cursor accepted (one this gateway writes is far shorter: tool ids are bounded).
MAX_CURSOR_CHARS: Final = 2048

T = TypeVar("T")


class CursorError(ValueError):
    """A cursor that is malformed, too long or of another list; the message names ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = f"{field}: {message}"


def encode_cursor(kind: str, after: str) -> str:
    """The cursor of the page that follows the item ``after`` in the list ``kind``."""
    raw = json.dumps({"k": kind, "a": after}, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(kind: str, cursor: str, *, field: str = "cursor") -> str:
    """The id the page after ``cursor`` starts after; raises :class:`CursorError`."""
    restart = "list again without it, from the first page"
    if len(cursor) > MAX_CURSOR_CHARS:
        raise CursorError(field, f"too long to be a cursor of this gateway; {restart}")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw.decode("utf-8"))
    except (binascii.Error, ValueError, RecursionError):  # RecursionError: "[[[[…" nested deep
        data = None
    if (
        not isinstance(data, dict)
        or set(data) != {"k", "a"}
        or not isinstance(data["k"], str)
        or not isinstance(data["a"], str)
    ):
        raise CursorError(
            field,
            "not a cursor this gateway issued (pass the next cursor of the previous page "
            f"unchanged); {restart}",
        )
    if data["k"] != kind:
        raise CursorError(field, f"a cursor of another list, not of {kind}; {restart}")
    after: str = data["a"]
    return after


def page_after(ids: Sequence[str], after: str | None, limit: int) -> tuple[int, int, str | None]:
    """The page of at most ``limit`` items after the id ``after`` in ``ids`` (sorted): its
    start and end positions, and the id the next page starts after (``None``: the last page)."""
    start = 0 if after is None else bisect.bisect_right(ids, after)
    end = min(start + limit, len(ids))
    return start, end, ids[end - 1] if end < len(ids) else None
