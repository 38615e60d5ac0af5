"""``toolgate demo``: a short guided tour on the bundled demo tools. Needs no configuration."""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from ..formats.tool_folder.source import FolderRoot
from ..gateway import Gateway
from ..model import CallOutcome
from .catalog import print_tool_table
from .outcome import overflow_note
from .render import render_visualization

__all__ = ["run_tour"]

#: Model-facing text longer than this is shortened in the tour (``toolgate call`` prints it all).
_SHOWN_CHARS = 110

# (tool, arguments) for each visualization type, in the order the tool folder format lists them,
# but the last, none: the word_count tool folder returns that one, in part 6.
_VISUAL_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    (
        "demo:diff_text",
        {
            "old": "a = 1\nb = 2\nprint(a)\n",
            "new": "a = 1\nb = 3\nprint(a + b)\n",
            "path": "calc.py",
        },
    ),
    (
        "demo:diff_texts",
        {
            "edits": [
                {
                    "path": "README.md",
                    "old": "# Tools\n",
                    "new": "# Tools\n\nNow with a gateway.\n",
                },
                {"path": "VERSION", "old": "0.1\n", "new": "0.2\n"},
            ]
        },
    ),
    (
        "demo:show_code",
        {
            "code": "def greet(name):\n    return f'hello {name}'\n",
            "path": "greet.py",
            "highlight_lines": [2],
        },
    ),
    ("demo:list_files", {"folder": "."}),
    ("demo:table", {"sort_by": "moons", "limit": 4}),
    ("demo:render_markdown", {"text": "## Release notes\n\n- **faster** calls\n- fewer bugs\n"}),
    (
        "demo:shell_echo",
        {"text": "hello from a pretend shell", "stderr": "warning: nothing ran", "exit_code": 0},
    ),
    (
        "demo:todo",
        {
            "title": "Ship the gateway",
            "items": [
                {"content": "Write the tools", "status": "completed", "priority": "high"},
                {"content": "Try the CLI", "status": "in_progress", "priority": "medium"},
                {"content": "Serve over MCP", "status": "pending", "priority": "low"},
            ],
        },
    ),
)

# Script tools: the bundled demo tool folders, run as child processes.
_SCRIPT_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("demo:word_count", {"path": "greeting-v2.txt"}),
    ("demo:file_diff", {"oldPath": "greeting-v1.txt", "newPath": "greeting-v2.txt"}),
)

_ERROR_CALLS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("demo:add", {"a": "two", "b": 3}),
    ("demo:fail", {}),
    ("demo:ad", {"a": 1, "b": 2}),
)


def _command(tool_id: str, arguments: dict[str, Any]) -> str:
    return f"$ toolgate call {tool_id} --args {shlex.quote(json.dumps(arguments))}"


def _short(text: str) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"


def _heading(console: Console, text: str) -> None:
    console.print()
    console.print(Text(text, style="bold cyan"))


def _call(
    gateway: Gateway, console: Console, tool_id: str, args: dict[str, Any], workspace: Path
) -> CallOutcome:
    console.print(Text(_short(_command(tool_id, args)), style="dim"), soft_wrap=True)
    return gateway.call_sync(tool_id, args, session_id="demo-tour", workspace=workspace)


