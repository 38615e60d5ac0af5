"""``search_tools`` for the model: find tools by what they do, mid-run."""

from __future__ import annotations

import copy
import json
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, Field, PrivateAttr

from ..base import ToolGateway
from ._sync import run_sync
from ._tools import session_of

__all__ = ["SEARCH_TOOL_NAME", "ToolgateSearchTool"]

#: The search tool's name (the MCP server's is the same).
SEARCH_TOOL_NAME = "search_tools"

#: The most tools one search returns, and the longest query taken.
_MAX_LIMIT = 20
_MAX_QUERY = 500

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": _MAX_QUERY,
            "description": "What the tool should do, in a few words.",
        },
        "limit": {"type": "integer", "minimum": 1, "maximum": _MAX_LIMIT, "default": 5},
    },
    "required": ["query"],
    "additionalProperties": False,
}


class ToolgateSearchTool(BaseTool):
    """Searches the gateway's tools for the model. Under progressive disclosure the tools found
    join the conversation's list: with :class:`~toolgate.integrations.langchain.middleware.
    ToolgateMiddleware` the model can call them from its next step."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = SEARCH_TOOL_NAME
    description: str = (
        "Find more tools by what they do. The tools found can be called from your next step."
    )
    args_schema: Any = Field(default_factory=lambda: copy.deepcopy(_SCHEMA))
    gateway: Any
    """The :class:`~toolgate.integrations.base.ToolGateway` searched."""
    session_id: str | None = None
    """The conversation whose list the found tools join; ``None``: the LangGraph thread id."""

    _gateway: ToolGateway = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        if not isinstance(self.gateway, ToolGateway):
            raise TypeError(
                f"gateway must be a toolgate ToolGateway, not {type(self.gateway).__name__}"
            )
        self._gateway = self.gateway

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if not isinstance(tool_input, dict):
            raise ValueError(f"{self.name} takes a JSON object of arguments, not a string")
        return (), {"arguments": dict(tool_input), "tool_call_id": tool_call_id}

    def _run(
        self,
        arguments: dict[str, Any],
        tool_call_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> Any:
        return run_sync(self._arun(arguments, tool_call_id, config))

    async def _arun(
        self,
        arguments: dict[str, Any],
        tool_call_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> Any:
        query = arguments.get("query")
        limit = arguments.get("limit", 5)
        # The model wrote these arguments; nothing checked them against the schema yet.
        if not isinstance(query, str) or not query.strip() or len(query) > _MAX_QUERY:
            return self._answer(
                f"Error [invalid_arguments]: 'query' must be a text of 1 to {_MAX_QUERY} "
                "characters",
                tool_call_id,
                error=True,
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= _MAX_LIMIT:
            return self._answer(
                f"Error [invalid_arguments]: 'limit' must be a whole number from 1 to {_MAX_LIMIT}",
                tool_call_id,
                error=True,
            )
        found = await self._gateway.search_tools(
            query, session_id=session_of(self.session_id, config), limit=limit
        )
        if not found:
            return self._answer("No tool matches that; try other words.", tool_call_id)
        rows = [{"name": spec.name, "description": spec.description} for spec in found]
        return self._answer(json.dumps(rows, ensure_ascii=False), tool_call_id)

    def _answer(self, text: str, tool_call_id: str | None, *, error: bool = False) -> Any:
        if tool_call_id is None:
            return text
        return ToolMessage(
            content=text,
            tool_call_id=tool_call_id,
            name=self.name,
            status="error" if error else "success",
        )
