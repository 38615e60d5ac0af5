"""Which tool calls share a call's LangGraph task.

A plain ``ToolNode`` reached by an edge runs every tool call of the last AI message in ONE
task, and LangGraph hands a task's resume values to its ``interrupt()`` calls by order — and
parallel tools reach ``interrupt()`` in no fixed order. So a bare answer there may reach another
call than the one the person was shown. To tell, each tool asks ``ToolNode`` for its
``ToolRuntime`` (LangGraph's own injection: a tool whose input schema has a ``ToolRuntime``
field gets it, and the model cannot supply it — ``ToolNode`` overwrites the argument).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, create_model
from pydantic.json_schema import SkipJsonSchema

__all__ = ["RUNTIME_ARG", "runtime_schema", "sharing_calls", "take_runtime"]

#: The argument under which ``ToolNode`` injects the call's ``ToolRuntime``.
RUNTIME_ARG = "toolgate_runtime__"

#: What LangGraph's run metadata calls a task started by a ``Send`` (``create_agent`` and
#: :func:`send_tool_calls` send one tool call per task).
_PUSH = "__pregel_push"


def _runtime_class() -> type | None:
    try:
        from langgraph.prebuilt import ToolRuntime
    except ImportError:  # no LangGraph: no ToolNode injects anything
        return None
    return ToolRuntime


def runtime_schema(name: str) -> type[BaseModel] | None:
    """The input schema that makes ``ToolNode`` inject the ``ToolRuntime`` (only it looks at
    it: the model is sent the tool's JSON Schema, ``args_schema``)."""
    runtime = _runtime_class()
    if runtime is None:
        return None

    class ToolgateInput(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True, extra="allow", title=name)

    # Not part of the tool's JSON Schema (the runtime is no JSON value).
    # The class is found at run time (LangGraph is optional), so mypy cannot see a type here.
    annotation: Any = SkipJsonSchema[runtime | None]  # type: ignore[misc, valid-type]
    fields: dict[str, Any] = {RUNTIME_ARG: (annotation, None)}
    return create_model(f"{name}_input", __base__=ToolgateInput, **fields)


def take_runtime(arguments: dict[str, Any]) -> Any:
    """Remove and return the injected ``ToolRuntime`` from ``arguments``; a value of that name
    that is not one (the model wrote it, outside ``ToolNode``) stays an argument."""
    runtime = _runtime_class()
    value = arguments.get(RUNTIME_ARG)
    if runtime is not None and isinstance(value, runtime):
        del arguments[RUNTIME_ARG]
        return value
    return None


def _messages(state: Any) -> list[Any]:
    if isinstance(state, list):
        return state
    if isinstance(state, Mapping):
        return [item for value in state.values() if isinstance(value, list) for item in value]
    messages = getattr(state, "messages", None)
    return list(messages) if isinstance(messages, list) else []


def sharing_calls(runtime: Any, tool_call_id: str | None) -> list[str] | None:
    """The other tool calls that run in this call's task (their ``interrupt()`` calls share
    its resume values), ``[]`` when it has the task to itself, ``None`` when unknown (no
    ``ToolNode`` ran the call)."""
    if runtime is None or not tool_call_id:
        return None
    path = ((getattr(runtime, "config", None) or {}).get("metadata") or {}).get("langgraph_path")
    if isinstance(path, (list, tuple)) and path and path[0] == _PUSH:
        # A Send's task: create_agent and send_tool_calls send one tool call each.
        return []
    # Reached by an edge: ToolNode runs every tool call of the latest AI message.
    for message in reversed(_messages(getattr(runtime, "state", None))):
        ids = [call.get("id") for call in getattr(message, "tool_calls", None) or ()]
        if tool_call_id in ids:
            # Only the call's own entry is left out: a model can give two calls one id.
            ids.remove(tool_call_id)
            return [str(i) for i in ids]
    # Not found: assume the worst — a bare answer could belong to another call.
    return ["(unknown)"]