def _sample_workspace(root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    (root / "notes.md").write_text("# Notes\n", encoding="utf-8")
    (root / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")


def _compact_json(value: Any, indent: int = 0, width: int = 90) -> str:
    """JSON with every object or array that fits in ``width`` columns kept on one line."""
    flat = json.dumps(value, ensure_ascii=False)
    if len(flat) + indent <= width or not isinstance(value, (dict, list)) or not value:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [
            f"{pad}{json.dumps(key)}: {_compact_json(item, indent + 2, width).lstrip()}"
            for key, item in value.items()
        ]
        opening, closing = "{", "}"
    else:
        items = [pad + _compact_json(item, indent + 2, width) for item in value]
        opening, closing = "[", "]"
    return opening + "\n" + ",\n".join(items) + "\n" + " " * indent + closing


def _export(console: Console, gateway: Gateway) -> None:
    try:
        from ..exporters import export_tools
    except ImportError:
        console.print(Text("(the exporters are not installed in this build)", style="dim"))
        return
    definitions = export_tools([gateway.get_tool("demo:add")], "openai")
    console.print(Text(_compact_json(definitions)), soft_wrap=True)


def run_tour(console: Console) -> None:
    """Print the tour: catalog, a call, every visualization, overflow, errors, script tools and
    an export."""
    from ..demo import TOOL_FOLDERS, tools

    console.print(Text("toolgate demo: a tour of the gateway on its bundled demo tools", "bold"))
    console.print("Every call below goes through the same pipeline as any configured tool.")
    demo_folders = [FolderRoot(TOOL_FOLDERS, "demo")]
    with (
        Gateway(tool_folders=demo_folders) as gateway,
        tempfile.TemporaryDirectory(prefix="toolgate-demo-") as tmp,
    ):
        workspace = Path(tmp)
        _sample_workspace(workspace)
        gateway.add(tools)

        _heading(console, "1. The catalog  ($ toolgate tools list)")
        print_tool_table(gateway.entries(), console)

        _heading(console, "2. A call: the model gets the content")
        outcome = _call(gateway, console, "demo:add", {"a": 2, "b": 3}, workspace)
        console.print(Text.assemble(("model sees: ", "bold"), outcome.text), soft_wrap=True)

        _heading(console, "3. Visualizations: for people, stripped from what the model sees")
        for tool_id, args in _VISUAL_CALLS:
            console.print()
            outcome = _call(gateway, console, tool_id, args, workspace)
            console.print(
                Text.assemble(("model sees: ", "bold"), _short(outcome.text)), soft_wrap=True
            )
            if outcome.visualization is not None:
                render_visualization(outcome.visualization, console)

        _heading(console, "4. Overflow: results over 50,000 characters go to a file")
        outcome = _call(gateway, console, "demo:big_output", {"size": 60_000}, workspace)
        console.print(
            Text.assemble(
                ("model sees: ", "bold"),
                f"{len(outcome.text):,} characters: the first 10,000 and this note:",
            )
        )
        console.print(Text(outcome.text.rsplit("\n\n", 1)[-1]), soft_wrap=True)
        console.print(Text(overflow_note(outcome) or "", style="yellow"), soft_wrap=True)

        _heading(console, "5. Errors: a call never crashes, the model reads what to fix")
        for tool_id, args in _ERROR_CALLS:
            outcome = _call(gateway, console, tool_id, args, workspace)
            console.print(Text.assemble(("model sees: ", "bold"), outcome.text), soft_wrap=True)

        _heading(console, "6. Script tools: a folder with tool.md and a script, any runtime")
        console.print(
            "These run as child processes: JSON arguments on stdin, a JSON result on stdout. "
            "Start your own with 'toolgate tools new NAME --runtime python|node|bash|…'.",
            soft_wrap=True,
        )
        (workspace / "greeting-v1.txt").write_text("Hello\nworld\n", encoding="utf-8")
        (workspace / "greeting-v2.txt").write_text("Hello\nbrave new world\n", encoding="utf-8")
        for tool_id, args in _SCRIPT_CALLS:
            outcome = _call(gateway, console, tool_id, args, workspace)
            console.print(
                Text.assemble(("model sees: ", "bold"), _short(outcome.text)), soft_wrap=True
            )
            if outcome.visualization is not None:
                render_visualization(outcome.visualization, console)

        _heading(console, "7. Export for a provider  ($ toolgate export --format openai)")
        _export(console, gateway)

    _heading(console, "Next")
    console.print(
        "Put your own @tool functions in a file, name it in ./toolgate.yaml "
        "(python: [./my_tools.py]), or create a tool folder with 'toolgate tools new NAME', "
        "then try 'toolgate tools list', 'toolgate call' and 'toolgate export'. Add "
        "'demo: true' to keep these demo tools."
    )
