"""The demo tools themselves. Each one is small, deterministic and runs no external program.

Together they show the argument validation of the pipeline, eight of the nine ``_visualization``
types (diff, diffs, code, file-list, table, markdown, shell-output, todo-list; the ninth, none, is
the ``word_count`` tool folder's), the 50,000-character overflow rule and how a tool failure
reaches the model.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ..errors import ToolError
from ..python import ToolContext, tool
from .diffing import diff_texts as _diff
from .diffing import guess_language

__all__ = [
    "TextEdit",
    "TodoItem",
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
]

_NS = "demo"


@tool(namespace=_NS, title="Add two integers", effect="read_only")
def add(a: int, b: int) -> int:
    """Add two integers and return their sum.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


@tool(namespace=_NS, title="Diff two texts", effect="read_only")
def diff_text(old: str, new: str, path: str = "text.txt") -> dict[str, Any]:
    """Compare two versions of a text and return a unified diff with its statistics.

    Args:
        old: The original text.
        new: The changed text.
        path: The file name shown in the diff (it is not read or written).
    """
    diff = _diff(old, new, path)
    return {
        "path": path,
        "additions": diff.additions,
        "deletions": diff.deletions,
        "diff": diff.unified,
        "_visualization": diff.visualization,
    }


class TextEdit(BaseModel):
    """One file's old and new text."""

    path: str = Field(description="The file name shown in the diff.")
    old: str = Field(description="The original text.")
    new: str = Field(description="The changed text.")


@tool(namespace=_NS, title="Diff several texts", effect="read_only")
def diff_texts(edits: list[TextEdit]) -> dict[str, Any]:
    """Compare several pairs of texts at once, as a multi-file edit would.

    Args:
        edits: The files to compare, each with a path, its old text and its new text.
    """
    diffs = [_diff(edit.old, edit.new, edit.path) for edit in edits]
    return {
        "files": [
            {"path": edit.path, "additions": d.additions, "deletions": d.deletions}
            for edit, d in zip(edits, diffs, strict=True)
        ],
        "_visualization": {
            "type": "diffs",
            "title": f"{len(diffs)} files compared",
            "items": [d.visualization for d in diffs],
        },
    }


