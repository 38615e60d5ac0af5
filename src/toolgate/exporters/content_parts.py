"""Content blocks in the model APIs' own forms (a result made of MCP content blocks).

Each API takes images in a tool result its own way, and nothing else but text:

* Anthropic ``tool_result`` ``content``: ``text`` blocks and ``image`` blocks with a base64
  ``source`` (JPEG, PNG, GIF, WebP);
* OpenAI Responses ``function_call_output`` ``output``: a list of ``input_text`` and
  ``input_image`` parts, the image as a ``data:`` URL (PNG, JPEG, WebP, GIF);
* Gemini ``functionResponse``: ``parts`` with ``inlineData`` (PNG, JPEG, WebP), each named by a
  ``displayName`` that the response's text refers to;
* OpenAI Chat Completions tool messages are text only: every block is its text or note.

Every other block becomes its one-line text note (:meth:`ContentBlock.note`): an image of
another type, audio, a resource link (its name, URI and description, which a model can act on),
an embedded resource (its text, or a note for a blob). Base64 is never sent as text.
"""

from __future__ import annotations

from typing import Any

from ..model.call import CallOutcome, CallStatus
from ..model.content import ContentResult, ImageContent
from ._common import json_ready

__all__ = ["anthropic_content", "gemini_parts", "mcp_content_result", "responses_output"]

_ANTHROPIC_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_OPENAI_IMAGES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_GEMINI_IMAGES = frozenset({"image/jpeg", "image/png", "image/webp"})


def mcp_content_result(outcome: CallOutcome) -> dict[str, Any] | None:
    """The ``CallToolResult`` of a successful outcome made of content blocks: the same blocks
    (``annotations`` and ``_meta`` kept) and its ``structuredContent`` when it has one; ``None``
    for any other outcome."""
    content = outcome.content if outcome.status is CallStatus.OK else None
    if not isinstance(content, ContentResult):
        return None
    result: dict[str, Any] = {"content": content.to_mcp()}
    if content.structured is not None:
        result["structuredContent"] = json_ready(content.structured)
    result["isError"] = False
    return result


def anthropic_content(result: ContentResult) -> list[dict[str, Any]]:
    """The ``content`` list of an Anthropic ``tool_result`` block."""
    parts: list[dict[str, Any]] = []
    for block in result.blocks:
        if isinstance(block, ImageContent) and block.mime_type in _ANTHROPIC_IMAGES:
            parts.append(
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": block.mime_type, "data": block.data},
                }
            )
            continue
        text = block.note()
        if text:  # the API refuses an empty text block
            parts.append({"type": "text", "text": text})
    return parts


def responses_output(result: ContentResult) -> list[dict[str, Any]]:
    """The ``output`` list of an OpenAI Responses ``function_call_output`` item."""
    parts: list[dict[str, Any]] = []
    for block in result.blocks:
        if isinstance(block, ImageContent) and block.mime_type in _OPENAI_IMAGES:
            url = f"data:{block.mime_type};base64,{block.data}"
            parts.append({"type": "input_image", "image_url": url})
            continue
        text = block.note()
        if text:
            parts.append({"type": "input_text", "text": text})
    return parts


def gemini_parts(result: ContentResult) -> tuple[str, list[dict[str, Any]]]:
    """The text of a Gemini ``functionResponse`` and its ``parts``: each image Gemini takes is
    an ``inlineData`` part named ``image-<n>``, and the text says where it is attached."""
    texts: list[str] = []
    parts: list[dict[str, Any]] = []
    for block in result.blocks:
        if isinstance(block, ImageContent) and block.mime_type in _GEMINI_IMAGES:
            name = f"image-{len(parts) + 1}"
            parts.append(
                {
                    "inlineData": {
                        "mimeType": block.mime_type,
                        "data": block.data,
                        "displayName": name,
                    }
                }
            )
            texts.append(f"{block.note()} (attached as {name})")
            continue
        texts.append(block.note())
    return "\n\n".join(texts), parts
