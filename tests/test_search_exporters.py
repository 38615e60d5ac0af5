"""Deferred-loading exports (Anthropic ``defer_loading`` + tool search tool, OpenAI Responses
``defer_loading`` + ``tool_search``), checked against the official SDKs' own types as
test_exporters.py checks the plain exports."""

from __future__ import annotations

import typing
from typing import Any

import anthropic.types as anthropic_types
import openai.types.responses as openai_responses
import pytest

from test_exporters import ShapeError, typed_dict
from toolgate import Tool, tool
from toolgate.exporters import (
    anthropic_deferred_tools,
    anthropic_tool,
    openai_responses_deferred_tools,
)


@tool(namespace="fs", effect="read_only")
def read_file(path: str) -> str:
    """Read a file."""
    return path


@tool(namespace="chat", effect="communication")
def post(channel: str, text: str) -> str:
    """Post a message."""
    return text


TOOLS: list[Tool] = [read_file.tool, post.tool]


def _one_of(union: Any, value: Any) -> None:
    """``value`` is accepted by one of the TypedDicts of the SDK union ``union``."""
    problems = []
    for member in typing.get_args(union):
        try:
            typed_dict(member)(value)
            return
        except ShapeError as problem:
            problems.append(str(problem))
    raise AssertionError(f"no member of the union accepts {value}: {problems[:2]}")


@pytest.mark.parametrize("search", ["bm25", "regex"])
def test_anthropic_deferred_tools_are_valid_tool_union_params(search: str) -> None:
    exported = anthropic_deferred_tools(TOOLS, always=["fs:*"], search=search)  # type: ignore[arg-type]
    for definition in exported:
        _one_of(anthropic_types.ToolUnionParam, definition)
    search_tool, reader, poster = exported
    assert search_tool == {
        "type": f"tool_search_tool_{search}_20251119",
        "name": f"tool_search_tool_{search}",
    }
    typed_dict(anthropic_types.ToolParam)(poster)
    assert poster["defer_loading"] is True
    assert "defer_loading" not in reader  # a core tool is sent in full
    assert reader == anthropic_tool(TOOLS[0])


@pytest.mark.parametrize("execution", ["server", "client"])
def test_openai_deferred_tools_are_valid_responses_tool_params(execution: str) -> None:
    exported = openai_responses_deferred_tools(TOOLS, execution=execution)  # type: ignore[arg-type]
    search_tool, *functions = exported
    typed_dict(openai_responses.ToolSearchToolParam)(search_tool)
    assert search_tool["execution"] == execution
    assert ("parameters" in search_tool) is (execution == "client")
    for definition in functions:
        typed_dict(openai_responses.FunctionToolParam)(definition)
        assert definition["defer_loading"] is True
    for definition in exported:
        _one_of(openai_responses.ToolParam, definition)


def test_a_wrong_key_would_be_caught() -> None:
    # The check is not vacuous: a misspelt flag is refused by the SDK type.
    definition = {**anthropic_tool(TOOLS[1]), "deferLoading": True}
    with pytest.raises(ShapeError):
        typed_dict(anthropic_types.ToolParam)(definition)
