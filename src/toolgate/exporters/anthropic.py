"""Anthropic Messages API: tool definitions, ``tool_use`` blocks and ``tool_result`` blocks.

A definition is ``{"name", "description", "input_schema"}`` (an ``anthropic.types.ToolParam``).
Anthropic's ``input_examples`` takes example *argument objects*; a tool's
``display.examples`` are example *prompts* that should select it, so they do not fit there and
are not exported. ``strict`` (Anthropic's structured tool use) is left to the caller: it has its
own schema subset, and leaving it out keeps the default behaviour every model supports.

A ``tool_result``'s ``content`` is ``outcome.text``, or for a result made of content blocks (an
MCP upstream's image, resource link…) a list of ``text`` and base64 ``image`` blocks
(:mod:`toolgate.exporters.content_parts`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ToolCallParseError
from ..model.call import CallOutcome, CallStatus, ToolCall
from ..model.content import ContentResult
from ..model.names import to_provider_name
from ..model.tool import Tool
from ._common import (
    as_mapping,
    call_id_for,
    items_of,
    object_schema,
    optional_str,
    parse_arguments,
    require_str,
    tool_id_for,
)
from .content_parts import anthropic_content

__all__ = ["anthropic_tool", "anthropic_tool_result", "parse_anthropic_tool_calls"]


def anthropic_tool(tool: Tool) -> dict[str, Any]:
    """The Messages API tool definition: ``{"name", "description", "input_schema"}``."""
    return {
        "name": to_provider_name(tool.id),
        "description": tool.description,
        "input_schema": object_schema(tool.input_schema),
    }


def _tool_use(block: Mapping[str, Any], where: str) -> ToolCall:
    name = require_str(block, "name", where)
    if not isinstance(block.get("input", {}), Mapping):
        raise ToolCallParseError(f"{where}.input must be a JSON object")
    arguments = parse_arguments(block.get("input"), f"{where}.input")
    return ToolCall(tool_id_for(name), arguments, optional_str(block, "id", where))


def _blocks(blocks: Any, where: str) -> list[ToolCall]:
    return [
        _tool_use(block, path)
        for path, block in items_of(blocks, where)
        if block.get("type") == "tool_use"
    ]


def parse_anthropic_tool_calls(payload: Any) -> list[ToolCall]:
    """The ``tool_use`` blocks of an Anthropic payload, in order.

    Accepts a ``Message`` (or an assistant message param) whose ``content`` is a list of blocks,
    a list of content blocks, or one ``{"type": "tool_use", "id", "name", "input"}`` block.
    Other blocks in a list (text, thinking) are skipped; a single block of another type is an
    error. ``input`` must be a JSON object.
    """
    if isinstance(payload, (list, tuple)):
        return _blocks(payload, "payload")
    data = as_mapping(payload, "payload")
    if "content" in data and data.get("type") != "tool_use":
        content = data["content"]
        return [] if isinstance(content, str) else _blocks(content, "payload.content")
    if data.get("type") != "tool_use":
        raise ToolCallParseError(
            f"payload.type is {data.get('type')!r}; expected a 'tool_use' block or a message"
        )
    return [_tool_use(data, "payload")]


def anthropic_tool_result(outcome: CallOutcome, call: ToolCall | None = None) -> dict[str, Any]:
    """The ``tool_result`` content block for an outcome, ``is_error`` set for errors.

    ``tool_use_id`` is ``call.call_id`` when the parsed call is given (the id of the model's
    ``tool_use`` block), else the outcome's own id. The block goes in a ``user`` message.
    ``content`` is ``outcome.text``, or text and image blocks for a result made of content
    blocks.
    """
    content: Any = outcome.text
    if outcome.status is CallStatus.OK and isinstance(outcome.content, ContentResult):
        content = anthropic_content(outcome.content) or outcome.text
    return {
        "type": "tool_result",
        "tool_use_id": call_id_for(outcome, call),
        "content": content,
        "is_error": outcome.is_error,
    }
