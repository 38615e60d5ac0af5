"""toolgate as LangChain ``create_agent`` middleware: the conversation's tools at every step.

``create_agent`` binds its tools once; this middleware gives the model, at each model call,
the tools the gateway lists for the conversation now — under progressive disclosure, the core
set plus what ``search_tools`` found so far — and runs a call of any of them through the
adapter's tools (approvals as interrupts, idempotency keys, results as ``ToolMessage``\\ s)::

    agent = create_agent(model, middleware=[ToolgateMiddleware(gateway)], checkpointer=saver)

This module needs the ``langchain`` package (``create_agent``); the tools themselves
(:mod:`toolgate.integrations.langchain`) need only ``langchain-core`` and ``langgraph``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ToolCallRequest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool

from ..base import ToolGateway
from ._search import ToolgateSearchTool
from ._sync import run_sync
from ._tools import ToolgateTool, atoolgate_tools, session_of

__all__ = ["ToolgateMiddleware"]


class ToolgateMiddleware(AgentMiddleware):
    """``create_agent`` middleware presenting the gateway's tools for the conversation at every
    model call, and running their calls.

    ``search=True`` (default) also gives the model ``search_tools``. The other options are
    those of :func:`~toolgate.integrations.langchain.toolgate_tools`. An application tool
    given to ``create_agent`` under a gateway tool's name is replaced by the gateway's.
    """

    def __init__(
        self,
        gateway: ToolGateway,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        approvals: Literal["interrupt", "message"] = "interrupt",
        decided_by: str = "langgraph",
        search: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(gateway, ToolGateway):
            raise TypeError(f"gateway must be a toolgate ToolGateway, not {type(gateway).__name__}")
        self.gateway = gateway
        self.session_id = session_id
        self.workspace = workspace
        self.approvals: Literal["interrupt", "message"] = approvals
        self.decided_by = decided_by
        # Registered with create_agent (its ToolNode knows it); the gateway's tools are not:
        # they change per step and run through wrap_tool_call.
        self.tools: list[BaseTool] = (
            [ToolgateSearchTool(gateway=gateway, session_id=session_id)] if search else []
        )

    async def _current(self) -> list[BaseTool]:
        return await atoolgate_tools(
            self.gateway,
            session_id=session_of(self.session_id, None),
            workspace=self.workspace,
            approvals=self.approvals,
            decided_by=self.decided_by,
        )

    @staticmethod
    def _with(request: ModelRequest, current: list[BaseTool]) -> ModelRequest:
        names = {tool.name for tool in current}
        # Keep the application's own tools (and search_tools); replace the gateway's.
        others = [
            tool
            for tool in request.tools
            if not isinstance(tool, ToolgateTool) and getattr(tool, "name", None) not in names
        ]
        return request.override(tools=[*others, *current])

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[Any]]
    ) -> Any:
        return await handler(self._with(request, await self._current()))

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        return handler(self._with(request, run_sync(self._current())))

    @staticmethod
    def _unknown(request: ToolCallRequest) -> ToolMessage:
        name = request.tool_call["name"]
        return ToolMessage(
            content=(
                f"Error [tool_not_found]: There is no tool named {name!r} among your tools; "
                "search_tools finds more."
            ),
            tool_call_id=request.tool_call["id"] or "",
            name=name,
            status="error",
        )

    @staticmethod
    def _ours(request: ToolCallRequest) -> bool:
        return isinstance(request.tool, (ToolgateTool, ToolgateSearchTool))

    @staticmethod
    def _pick(request: ToolCallRequest, current: list[BaseTool]) -> BaseTool | None:
        name = request.tool_call["name"]
        return next((tool for tool in current if tool.name == name), None)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        if self._ours(request):
            return await handler(request)
        # A gateway tool the model saw at this step — also when an application tool has its
        # name (the model was shown the gateway's, with its approval), an application tool,
        # or an invented name, answered as the gateway answers one.
        tool = self._pick(request, await self._current())
        if tool is None:
            return await handler(request) if request.tool is not None else self._unknown(request)
        return await handler(request.override(tool=tool))

    def wrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]
    ) -> Any:
        if self._ours(request):
            return handler(request)
        tool = self._pick(request, run_sync(self._current()))
        if tool is None:
            return handler(request) if request.tool is not None else self._unknown(request)
        return handler(request.override(tool=tool))
