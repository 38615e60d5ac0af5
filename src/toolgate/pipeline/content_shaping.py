"""Shaping a result made of content blocks (:class:`~toolgate.model.content.ContentResult`).

The rules of :mod:`toolgate.pipeline.shaping`, applied to the blocks and the result as a whole:

* **masking**: the gateway's secrets are masked in the text of text blocks, of embedded text
  resources, in the strings of resource links (a URI may carry a credential), in every
  ``mimeType``, in annotations, ``_meta`` and unknown blocks, and in the ``structuredContent``;
  base64 data is not text and is left as it is;
* **binary size**: an image, audio or embedded blob is never measured as text. Up to the
  spiller's ``binary_limit`` (4 MiB of base64) it passes whole, and the blocks of one result up
  to ``binary_total`` (16 MiB) together; beyond either, its bytes are written to
  ``<call_id>.<n>.<ext>`` and the block becomes a text note naming the type, size and path;
  data that is not base64 is refused (``invalid_output``) rather than passed on;
* **text overflow**: the overflow rule (50,000 characters) applies to the whole model-facing
  text of the result: every block's text or note (a link's name, URI and description), its
  annotations, ``_meta`` and extra keys, an unknown block whole, and the ``structuredContent``
  as JSON. Over it, all of that is written to ``<call_id>.txt`` and the result becomes the first
  10,000 characters and the note with the path — as a large plain result does — beside the
  small binary blocks, which the binary rules bound; the ``structuredContent`` is not passed on.

The outcome's ``overflow`` names the first file written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .._json import thaw
from ..model import Overflow
from ..model.content import (
    AudioContent,
    ContentBlock,
    ContentError,
    ContentResult,
    EmbeddedResource,
    ImageContent,
    OtherContent,
    TextContent,
    check_base64,
)
from .overflow import OverflowSpiller

__all__ = ["ShapedContent", "full_text", "model_chars", "spill_blocks"]

_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
#: Characters of its own (note, annotations, ``_meta``) a binary block may have to be kept
#: beside the preview of a spilled result.
_KEPT_BINARY_CHARS = 2_000

_SUFFIXES = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/svg+xml": ".svg",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "application/pdf": ".pdf",
    "application/json": ".json",
    "text/plain": ".txt",
}


@dataclass(frozen=True, slots=True)
class ShapedContent:
    """The blocks as the model may receive them, and the first file anything was spilled to."""

    result: ContentResult
    overflow: Overflow | None


def _binary_data(block: ContentBlock) -> str | None:
    if isinstance(block, (ImageContent, AudioContent)):
        return block.data
    if isinstance(block, EmbeddedResource):
        return block.blob
    return None


def _block_text(block: ContentBlock) -> str | None:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, EmbeddedResource) and block.blob is None:
        return block.text
    return None


def _json_chars(value: Any) -> int:
    return len(_ENCODER.encode(thaw(value)))


def model_chars(block: ContentBlock) -> int:
    """Characters of ``block`` that reach a model or an MCP client as text: its text or note
    (a link's name, URI and description included) and its annotations, ``_meta`` and extra
    keys; for a block of an unknown type, the whole block. Base64 data is not counted (the
    binary rules bound it)."""
    if isinstance(block, OtherContent):
        return _json_chars(block.raw)
    size = len(block.note())
    for value in (block.annotations, block.meta):
        if value is not None:
            size += _json_chars(value)
    if block.extra:
        size += _json_chars(block.extra)
    if isinstance(block, EmbeddedResource):
        if block.resource_meta is not None:
            size += _json_chars(block.resource_meta)
        if block.resource_extra:
            size += _json_chars(block.resource_extra)
    return size


def full_text(result: ContentResult) -> str:
    """The whole model-facing text of ``result``: each block's text or note, its annotations
    and ``_meta`` where it has them, then the ``structuredContent`` as JSON (what a file holds
    when the result is spilled)."""
    parts: list[str] = []
    for block in result.blocks:
        if isinstance(block, OtherContent):
            parts.append(f"[{block.type} content] {_ENCODER.encode(thaw(block.raw))}")
            continue
        parts.append(block.note())
        extras = {
            key: thaw(value)
            for key, value in (("annotations", block.annotations), ("_meta", block.meta))
            if value is not None
        }
        if block.extra:
            extras["extra"] = thaw(block.extra)
        if extras:
            parts.append(f"[{block.type} block details] {_ENCODER.encode(extras)}")
    if result.structured is not None:
        parts.append(f"[structuredContent] {_ENCODER.encode(thaw(result.structured))}")
    return "\n\n".join(parts)


def _total_chars(result: ContentResult) -> int:
    total = sum(model_chars(block) for block in result.blocks)
    if result.structured is not None:
        total += _json_chars(result.structured)
    return total


def spill_blocks(
    result: ContentResult,
    spiller: OverflowSpiller,
    *,
    session_id: str | None,
    call_id: str,
) -> ShapedContent:
    """Spill what is too large to pass (see the module documentation); raises
    :class:`~toolgate.model.content.ContentError` for binary data that is not base64."""
    blocks: list[ContentBlock] = []
    overflow: Overflow | None = None
    inline = 0
    for index, block in enumerate(result.blocks):
        data = _binary_data(block)
        if data is None:
            blocks.append(block)
            continue
        too_large = len(data) > spiller.binary_limit
        if not too_large and inline + len(data) <= spiller.binary_total:
            inline += len(data)
            blocks.append(block)
            continue
        try:
            raw = check_base64(block)
        except ContentError as exc:
            raise ContentError(f"content[{index}] ({block.type}): {exc}") from None
        mime = getattr(block, "mime_type", None) or "application/octet-stream"
        path = spiller.spill_bytes(
            raw,
            session_id=session_id,
            call_id=call_id,
            part=str(index),
            suffix=_SUFFIXES.get(mime, ".bin"),
        )
        overflow = overflow or Overflow(path=str(path), original_size=len(raw))
        if too_large:
            why = f"larger than the {spiller.binary_limit:,} characters of base64"
        else:
            why = f"beyond the {spiller.binary_total:,} characters of base64 in one result"
        blocks.append(_binary_note(block, mime, len(raw), why, str(path)))
    shaped = result.replace_blocks(blocks)
    if _total_chars(shaped) <= spiller.limit:
        return ShapedContent(shaped, overflow)
    # Over the overflow rule as a whole (one huge block, many medium ones, a large
    # structuredContent, a link's long description…): the whole text goes to the call's file
    # and the model gets its preview and note, as for any large result. Small binary blocks
    # stay beside it (the binary rules bound them); nothing else is passed on.
    spilled = spiller.spill(full_text(shaped), session_id=session_id, call_id=call_id)
    kept = [
        block
        for block in blocks
        if _binary_data(block) is not None and model_chars(block) <= _KEPT_BINARY_CHARS
    ]
    preview = TextContent(spilled.preview)
    return ShapedContent(ContentResult((preview, *kept), None), overflow or spilled.overflow)


def _binary_note(block: ContentBlock, mime: str, size: int, why: str, path: str) -> TextContent:
    where = f" of resource <{block.uri}>" if isinstance(block, EmbeddedResource) else ""
    return TextContent(
        f"[{block.type}{where}: {mime}, {size:,} bytes — {why} toolgate passes inline. "
        f"toolgate saved it to {path}; read that file if you need it.]",
        annotations=getattr(block, "annotations", None),
    )
