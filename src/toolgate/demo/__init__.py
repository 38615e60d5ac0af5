"""The bundled demo tools (namespace ``demo``).

Small, deterministic Python tools that exercise the pipeline and every ``_visualization`` type of
the Jean2 seed. ``toolgate demo`` tours them without any configuration; a ``toolgate.yaml`` with
``demo: true`` adds them to the configured gateway.

    from toolgate import Gateway
    from toolgate.demo import tools

    gateway = Gateway()
    gateway.add(tools)
"""

from __future__ import annotations

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
    shell_echo,
    show_code,
    table,
    todo,
    word_count,
)

__all__ = [
    "add",
    "big_output",
    "diff_text",
    "diff_texts",
    "fail",
    "list_files",
    "render_markdown",
    "shell_echo",
    "show_code",
    "table",
    "todo",
    "tools",
    "word_count",
]

#: Every demo tool, in the order the tour shows them.
tools: list[FunctionTool[Any, Any]] = [
    add,
    word_count,
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
]
