"""Deferred tool loading: the providers' forms for "send the model a search, not every tool".

* Anthropic (Messages API): every deferred tool carries ``"defer_loading": true`` and the list
  holds a tool search tool (``tool_search_tool_bm25_20251119`` or ``..._regex_20251119``); the
  API searches the deferred tools and loads only what the model finds.
* OpenAI (Responses API): deferred function tools carry ``"defer_loading": true`` and the list
  holds a ``{"type": "tool_search"}`` tool: run by OpenAI (``execution: "server"``), or by the
  caller (``"client"``), whose search toolgate answers with ``search_tools``.

Tools whose ids are in ``always`` (ids or ``fs:*`` patterns) are sent in full, not deferred.
Chat Completions and Gemini have no deferred form; their exports stay as they are.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from typing import Any, Literal

from ..model.tool import Tool
from .anthropic import anthropic_tool
from .openai import openai_responses_tool

__all__ = ["anthropic_deferred_tools", "openai_responses_deferred_tools"]

#: The client-run search tool's arguments, as toolgate's ``search_tools`` takes them.
_SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What you want to do, in plain words."},
        "limit": {"type": "integer", "description": "How many tools to return (1-100)."},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def _core(tool: Tool, always: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(tool.id, pattern) for pattern in always)


def anthropic_deferred_tools(
    tools: Iterable[Tool],
    *,
    always: Iterable[str] = (),
    search: Literal["bm25", "regex"] = "bm25",
) -> list[dict[str, Any]]:
    """Anthropic tool definitions with ``defer_loading`` set on all but ``always``, preceded by
    the API's tool search tool (``bm25``: natural-language queries; ``regex``: patterns)."""
    core = tuple(always)
    search_tool: dict[str, Any] = {
        "type": f"tool_search_tool_{search}_20251119",
        "name": f"tool_search_tool_{search}",
    }
    return _deferred(search_tool, tools, anthropic_tool, core)


def openai_responses_deferred_tools(
    tools: Iterable[Tool],
    *,
    always: Iterable[str] = (),
    execution: Literal["server", "client"] = "server",
) -> list[dict[str, Any]]:
    """Responses API function tools with ``defer_loading`` set on all but ``always``, preceded
    by a ``tool_search`` tool (``client``: your code runs the search, with toolgate's
    ``search_tools`` arguments)."""
    core = tuple(always)
    search_tool: dict[str, Any] = {"type": "tool_search", "execution": execution}
    if execution == "client":
        search_tool["description"] = (
            "Search the available tools by what you want to do; returns the best matches."
        )
        search_tool["parameters"] = _SEARCH_PARAMETERS
    return _deferred(search_tool, tools, openai_responses_tool, core)


def _deferred(
    search_tool: dict[str, Any],
    tools: Iterable[Tool],
    convert: Callable[[Tool], dict[str, Any]],
    core: tuple[str, ...],
) -> list[dict[str, Any]]:
    """The search tool, then every tool converted, deferred unless it is a ``core`` one."""
    out = [search_tool]
    for tool in tools:
        definition = convert(tool)
        if not _core(tool, core):
            definition["defer_loading"] = True
        out.append(definition)
    return out
