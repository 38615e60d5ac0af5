"""Render a validated ``_visualization`` (one of the nine types) for a person, with Rich.

Every renderer also reads well as plain text: off a terminal Rich drops the colours, and the
marks (``+``/``-`` diff lines, ✓ / … / ☐ to-do marks, ``$ command``) carry the meaning alone.
``title`` is shown as a heading; ``collapsed: true`` shrinks the whole thing to one summary line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

__all__ = ["render_visualization", "summarize"]

Viz = Mapping[str, Any]

_UNICODE_MARKS = {
    "completed": "✓",
    "in_progress": "…",
    "pending": "☐",
    "cancelled": "✗",
    "collapsed": "▸",
}
_ASCII_MARKS = {
    "completed": "[x]",
    "in_progress": "[~]",
    "pending": "[ ]",
    "cancelled": "[-]",
    "collapsed": ">",
}
_STATUS_STYLE = {
    "completed": "green",
    "in_progress": "yellow",
    "pending": "",
    "cancelled": "dim strike",
}
_PRIORITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim"}


def _marks(console: Console) -> Mapping[str, str]:
    return _UNICODE_MARKS if console.encoding.lower().startswith("utf") else _ASCII_MARKS


def _counts(viz: Viz) -> tuple[int, int]:
    changes = [c for hunk in viz.get("hunks", ()) for c in hunk.get("changes", ())]
    additions = viz.get("additions", sum(1 for c in changes if c["type"] == "added"))
    deletions = viz.get("deletions", sum(1 for c in changes if c["type"] == "removed"))
    return additions, deletions


def summarize(viz: Viz) -> str:
    """One line that says what the visualization holds (used for ``collapsed`` ones)."""
    kind = viz["type"]
    if kind == "diff":
        additions, deletions = _counts(viz)
        return f"diff of {viz['path']}: +{additions} -{deletions}"
    if kind == "diffs":
        totals = [_counts(item) for item in viz["items"]]
        return f"{len(totals)} diffs: +{sum(a for a, _ in totals)} -{sum(d for _, d in totals)}"
    if kind == "code":
        lines = viz.get("lineCount", len(viz["content"].splitlines()))
        return f"code {viz.get('path') or ''}: {lines} lines".replace("  ", " ")
    if kind == "file-list":
        files = sum(len(group["files"]) for group in viz["groups"])
        return f"{viz.get('total', files)} files in {len(viz['groups'])} groups"
    if kind == "table":
        rows = len(viz["rows"])
        total = viz.get("totalRows", rows)
        return f"table: {rows} rows" + (f" of {total}" if total != rows else "")
    if kind == "markdown":
        return f"markdown: {len(viz['content']):,} characters"
    if kind == "shell-output":
        exit_code = viz.get("exitCode")
        return f"$ {viz['command']}" + ("" if exit_code is None else f" (exit code {exit_code})")
    if kind == "todo-list":
        done = sum(1 for item in viz["items"] if item["status"] == "completed")
        return f"to-do list: {done} of {len(viz['items'])} done"
    return str(viz.get("message") or "nothing to show")


# -- one renderer per type ---------------------------------------------------------------------


def _diff(viz: Viz, console: Console) -> None:
    additions, deletions = _counts(viz)
    console.print(
        Text.assemble(
            (viz["path"], "bold"), "  ", (f"+{additions}", "green"), " ", (f"-{deletions}", "red")
        )
    )
    numbers = [
        c.get(key) or 0
        for hunk in viz["hunks"]
        for c in hunk["changes"]
        for key in ("oldLineNumber", "newLineNumber")
    ]
    width = max((len(str(n)) for n in numbers), default=1)
    for hunk in viz["hunks"]:
        console.print(
            Text(
                f"@@ -{hunk['oldStart']},{hunk['oldLines']} "
                f"+{hunk['newStart']},{hunk['newLines']} @@",
                style="cyan",
            )
        )
        for change in hunk["changes"]:
            old, new = change.get("oldLineNumber"), change.get("newLineNumber")
            kind = change["type"]
            sign, style = {"added": ("+", "green"), "removed": ("-", "red")}.get(kind, (" ", ""))
            old_text, new_text = ("" if n is None else str(n) for n in (old, new))
            gutter = f"{old_text:>{width}} {new_text:>{width}} │"
            console.print(
                Text.assemble((gutter, "dim"), (f" {sign} {change['content']}", style)),
                soft_wrap=True,
            )


def _diffs(viz: Viz, console: Console) -> None:
    for index, item in enumerate(viz["items"]):
        if index:
            console.print()
        _render(item, console)


def _code(viz: Viz, console: Console) -> None:
    from rich.syntax import Syntax

    path = viz.get("path")
    if path:
        created = " (new file)" if viz.get("created") else ""
        console.print(Text(f"{path}{created}", style="bold"))
    console.print(
        Syntax(
            # A final newline would show as an extra, empty numbered line.
            viz["content"].removesuffix("\n"),
            viz.get("language") or "text",
            line_numbers=True,
            highlight_lines=set(viz.get("highlightLines", ())),
            word_wrap=True,
            background_color="default",
        )
    )


def _file_list(viz: Viz, console: Console) -> None:
    for group in viz["groups"]:
        console.print(Text(f"{group['label']} ({len(group['files'])})", style="bold"))
        width = max((len(f.get("action", "")) for f in group["files"]), default=0)
        for entry in group["files"]:
            line = "" if entry.get("line") is None else f":{entry['line']}"
            action = entry.get("action", "")
            console.print(
                Text.assemble("  ", (f"{action:<{width}}", "cyan"), "  ", f"{entry['path']}{line}"),
                soft_wrap=True,
            )
    if "total" in viz:
        console.print(Text(f"{viz['total']} in total", style="dim"))


def _table(viz: Viz, console: Console) -> None:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    for column in viz["columns"]:
        table.add_column(column["label"], overflow="fold")
    for row in viz["rows"]:
        table.add_row(*(Text(_cell(row.get(column["key"]))) for column in viz["columns"]))
    console.print(table)
    total = viz.get("totalRows")
    if total is not None and total != len(viz["rows"]):
        console.print(Text(f"{len(viz['rows'])} of {total} rows shown", style="dim"))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _markdown(viz: Viz, console: Console) -> None:
    from rich.markdown import Markdown

    console.print(Markdown(viz["content"]))
    if viz.get("sourceUrl"):
        console.print(Text(f"source: {viz['sourceUrl']}", style="dim"))


def _shell_output(viz: Viz, console: Console) -> None:
    console.print(Text.assemble(("$ ", "bold green"), (viz["command"], "bold")), soft_wrap=True)
    stdout, stderr = viz.get("stdout", ""), viz.get("stderr", "")
    if stdout:
        console.print(Text(stdout.rstrip("\n")), soft_wrap=True)
    if stderr:
        console.print(Text(stderr.rstrip("\n"), style="red"), soft_wrap=True)
    exit_code = viz.get("exitCode")
    if exit_code is not None:
        console.print(Text(f"exit code {exit_code}", style="green" if exit_code == 0 else "red"))


def _todo_list(viz: Viz, console: Console) -> None:
    marks = _marks(console)
    for item in viz["items"]:
        status = item["status"]
        parts: list[str | tuple[str, str]] = [
            (marks[status], _STATUS_STYLE[status]),
            " ",
            (item["content"], _STATUS_STYLE[status]),
        ]
        priority = item.get("priority")
        if priority:
            parts += ["  ", (f"({priority})", _PRIORITY_STYLE[priority])]
        console.print(Text.assemble(*parts), soft_wrap=True)


def _none(viz: Viz, console: Console) -> None:
    console.print(Text(str(viz.get("message") or "(nothing to show)"), style="dim"))


_RENDERERS: dict[str, Callable[[Viz, Console], None]] = {
    "diff": _diff,
    "diffs": _diffs,
    "code": _code,
    "file-list": _file_list,
    "table": _table,
    "markdown": _markdown,
    "shell-output": _shell_output,
    "todo-list": _todo_list,
    "none": _none,
}


def _render(viz: Viz, console: Console) -> None:
    if viz.get("collapsed"):
        label = f"{viz['title']}: " if viz.get("title") else ""
        console.print(
            Text(f"{_marks(console)['collapsed']} {label}{summarize(viz)} (collapsed)", style="dim")
        )
        return
    if viz.get("title"):
        console.print(Text(viz["title"], style="bold underline"))
    _RENDERERS[viz["type"]](viz, console)


def render_visualization(viz: Viz, console: Console) -> None:
    """Print a validated visualization (one of the nine types) to ``console``."""
    _render(viz, console)
