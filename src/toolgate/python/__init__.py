"""Python-function tools: the ``@tool`` decorator, the tool context and the binding."""

from .binding import PythonBinding
from .context import ToolContext
from .decorator import FunctionTool, tool

__all__ = ["FunctionTool", "PythonBinding", "ToolContext", "tool"]
