"""An MCP ``tools/call`` result → the raw result of a toolgate call.

* ``isError: true`` → :class:`~toolgate.ToolError` with the server's text (bounded), so the
  outcome is ``tool_error`` and the model reads what the server said.
* Only plain text blocks (no ``annotations``, no ``_meta``) and no ``structuredContent`` → their
  text, joined by blank lines (what the model reads).
* ``structuredContent`` beside any blocks (plain text included) → a
  :class:`~toolgate.model.content.ContentResult` holding both, so the MCP surface sends the
  upstream's own blocks and its ``structuredContent`` as they came; the structured object is
  checked against the output schema by the pipeline's shaping, as for every tool.
* Any other block (image, audio, resource, resource link, annotated text, a type this version
  does not know) → a :class:`~toolgate.model.content.ContentResult`: the same blocks, typed,
  with their annotations and ``_meta``, and the ``structuredContent`` beside them when there is
  one. The pipeline shapes it block by block (:mod:`toolgate.pipeline.content_shaping`). A
  malformed or oversized block is a tool error naming the block.
* No content at all → ``""``, or the ``structuredContent`` alone when there is one.

Works on the JSON form of the result (``model_dump(by_alias=True)``), so nothing here needs the
MCP SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ToolError
from ..model.content import ContentError, ContentResult, is_plain_text

__all__ = ["MAX_ERROR_TEXT", "result_value"]

#: Characters of a server's error text passed on to the model.
MAX_ERROR_TEXT = 4_000


def _texts(blocks: Sequence[Any]) -> list[str] | None:
    """The text of each block when every block is text, else ``None``."""
    texts: list[str] = []
    for block in blocks:
        if not isinstance(block, Mapping) or block.get("type") != "text":
            return None
        text = block.get("text")
        texts.append(text if isinstance(text, str) else "")
    return texts


def _error_text(server: str, tool: str, blocks: Sequence[Any]) -> str:
    texts = _texts(blocks)
    if texts is None:
        texts = [
            block["text"]
            for block in blocks
            if isinstance(block, Mapping) and isinstance(block.get("text"), str)
        ]
    text = "\n\n".join(part for part in texts if part.strip()).strip()
    if not text:
        return f"The MCP server {server} reported that tool {tool} failed, without a message."
    if len(text) > MAX_ERROR_TEXT:
        text = text[:MAX_ERROR_TEXT] + f"… [cut: {len(text)} characters]"
    return text


def result_value(result: Mapping[str, Any], *, server: str, tool: str) -> Any:
    """The toolgate result of one ``CallToolResult`` (JSON form); raises ``ToolError`` for
    ``isError`` results. ``server`` and ``tool`` name the call in messages."""
    raw_blocks = result.get("content")
    blocks: Sequence[Any] = raw_blocks if isinstance(raw_blocks, list) else []
    if result.get("isError"):
        raise ToolError(_error_text(server, tool, blocks))
    structured = result.get("structuredContent")
    if isinstance(structured, Mapping) and not blocks:
        return structured
    if is_plain_text(blocks) and structured is None:
        return "\n\n".join(block["text"] for block in blocks)
    # Blocks beside structuredContent are kept as the upstream sent them (even plain text): an
    # MCP client gets both as they came; the structured object is what the output schema checks
    # and what the HTTP API gives as ``content``.
    try:
        return ContentResult.from_mcp(
            blocks, structured if isinstance(structured, Mapping) else None
        )
    except ContentError as exc:
        raise ToolError(
            f"The MCP server {server} answered tool {tool} with content toolgate cannot carry: "
            f"{exc}."
        ) from None
