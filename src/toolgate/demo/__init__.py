"""The bundled demo tools (namespace ``demo``).

Small, deterministic Python tools that exercise the pipeline, and a few tool folders
(:data:`TOOL_FOLDERS`: ``word_count``, ``file_diff``, ``system_info``; ``tool.md`` plus a script
each) that show script tools; together they return every ``_visualization`` type. Every name is a
valid function name as it is, so MCP and the exporters show ``demo__file_diff``, not an escaped
form. ``toolgate demo`` tours them without any configuration; a ``toolgate.yaml`` with
``demo: true`` adds them all to the configured gateway.

    from toolgate import Gateway
    from toolgate.demo import tools

    gateway = Gateway()
    gateway.add(tools)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..python import FunctionTool
from .tools import (
    add,
    big_output,
    diff_text,
    diff_texts,
    fail,
    list_files,
    render_markdown,
    send_message,
    shell_echo,
    show_code,
    table,
    todo,
)

__all__ = [
    "TOOL_FOLDERS",
    "add",
    "big_output",
    "diff_text",
    "diff_texts",
    "fail",
    "list_files",
    "render_markdown",
    "send_message",
    "shell_echo",
    "show_code",
    "table",
    "todo",
    "tools",
]

#: Every demo tool, in the order the tour shows them.
tools: list[FunctionTool[Any, Any]] = [
    add,
    diff_text,
    diff_texts,
    list_files,
    todo,
    table,
    render_markdown,
    show_code,
    shell_echo,
    big_output,
    fail,
    send_message,
]

#: The bundled demo tool folders (each sub-folder is one tool; namespace ``demo`` when configured).
TOOL_FOLDERS: Path = Path(__file__).parent / "tool_folders"