@tool(namespace=_NS, title="List files", effect="read_only")
def list_files(
    context: ToolContext,
    folder: str = ".",
    limit: Annotated[int, Field(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """List the folders and files directly inside a folder of the workspace.

    The folder must stay inside the workspace (the current folder when the caller names none);
    paths that lead outside it are refused.

    Args:
        folder: The folder to list, relative to the workspace.
        limit: The most entries to return.
    """
    root = (context.workspace or Path.cwd()).resolve()
    target = (root / folder).resolve()
    if target != root and root not in target.parents:
        raise ToolError(
            f"{folder!r} is outside the workspace {root}; name a folder inside it, such as '.'."
        )
    if not target.is_dir():
        raise ToolError(f"{folder!r} is not a folder in the workspace; list '.' to see what is.")
    entries = sorted(target.iterdir(), key=lambda p: p.name)
    shown = entries[:limit]
    folders = [p.relative_to(root).as_posix() + "/" for p in shown if p.is_dir()]
    files = [p.relative_to(root).as_posix() for p in shown if not p.is_dir()]
    groups = [
        {"label": label, "icon": icon, "files": [{"path": p, "action": action} for p in paths]}
        for label, icon, action, paths in (
            ("Folders", "folder", "folder", folders),
            ("Files", "file", "file", files),
        )
        if paths
    ]
    relative = target.relative_to(root).as_posix()
    return {
        "folder": relative,
        "folders": folders,
        "files": files,
        "truncated": len(entries) > limit,
        "_visualization": {
            "type": "file-list",
            "title": f"Contents of {relative}",
            "groups": groups,
            "total": len(entries),
        },
    }


class TodoItem(BaseModel):
    """One entry of a to-do list."""

    content: str = Field(description="What to do.")
    status: Literal["pending", "in_progress", "completed", "cancelled"] = Field(
        default="pending", description="Where the entry stands."
    )
    priority: Literal["high", "medium", "low"] | None = Field(
        default=None, description="How urgent the entry is."
    )


@tool(namespace=_NS, title="Show a to-do list", effect="read_only")
def todo(items: list[TodoItem], title: str = "Plan") -> dict[str, Any]:
    """Show a to-do list and count its entries by status.

    Args:
        items: The entries, in order.
        title: A heading for the list.
    """
    counts = {status: 0 for status in ("pending", "in_progress", "completed", "cancelled")}
    for item in items:
        counts[item.status] += 1
    return {
        "total": len(items),
        **counts,
        "_visualization": {
            "type": "todo-list",
            "title": title,
            "items": [item.model_dump(exclude_none=True) for item in items],
        },
    }


_PLANETS: tuple[dict[str, Any], ...] = (
    {"name": "Mercury", "kind": "rocky", "moons": 0, "distance": 0.39},
    {"name": "Venus", "kind": "rocky", "moons": 0, "distance": 0.72},
    {"name": "Earth", "kind": "rocky", "moons": 1, "distance": 1.0},
    {"name": "Mars", "kind": "rocky", "moons": 2, "distance": 1.52},
    {"name": "Jupiter", "kind": "gas giant", "moons": 95, "distance": 5.2},
    {"name": "Saturn", "kind": "gas giant", "moons": 146, "distance": 9.54},
    {"name": "Uranus", "kind": "ice giant", "moons": 28, "distance": 19.19},
    {"name": "Neptune", "kind": "ice giant", "moons": 16, "distance": 30.07},
)


@tool(namespace=_NS, title="Planet table", effect="read_only")
def table(
    sort_by: Literal["name", "moons", "distance"] = "distance",
    limit: Annotated[int, Field(ge=1, le=8)] = 8,
) -> dict[str, Any]:
    """Return the planets of the solar system as a table.

    Args:
        sort_by: The column to sort by (moons sorts the most first).
        limit: How many planets to return.
    """
    rows = sorted(_PLANETS, key=lambda r: r[sort_by], reverse=sort_by == "moons")[:limit]
    return {
        "rows": rows,
        "_visualization": {
            "type": "table",
            "title": "Planets",
            "columns": [
                {"key": "name", "label": "Planet"},
                {"key": "kind", "label": "Kind"},
                {"key": "moons", "label": "Moons"},
                {"key": "distance", "label": "Distance (AU)"},
            ],
            "rows": rows,
            "totalRows": len(_PLANETS),
        },
    }


@tool(namespace=_NS, title="Render markdown", effect="read_only")
def render_markdown(text: str, title: str | None = None) -> dict[str, Any]:
    """Show a markdown document to the user and return its outline.

    Args:
        text: The markdown source.
        title: A heading shown above the rendered document.
    """
    headings = [line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")]
    visualization: dict[str, Any] = {"type": "markdown", "content": text}
    if title is not None:
        visualization["title"] = title
    return {"characters": len(text), "headings": headings, "_visualization": visualization}


@tool(namespace=_NS, title="Show code", effect="read_only")
def show_code(
    code: str,
    path: str = "example.py",
    language: str | None = None,
    highlight_lines: list[int] | None = None,
) -> dict[str, Any]:
    """Show a piece of source code with syntax highlighting.

    Args:
        code: The source code.
        path: The file name shown with the code (it is not read or written).
        language: The language to highlight; guessed from the path when omitted.
        highlight_lines: Line numbers (from 1) to emphasise.
    """
    language = language or guess_language(path) or "text"
    lines = len(code.splitlines())
    visualization: dict[str, Any] = {
        "type": "code",
        "path": path,
        "content": code,
        "language": language,
        "lineCount": lines,
    }
    if highlight_lines:
        visualization["highlightLines"] = highlight_lines
    return {"path": path, "language": language, "lines": lines, "_visualization": visualization}


@tool(namespace=_NS, title="Echo like a shell", effect="read_only")
def shell_echo(text: str, stderr: str = "", exit_code: int = 0) -> dict[str, Any]:
    """Pretend to run ``echo TEXT`` and return what a shell would print. Nothing is executed.

    Args:
        text: The text to echo.
        stderr: Text to report on standard error.
        exit_code: The exit code to report.
    """
    stdout = text + "\n"
    return {
        "stdout": stdout,
        "stderr": stderr,
        "exitCode": exit_code,
        "_visualization": {
            "type": "shell-output",
            "command": f"echo {shlex.quote(text)}",
            "stdout": stdout,
            "stderr": stderr,
            "exitCode": exit_code,
        },
    }


@tool(namespace=_NS, title="Produce a big output", effect="read_only")
def big_output(size: Annotated[int, Field(ge=0, le=1_000_000)] = 60_000) -> str:
    """Return exactly ``size`` characters of numbered lines, to show the overflow rule.

    Results over 50,000 characters are saved to a file; the model sees the first 10,000 and a
    note with the file's path.

    Args:
        size: How many characters to return.
    """
    line_count = size // 16 + 1
    text = "".join(f"line {n:07d} ....\n" for n in range(1, line_count + 1))
    return text[:size]


@tool(namespace=_NS, title="Always fail", effect="read_only")
def fail(message: str = "This demo tool always fails.") -> str:
    """Fail on purpose, to show how a tool error reaches the model.

    Args:
        message: The error message to report.
    """
    raise ToolError(message)


def _confirm_message(arguments: Any) -> dict[str, Any]:
    return {
        "title": "Send a message",
        "facts": [
            {"label": "To", "value": str(arguments.get("to", ""))},
            {"label": "Text", "value": str(arguments.get("text", ""))[:200]},
        ],
    }


@tool(
    namespace=_NS,
    title="Send a message",
    effect="communication",
    build_confirmation=_confirm_message,
    ui={"prefix": "Send", "args": {"text": {}, "to": {"prefix": "To"}}},
)
def send_message(to: str, text: str) -> dict[str, Any]:
    """Send a short message to someone. It needs a person's approval first (a demo: nothing is
    sent anywhere; the receipt says what would have been).

    Args:
        to: Who the message is for (a name or an address).
        text: The message.
    """
    return {"sent": False, "to": to, "text": text, "note": "demo: messages are not delivered"}
