"""Serve tools to any model provider: definitions out, calls in, results out.

Pure functions over the model: no I/O, and no provider SDK is imported (tests check the output
against the SDKs' own types). Every provider's function name comes from
:func:`toolgate.model.names.to_provider_name`, every MCP name from
:func:`~toolgate.model.names.to_mcp_name`: one reversible rule, in the characters each allows.

=====================  ===============================================================
format                 target
=====================  ===============================================================
``openai``             Chat Completions ``tools`` / ``tool_calls`` / ``role: tool``
``openai-responses``   Responses API function tools / ``function_call`` items /
                       ``function_call_output`` items
``anthropic``          Messages API ``tools`` / ``tool_use`` / ``tool_result`` blocks
``gemini``             ``functionDeclarations`` / ``functionCall`` / ``functionResponse``
``mcp``                ``tools/list`` entries / ``tools/call`` params / ``CallToolResult``
=====================  ===============================================================

Deferred loading (a tool search instead of every definition up front):
:func:`anthropic_deferred_tools` and :func:`openai_responses_deferred_tools`.

A typical loop::

    tools = export_tools(gateway.list_tools(), "openai")
    ...
    for call in parse_tool_calls(message, "openai"):
        outcome = gateway.call_sync(call.tool_id, call.arguments)
        messages.append(tool_result(outcome, "openai", call=call))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, Literal

from ..model.call import CallOutcome, ToolCall
from ..model.tool import Tool
from .anthropic import anthropic_tool, anthropic_tool_result, parse_anthropic_tool_calls
from .deferred import anthropic_deferred_tools, openai_responses_deferred_tools
from .gemini import (
    gemini_function_declaration,
    gemini_function_response,
    parse_gemini_function_calls,
)
from .mcp import (
    EXAMPLES_META_KEY,
    UI_META_KEY,
    mcp_call_tool_result,
    mcp_tool,
    parse_mcp_tool_call,
)
from .openai import (
    openai_responses_tool,
    openai_responses_tool_result,
    openai_tool,
    openai_tool_message,
    parse_openai_responses_tool_calls,
    parse_openai_tool_calls,
)
from .schema_compat import is_strict_compatible, strict_schema_problems

__all__ = [
    "EXAMPLES_META_KEY",
    "EXPORT_FORMATS",
    "UI_META_KEY",
    "ExportFormat",
    "anthropic_deferred_tools",
    "anthropic_tool",
    "anthropic_tool_result",
    "export_tool",
    "export_tools",
    "gemini_function_declaration",
    "gemini_function_response",
    "is_strict_compatible",
    "mcp_call_tool_result",
    "mcp_tool",
    "openai_responses_deferred_tools",
    "openai_responses_tool",
    "openai_responses_tool_result",
    "openai_tool",
    "openai_tool_message",
    "parse_anthropic_tool_calls",
    "parse_gemini_function_calls",
    "parse_mcp_tool_call",
    "parse_openai_responses_tool_calls",
    "parse_openai_tool_calls",
    "parse_tool_calls",
    "strict_schema_problems",
    "tool_result",
]

ExportFormat = Literal["openai", "openai-responses", "anthropic", "gemini", "mcp"]

#: Every format the exporters speak, in documentation order.
EXPORT_FORMATS: Final[tuple[ExportFormat, ...]] = (
    "openai",
    "openai-responses",
    "anthropic",
    "gemini",
    "mcp",
)

_Definition = Callable[[Tool], dict[str, Any]]
_Parser = Callable[[Any], list[ToolCall]]
_Result = Callable[[CallOutcome, ToolCall | None], dict[str, Any]]


def _parse_mcp(payload: Any) -> list[ToolCall]:
    return [parse_mcp_tool_call(payload)]


def _mcp_result(outcome: CallOutcome, call: ToolCall | None) -> dict[str, Any]:
    return mcp_call_tool_result(outcome)


_DEFINITIONS: dict[str, _Definition] = {
    "openai": openai_tool,
    "openai-responses": openai_responses_tool,
    "anthropic": anthropic_tool,
    "gemini": gemini_function_declaration,
    "mcp": mcp_tool,
}
_PARSERS: dict[str, _Parser] = {
    "openai": parse_openai_tool_calls,
    "openai-responses": parse_openai_responses_tool_calls,
    "anthropic": parse_anthropic_tool_calls,
    "gemini": parse_gemini_function_calls,
    "mcp": _parse_mcp,
}
_RESULTS: dict[str, _Result] = {
    "openai": openai_tool_message,
    "openai-responses": openai_responses_tool_result,
    "anthropic": anthropic_tool_result,
    "gemini": gemini_function_response,
    "mcp": _mcp_result,
}


def _pick(table: dict[str, Any], format: str) -> Any:
    try:
        return table[format]
    except (KeyError, TypeError):
        valid = ", ".join(EXPORT_FORMATS)
        raise ValueError(f"unknown export format {format!r}; expected one of: {valid}") from None


def export_tool(tool: Tool, format: str) -> dict[str, Any]:
    """One tool's definition in ``format`` (one of :data:`EXPORT_FORMATS`), JSON-ready."""
    definition: _Definition = _pick(_DEFINITIONS, format)
    return definition(tool)


def export_tools(tools: Iterable[Tool], format: str) -> list[dict[str, Any]]:
    """The tools' definitions in ``format``, in order, as a JSON-ready list.

    ``openai``/``openai-responses``/``anthropic`` lists are the request's ``tools``; a ``gemini``
    list is the ``functionDeclarations`` of one Gemini ``Tool``; an ``mcp`` list is the
    ``tools`` of a ``tools/list`` result. An unknown format raises ``ValueError`` naming the
    valid ones.
    """
    definition: _Definition = _pick(_DEFINITIONS, format)
    return [definition(tool) for tool in tools]


def parse_tool_calls(payload: Any, format: str) -> list[ToolCall]:
    """The tool calls in a provider payload (see each format's ``parse_*`` function).

    Provider names are mapped back to tool ids; names that do not decode are kept as given.
    Malformed payloads raise :class:`~toolgate.ToolCallParseError` naming the field.
    """
    parser: _Parser = _pick(_PARSERS, format)
    return parser(payload)


def tool_result(
    outcome: CallOutcome, format: str, *, call: ToolCall | None = None
) -> dict[str, Any]:
    """The provider's tool-result message or block for an outcome, errors flagged as errors.

    Pass the parsed ``call`` so the result carries the provider's call id (and, for Gemini, the
    function name the model used). Only model-facing content is sent: an outcome's
    ``visualization``, ``detail`` and ``metadata`` never appear.
    """
    result: _Result = _pick(_RESULTS, format)
    return result(outcome, call)
