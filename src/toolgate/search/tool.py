"""The ``toolgate:search_tools`` tool: agents search the catalog themselves.

It is an ordinary tool, so calls to it go through the pipeline like any other (access rules,
rate limits, audit) and reach agents over MCP and HTTP alike. It returns the matching tools'
definitions (provider-safe name, id, title, description, input schema), searched with the
caller's own agent name, so it never reveals a tool the caller may not call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from ..errors import SearchQueryError, ToolError
from ..model.effects import SideEffect
from ..model.names import to_provider_name
from ..python import FunctionTool, ToolContext, tool
from .hits import SearchHit
from .query import DEFAULT_LIMIT, MAX_LIMIT

__all__ = ["SEARCH_TOOL_ID", "SearchFunction", "hit_definition", "search_tool"]

#: The id of the search tool (provider name ``toolgate__search_tools``).
SEARCH_TOOL_ID = "toolgate:search_tools"

#: ``(query, agent, namespaces, limit) -> hits``: the gateway's search for one caller.
SearchFunction = Callable[[str, "str | None", "frozenset[str] | None", int], list[SearchHit]]


def hit_definition(hit: SearchHit) -> dict[str, Any]:
    """One search result as a tool definition the model can call."""
    tool_value = hit.tool
    return {
        "name": to_provider_name(tool_value.id),
        "id": tool_value.id,
        "title": tool_value.display_title,
        "description": tool_value.description,
        "input_schema": tool_value.input_schema_dict(),
        "score": hit.score,
    }


def search_tool(search: SearchFunction) -> FunctionTool[Any, Any]:
    """The search tool, bound to the gateway's ``search`` function."""

    @tool(
        id=SEARCH_TOOL_ID,
        title="Search tools",
        effect=SideEffect.READ_ONLY,
        examples=["find a tool that can do this", "which tool should I use to"],
    )
    def search_tools(
        query: Annotated[
            str,
            Field(description="What you want to do, in plain words.", max_length=2000),
        ],
        context: ToolContext,
        limit: Annotated[
            int, Field(description="How many tools to return.", ge=1, le=MAX_LIMIT)
        ] = DEFAULT_LIMIT,
    ) -> dict[str, Any]:
        """Search the available tools by what you want to do, and get the definitions of the
        best matches (best first). Call a returned tool by its `name`. Use it when no tool you
        have fits the task."""
        try:
            hits = search(query, context.agent, context.namespaces, limit)
        except SearchQueryError as error:
            raise ToolError(str(error)) from None
        return {"tools": [hit_definition(hit) for hit in hits if hit.tool.id != SEARCH_TOOL_ID]}

    return search_tools
