"""What ``Gateway.add`` accepts, turned into registry entries."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...errors import ToolDefinitionError
from ...model import ImplementationKind, Tool
from ...python.binding import PythonBinding
from ...python.decorator import FunctionTool, tool
from ...python.schema import inspect_function
from ...registry import RegisteredTool

__all__ = ["entry_for", "flatten"]


def entry_for(item: Any, handler: Callable[..., Any] | None) -> RegisteredTool:
    """The registry entry for a ``@tool`` function, a plain function, or a :class:`Tool` with a
    ``handler``. Raises :class:`ToolDefinitionError` for anything else."""
    if isinstance(item, FunctionTool):
        return RegisteredTool(item.tool, item.binding)
    if isinstance(item, Tool):
        if item.kind is not ImplementationKind.PYTHON:
            raise ToolDefinitionError(
                f"{item.id}: {item.kind} tools are registered by their loader, not add()"
            )
        if handler is None:
            raise ToolDefinitionError(f"{item.id}: add(tool, handler=function) needs a handler")
        signature = inspect_function(handler, description=item.description)
        return RegisteredTool(item, PythonBinding.for_function(handler, signature))
    if callable(item):
        wrapped = tool(item)
        return RegisteredTool(wrapped.tool, wrapped.binding)
    raise ToolDefinitionError(
        f"cannot add {item!r}: expected a @tool function, a function, or a Tool"
    )


def flatten(items: Iterable[Any]) -> Iterable[Any]:
    """Items with nested lists and tuples flattened, in order."""
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from flatten(item)
        else:
            yield item
