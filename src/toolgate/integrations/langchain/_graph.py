"""Graph wiring for hand-built LangGraph graphs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["send_tool_calls"]


def send_tool_calls(
    state: Mapping[str, Any] | list[Any], *, node: str = "tools", messages_key: str = "messages"
) -> Any:
    """A conditional edge running each tool call of the last AI message as its own LangGraph
    task (as ``create_agent`` does), or ``END`` when there is none::

        graph.add_conditional_edges("agent", send_tool_calls, ["tools", END])

    Each waiting call then surfaces as its own interrupt with its own id, and LangGraph gives
    each resume value to the task it names — where one ``ToolNode`` task for all calls would
    hand bare decisions out by order.
    """
    from langgraph.graph import END
    from langgraph.types import Send

    messages = state if isinstance(state, list) else state.get(messages_key, [])
    tool_calls = getattr(messages[-1], "tool_calls", None) if messages else None
    if not tool_calls:
        return END
    return [Send(node, [call]) for call in tool_calls]
