"""An MCP ``tools/call`` result → the raw result of a toolgate call.

* ``isError: true`` → :class:`~toolgate.ToolError` with the server's text (bounded), so the
  outcome is ``tool_error`` and the model reads what the server said.
* ``structuredContent`` → that object is the result (checked against the output schema by the
  pipeline's shaping, as for every tool).
* Only text blocks → their text, joined by blank lines (what the model reads).
* Any other block (image, audio, resource, resource link) → ``{"content": [blocks]}``, each block
  as MCP defines it (``{"type": "image", "data": …, "mimeType": …}``); large ones are spilled to a
  file by the pipeline's overflow protection like any large result.
* No content at all → ``""``.

Works on the JSON form of the result (``model_dump(by_alias=True)``), so nothing here needs the
MCP SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import ToolError

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
    if structured is not None:
        return structured
    texts = _texts(blocks)
    if texts is not None:
        return "\n\n".join(texts)
    return {"content": list(blocks)}
