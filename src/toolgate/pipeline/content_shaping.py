"""Shaping a result made of content blocks (:class:`~toolgate.model.content.ContentResult`).

The rules of :mod:`toolgate.pipeline.shaping`, applied block by block:

* **masking**: the gateway's secrets are masked in the text of text blocks, of embedded text
  resources and in the strings of resource links (a URI may carry a credential), and in the
  ``structuredContent``; base64 data is not text and is left as it is;
* **text overflow**: a block whose text is over the overflow limit (50,000 characters) is
  written in full to ``<call_id>.<n>.txt`` and replaced by its first 10,000 characters and a
  note with the path, as a whole text result would be;
* **binary size**: an image, audio or embedded blob is never measured as text. Up to the
  spiller's ``binary_limit`` (4 MiB of base64) it passes whole; beyond, its bytes are written to
  ``<call_id>.<n>.<ext>`` and the block becomes a text note naming the type, size and path;
  data that is not base64 is refused (``invalid_output``) rather than passed on.

The outcome's ``overflow`` names the first file written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..model import Overflow
from ..model.content import (
    AudioContent,
    ContentBlock,
    ContentError,
    ContentResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    check_base64,
)
from .overflow import OverflowSpiller

__all__ = ["ShapedContent", "spill_blocks"]

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


def spill_blocks(
    result: ContentResult,
    spiller: OverflowSpiller,
    *,
    session_id: str | None,
    call_id: str,
) -> ShapedContent:
    """Spill the blocks too large to pass (see the module documentation); raises
    :class:`~toolgate.model.content.ContentError` for binary data that is not base64."""
    blocks: list[ContentBlock] = []
    overflow: Overflow | None = None
    for index, block in enumerate(result.blocks):
        text = _block_text(block)
        data = _binary_data(block)
        if text is not None and spiller.exceeds(text):
            spilled = spiller.spill(text, session_id=session_id, call_id=call_id, part=str(index))
            overflow = overflow or spilled.overflow
            if isinstance(block, (TextContent, EmbeddedResource)):
                blocks.append(replace(block, text=spilled.preview))
        elif data is not None and len(data) > spiller.binary_limit:
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
            blocks.append(_binary_note(block, mime, len(raw), spiller.binary_limit, str(path)))
        else:
            blocks.append(block)
    return ShapedContent(result.replace_blocks(blocks), overflow)


def _binary_note(block: ContentBlock, mime: str, size: int, limit: int, path: str) -> TextContent:
    where = f" of resource <{block.uri}>" if isinstance(block, EmbeddedResource) else ""
    return TextContent(
        f"[{block.type}{where}: {mime}, {size:,} bytes — larger than the {limit:,} characters "
        f"of base64 toolgate passes inline. toolgate saved it to {path}; read that file if you "
        "need it.]",
        annotations=getattr(block, "annotations", None),
    )
