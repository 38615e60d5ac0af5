"""OpenAI: Chat Completions and Responses API tool definitions, tool calls and tool results.

Definitions set ``strict`` explicitly, always: ``True`` only when the input schema already fits
strict mode (see :mod:`toolgate.exporters.schema_compat`), else ``False``. It is never left out,
because the Responses API treats a missing ``strict`` as ``true`` and would then refuse a schema
with optional parameters. Schemas are never rewritten to make them fit.

OpenAI has no field for prompt examples (``tool.display.examples``) nor for an output schema on
Chat Completions, so neither is exported. Tool results are text (``outcome.text``); OpenAI
has no error flag, so an error is recognisable by its ``Error [code]: message`` text.

A result made of content blocks (an MCP upstream's image, resource link…): Chat Completions tool
messages take text only, so each block is its text or a one-line note (an image's type and size,
never its base64). The Responses API takes a list of parts in ``function_call_output``: images
go as ``input_image`` parts, the rest as ``input_text`` (:mod:`toolgate.exporters.content_parts`).
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
from .content_parts import responses_output
from .schema_compat import is_strict_compatible

__all__ = [
    "openai_responses_tool",
    "openai_responses_tool_result",
    "openai_tool",
    "openai_tool_message",
    "parse_openai_responses_tool_calls",
    "parse_openai_tool_calls",
]


def _function(tool: Tool) -> dict[str, Any]:
    parameters = object_schema(tool.input_schema)
    return {
        "name": to_provider_name(tool.id),
        "description": tool.description,
        "parameters": parameters,
        "strict": is_strict_compatible(parameters),
    }


def openai_tool(tool: Tool) -> dict[str, Any]:
    """The Chat Completions tool: ``{"type": "function", "function": {name, description,
    parameters, strict}}`` (a ``ChatCompletionFunctionToolParam``)."""
    return {"type": "function", "function": _function(tool)}


def openai_responses_tool(tool: Tool) -> dict[str, Any]:
    """The Responses API function tool: ``{"type": "function", name, description, parameters,
    strict}`` (a ``FunctionToolParam``)."""
    return {"type": "function", **_function(tool)}


# -- Chat Completions calls -----------------------------------------------------------------------


def _chat_call(data: Mapping[str, Any], where: str) -> ToolCall:
    kind = data.get("type", "function")
    if kind != "function":
        raise ToolCallParseError(
            f"{where}.type is {kind!r}; only 'function' tool calls can be run by toolgate"
        )
    function = as_mapping(data.get("function"), f"{where}.function")
    name = require_str(function, "name", f"{where}.function")
    arguments = parse_arguments(function.get("arguments"), f"{where}.function.arguments")
    return ToolCall(tool_id_for(name), arguments, optional_str(data, "id", where))


def _message_calls(message: Mapping[str, Any], where: str) -> list[ToolCall]:
    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return []
    return [_chat_call(call, path) for path, call in items_of(tool_calls, f"{where}.tool_calls")]


def parse_openai_tool_calls(payload: Any) -> list[ToolCall]:
    """The calls in a Chat Completions payload, in order.

    Accepts an assistant message (``{"role": "assistant", "tool_calls": [...]}``), a single tool
    call (``{"id", "type": "function", "function": {"name", "arguments"}}``), a whole
    ``ChatCompletion`` (every choice's message), or a list of messages or tool calls.
    ``function.arguments`` is the JSON string the model produced; a string that is not a JSON
    object raises :class:`~toolgate.ToolCallParseError` naming the field. Names map back to tool
    ids with :func:`~toolgate.model.names.from_provider_name` (kept as given when they do not
    decode).
    """
    if isinstance(payload, (list, tuple)):
        calls: list[ToolCall] = []
        for path, item in items_of(payload, "payload"):
            calls.extend(_chat_item(item, path))
        return calls
    return _chat_item(as_mapping(payload, "payload"), "payload")


def _chat_item(data: Mapping[str, Any], where: str) -> list[ToolCall]:
    if "choices" in data:
        calls: list[ToolCall] = []
        for path, choice in items_of(data["choices"], f"{where}.choices"):
            message = as_mapping(choice.get("message"), f"{path}.message")
            calls.extend(_message_calls(message, f"{path}.message"))
        return calls
    if "function" in data:
        return [_chat_call(data, where)]
    if "tool_calls" in data or "role" in data:
        return _message_calls(data, where)
    raise ToolCallParseError(
        f"{where}: expected an assistant message with 'tool_calls' or a tool call with 'function'"
    )


def openai_tool_message(outcome: CallOutcome, call: ToolCall | None = None) -> dict[str, Any]:
    """The Chat Completions tool message for an outcome: ``{"role": "tool", "tool_call_id",
    "content"}``.

    ``tool_call_id`` is ``call.call_id`` (the id the model gave the call); pass the parsed
    :class:`~toolgate.ToolCall`, since the outcome's own ``call_id`` is the gateway's.
    """
    return {
        "role": "tool",
        "tool_call_id": call_id_for(outcome, call),
        "content": outcome.text,
    }


# -- Responses API calls --------------------------------------------------------------------------


def _responses_call(data: Mapping[str, Any], where: str) -> ToolCall:
    name = require_str(data, "name", where)
    arguments = parse_arguments(data.get("arguments"), f"{where}.arguments")
    # ``call_id`` pairs the call with its output; ``id`` is the output item's own id.
    return ToolCall(tool_id_for(name), arguments, optional_str(data, "call_id", where))


def parse_openai_responses_tool_calls(payload: Any) -> list[ToolCall]:
    """The ``function_call`` items of a Responses API payload, in order.

    Accepts a ``Response`` (its ``output`` list), a list of output items, or one
    ``{"type": "function_call", "call_id", "name", "arguments"}`` item. Other item types in a
    list (messages, reasoning) are skipped; a single item of another type is an error.
    """
    if isinstance(payload, (list, tuple)):
        return _responses_items(payload, "payload")
    data = as_mapping(payload, "payload")
    if "output" in data and "type" not in data:
        return _responses_items(data["output"], "payload.output")
    if data.get("type") != "function_call":
        raise ToolCallParseError(
            f"payload.type is {data.get('type')!r}; expected a 'function_call' item or a Response"
        )
    return [_responses_call(data, "payload")]


def _responses_items(items: Any, where: str) -> list[ToolCall]:
    return [
        _responses_call(item, path)
        for path, item in items_of(items, where)
        if item.get("type") == "function_call"
    ]


def openai_responses_tool_result(
    outcome: CallOutcome, call: ToolCall | None = None
) -> dict[str, Any]:
    """The Responses API input item for an outcome: ``{"type": "function_call_output",
    "call_id", "output"}``, with ``call_id`` from the parsed ``call`` when given.

    ``output`` is ``outcome.text``, or for a result made of content blocks a list of
    ``input_text`` and ``input_image`` parts."""
    output: Any = outcome.text
    if outcome.status is CallStatus.OK and isinstance(outcome.content, ContentResult):
        output = responses_output(outcome.content) or outcome.text
    return {
        "type": "function_call_output",
        "call_id": call_id_for(outcome, call),
        "output": output,
    }
