"""The ``toolgate`` command line, run through its installed console script.

Every test runs a real subprocess in a temporary project folder whose ``toolgate.yaml`` names a
tools file written here; output is not a TTY, so Rich prints plain text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

RunCli = Callable[..., subprocess.CompletedProcess[str]]

TOOLS_PY = '''
from toolgate import ToolError, tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(title="Send a message", effect="external_write")
def send(to: str) -> str:
    """Pretend to send a message."""
    return f"sent to {to}"


@tool(effect="read_only")
def show(visualization: dict) -> dict:
    """Return a small result carrying the given visualization."""
    return {"shown": True, "_visualization": visualization}


@tool(effect="read_only")
def big(size: int) -> str:
    """Return size characters."""
    return "x" * size


@tool
def boom() -> str:
    """Always fail."""
    raise ToolError("the boom tool failed on purpose")
'''

CONFIG = """\
python:
  - ./tools.py
overflow:
  dir: ./spill
"""

PROVIDER_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")


@pytest.fixture
def configured(project: Path) -> Path:
    """A project whose toolgate.yaml names ./tools.py."""
    (project / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (project / "toolgate.yaml").write_text(CONFIG, encoding="utf-8")
    return project


def _ok(result: Any) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    out: str = result.stdout
    return out


# -- help and version ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["tools"],
        ["tools", "list"],
        ["tools", "show"],
        ["tools", "validate"],
        ["tools", "install"],
        ["tools", "remove"],
        ["tools", "new"],
        ["call"],
        ["export"],
        ["demo"],
    ],
    ids=lambda c: " ".join(c) or "toolgate",
)
def test_every_command_has_help_with_exit_codes(run_cli: RunCli, command: list[str]) -> None:
    out = _ok(run_cli(*command, "--help"))
    assert "Usage: toolgate" in out
    assert "Exit codes" in out
    assert "configuration error" in out


def test_version(run_cli: RunCli) -> None:
    assert re.fullmatch(r"toolgate \d+\.\d+\.\d+\S*\n", _ok(run_cli("--version")))


def test_unknown_option_is_a_usage_error(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("call", "tools:add", "--bogus")
    assert result.returncode == 2
    assert "--bogus" in result.stderr


# -- tools list / show -----------------------------------------------------------------------


def test_tools_list_table(run_cli: RunCli, configured: Path) -> None:
    out = _ok(run_cli("tools", "list"))
    header = next(line for line in out.splitlines() if line.startswith("ID"))
    for column in ("Title", "Side effect", "Approval", "Kind", "Source", "Availability"):
        assert column in header
    send = next(line for line in out.splitlines() if line.startswith("tools:send"))
    assert re.search(r"Send a message\s+external_write\s+yes\s+python\s+python\s+available", send)
    add = next(line for line in out.splitlines() if line.startswith("tools:add"))
    assert re.search(r"local_write\s+no\s", add)
    assert "5 tools" in out


def test_tools_list_json(run_cli: RunCli, configured: Path) -> None:
    rows = json.loads(_ok(run_cli("tools", "list", "--json")))
    by_id = {row["id"]: row for row in rows}
    assert sorted(by_id) == ["tools:add", "tools:big", "tools:boom", "tools:send", "tools:show"]
    send = by_id["tools:send"]
    assert send["title"] == "Send a message"
    assert send["side_effect"] == "external_write"
    assert send["requires_approval"] is True
    assert send["available"] is True
    assert send["provider_name"] == "tools__send"
    assert send["source"] == f"{(configured / 'tools.py').resolve()}:send"


def test_tools_list_without_any_config_explains_how_to_create_one(run_cli: RunCli) -> None:
    result = run_cli("tools", "list")
    assert _ok(result).strip() == "No tools are configured."
    assert "No toolgate.yaml found" in result.stderr
    assert "python:" in result.stderr and "toolgate demo" in result.stderr
    assert json.loads(_ok(run_cli("tools", "list", "--json"))) == []


def test_tools_show(run_cli: RunCli, configured: Path) -> None:
    out = _ok(run_cli("tools", "show", "tools:add"))
    assert "Add two integers." in out
    assert re.search(r"Provider name\s+tools__add", out)
    assert re.search(r"Side effect\s+local_write", out)
    assert re.search(r"Approval\s+not required", out)
    assert re.search(r"Timeout\s+60 s", out)
    assert "Input schema" in out
    assert '"description": "The first number."' in out
    assert "tools.py:add" in out


def test_tools_show_accepts_provider_name_and_prints_json(
    run_cli: RunCli, configured: Path
) -> None:
    details = json.loads(_ok(run_cli("tools", "show", "tools__send", "--json")))
    assert details["id"] == "tools:send"
    assert details["input_schema"]["required"] == ["to"]
    assert details["hints"]["readOnlyHint"] is False


def test_tools_show_unknown_tool(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("tools", "show", "tools:ad")
    assert result.returncode == 1
    assert "tool_not_found" in result.stderr
    assert "tools:add" in result.stderr
    assert "Traceback" not in result.stderr


# -- call ------------------------------------------------------------------------------------


def test_call_prints_the_content(run_cli: RunCli, configured: Path) -> None:
    assert _ok(run_cli("call", "tools:add", "--args", '{"a": 2, "b": 40}')) == "42\n"


def test_call_with_bad_arguments_names_the_field(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("call", "tools:add", "--args", '{"a": 1, "b": "two"}')
    assert result.returncode == 1
    assert result.stdout == ""
    assert "error [invalid_arguments]" in result.stderr
    assert '/b: "two" is not of type "integer"' in result.stderr


def test_call_unknown_tool_suggests(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("call", "tools:ad", "--args", '{"a": 1, "b": 2}')
    assert result.returncode == 1
    assert "error [tool_not_found]" in result.stderr
    assert "Did you mean: tools:add" in result.stderr


def test_call_tool_error(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("call", "tools:boom")
    assert result.returncode == 1
    assert "error [tool_error]: the boom tool failed on purpose" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ('{"a": 1,', "--args is not valid JSON"),
        ("[1, 2]", "must be a JSON object of arguments, not an array"),
        ("@missing.json", "cannot read missing.json"),
    ],
)
def test_call_with_unusable_args_is_a_usage_error(
    run_cli: RunCli, configured: Path, args: str, message: str
) -> None:
    result = run_cli("call", "tools:add", "--args", args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_call_args_from_file_and_stdin(run_cli: RunCli, configured: Path) -> None:
    (configured / "args.json").write_text('{"a": 20, "b": 3}', encoding="utf-8")
    assert _ok(run_cli("call", "tools:add", "--args", "@args.json")) == "23\n"
    assert _ok(run_cli("call", "tools:add", "--args", "-", input='{"a": 1, "b": 1}')) == "2\n"


def test_call_json(run_cli: RunCli, configured: Path) -> None:
    viz = {"type": "none", "message": "quiet"}
    data = json.loads(
        _ok(run_cli("call", "tools:show", "--json", "--args", json.dumps({"visualization": viz})))
    )
    assert data["status"] == "ok"
    assert data["tool"] == "tools:show"
    assert data["content"] == {"shown": True}  # _visualization is not for the model
    assert data["visualization"] == viz

    failed = run_cli("call", "tools:add", "--json", "--args", '{"a": "x", "b": 1}')
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["code"] == "invalid_arguments"


# -- visualizations --------------------------------------------------------------------------

_DIFF = {
    "type": "diff",
    "path": "src/index.ts",
    "language": "typescript",
    "hunks": [
        {
            "oldStart": 10,
            "oldLines": 1,
            "newStart": 10,
            "newLines": 2,
            "changes": [
                {"type": "removed", "content": "old line", "oldLineNumber": 10},
                {"type": "added", "content": "new line 1", "newLineNumber": 10},
                {"type": "added", "content": "new line 2", "newLineNumber": 11},
            ],
        }
    ],
    "additions": 2,
    "deletions": 1,
}

VISUALIZATIONS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "diff": (
        _DIFF,
        [
            r"src/index\.ts\s+\+2 -1",
            r"@@ -10,1 \+10,2 @@",
            r"(?m)^10\s+│ - old line$",
            r"(?m)^\s+10 │ \+ new line 1$",
            r"(?m)^\s+11 │ \+ new line 2$",
        ],
    ),
    "diffs": (
        {"type": "diffs", "items": [_DIFF, {**_DIFF, "path": "src/other.ts"}]},
        [r"src/index\.ts\s+\+2 -1", r"src/other\.ts\s+\+2 -1", r"│ - old line"],
    ),
    "code": (
        {
            "type": "code",
            "path": "src/new-file.ts",
            "content": "const x = 1;\nconsole.log(x);\n",
            "language": "typescript",
            "created": True,
            "lineCount": 2,
            "highlightLines": [2],
        },
        [r"src/new-file\.ts \(new file\)", r"1 const x = 1;", r"2 console\.log\(x\);"],
    ),
    "file-list": (
        {
            "type": "file-list",
            "total": 3,
            "groups": [
                {
                    "label": "Modified",
                    "icon": "edit",
                    "files": [
                        {"path": "src/index.ts", "action": "modified"},
                        {"path": "src/utils.ts", "action": "modified", "line": 42},
                    ],
                },
                {
                    "label": "Created",
                    "icon": "plus",
                    "files": [{"path": "src/new.ts", "action": "created"}],
                },
            ],
        },
        [
            r"Modified \(2\)",
            r"modified\s+src/utils\.ts:42",
            r"Created \(1\)",
            r"created\s+src/new\.ts",
            r"3 in total",
        ],
    ),
    "table": (
        {
            "type": "table",
            "columns": [
                {"key": "name", "label": "Name"},
                {"key": "status", "label": "Status", "width": "100px"},
            ],
            "rows": [
                {"name": "server", "status": "running"},
                {"name": "database", "status": "stopped"},
            ],
            "totalRows": 5,
        },
        [r"Name\s+Status", r"server\s+running", r"database\s+stopped", r"2 of 5 rows shown"],
    ),
    "markdown": (
        {
            "type": "markdown",
            "content": "# Big Title\n\nParagraph with **bold** text.",
            "sourceUrl": "https://example.com/doc",
        },
        [r"Big Title", r"Paragraph with bold text\.", r"source: https://example\.com/doc"],
    ),
    "shell-output": (
        {
            "type": "shell-output",
            "command": "npm test",
            "stdout": "Tests: 42 passed\n",
            "stderr": "warn: slow\n",
            "exitCode": 3,
        },
        [r"(?m)^\$ npm test$", r"(?m)^Tests: 42 passed$", r"(?m)^warn: slow$", r"exit code 3"],
    ),
    "todo-list": (
        {
            "type": "todo-list",
            "items": [
                {"content": "Set up database", "status": "completed", "priority": "high"},
                {"content": "Write API endpoint", "status": "in_progress", "priority": "medium"},
                {"content": "Add tests", "status": "pending", "priority": "low"},
                {"content": "Old idea", "status": "cancelled"},
            ],
        },
        [
            r"✓ Set up database\s+\(high\)",
            r"… Write API endpoint\s+\(medium\)",
            r"☐ Add tests\s+\(low\)",
            r"✗ Old idea",
        ],
    ),
    "none": (
        {"type": "none", "message": "Operation completed silently"},
        [r"Operation completed silently"],
    ),
}


@pytest.mark.parametrize("kind", list(VISUALIZATIONS))
def test_every_visualization_type_is_rendered(run_cli: RunCli, configured: Path, kind: str) -> None:
    viz, patterns = VISUALIZATIONS[kind]
    out = _ok(run_cli("call", "tools:show", "--args", json.dumps({"visualization": viz})))
    first, _, rendered = out.partition("\n")
    assert first == '{"shown": true}'  # the model's content comes first, without the visual
    for pattern in patterns:
        assert re.search(pattern, rendered), f"{pattern!r} not in:\n{rendered}"
    assert "**" not in rendered and '"type"' not in rendered


def test_visualization_title_and_collapsed(run_cli: RunCli, configured: Path) -> None:
    table, _ = VISUALIZATIONS["table"]
    titled = _ok(
        run_cli(
            "call",
            "tools:show",
            "--args",
            json.dumps({"visualization": {**table, "title": "Services"}}),
        )
    )
    assert re.search(r"(?m)^Services$", titled)
    collapsed = _ok(
        run_cli(
            "call",
            "tools:show",
            "--args",
            json.dumps({"visualization": {**table, "title": "Services", "collapsed": True}}),
        )
    )
    assert collapsed.splitlines()[1:] == ["", "▸ Services: table: 2 rows of 5 (collapsed)"]


def test_piped_output_is_plain_text(run_cli: RunCli, configured: Path) -> None:
    out = _ok(run_cli("call", "tools:show", "--args", json.dumps({"visualization": _DIFF})))
    assert "new line 1" in out
    assert "\x1b[" not in out


def test_terminal_output_is_coloured(configured: Path, toolgate_home: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM")}
    env.update(TERM="xterm-256color", TOOLGATE_HOME=str(toolgate_home))
    args = json.dumps({"visualization": _DIFF})
    child = pexpect.spawn(
        str(Path(sys.executable).parent / "toolgate"),
        ["call", "tools:show", "--args", args],
        cwd=str(configured),
        env=env,
        encoding="utf-8",
        dimensions=(40, 120),
    )
    child.expect(pexpect.EOF, timeout=60)
    out = child.before
    child.close()
    assert child.exitstatus == 0, out
    assert "new line 1" in out
    assert "\x1b[" in out  # Rich colours the diff on a terminal


def test_overflow_says_where_the_full_output_went(run_cli: RunCli, configured: Path) -> None:
    out = _ok(run_cli("call", "tools:big", "--session", "s1", "--args", '{"size": 60000}'))
    match = re.search(r"Full output: (\S+)", out)
    assert match, out[-500:]
    spilled = Path(match.group(1))
    assert spilled.parent == configured / "spill" / "s1"
    assert spilled.read_text(encoding="utf-8") == "x" * 60_000
    assert out.count("x") < 11_000  # the preview, not the whole output

    at_limit = _ok(run_cli("call", "tools:big", "--args", '{"size": 50000}'))
    assert at_limit == "x" * 50_000 + "\n"


# -- export ----------------------------------------------------------------------------------


def _names(definitions: list[dict[str, Any]]) -> list[str]:
    return [d["function"]["name"] if "function" in d else d["name"] for d in definitions]


@pytest.mark.parametrize("fmt", ["openai", "openai-responses", "anthropic", "gemini", "mcp"])
def test_export_each_format(run_cli: RunCli, configured: Path, fmt: str) -> None:
    definitions = json.loads(_ok(run_cli("export", "--format", fmt)))
    names = _names(definitions)
    assert sorted(names) == [
        "tools__add",
        "tools__big",
        "tools__boom",
        "tools__send",
        "tools__show",
    ]
    assert all(PROVIDER_NAME.match(name) for name in names)
    assert all("Add two integers." in json.dumps(d) for d in definitions if "add" in _names([d])[0])


def test_export_to_a_file_and_one_tool(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("export", "-f", "anthropic", "--tool", "tools:add", "--output", "out.json")
    assert _ok(result) == ""
    assert "Wrote 1 anthropic tool definition to out.json" in result.stderr
    definitions = json.loads((configured / "out.json").read_text(encoding="utf-8"))
    assert _names(definitions) == ["tools__add"]
    assert definitions[0]["input_schema"]["required"] == ["a", "b"]


def test_export_unknown_format_is_a_usage_error(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("export", "--format", "cohere")
    assert result.returncode == 2
    assert "--format must be one of openai, openai-responses, anthropic, gemini, mcp" in (
        result.stderr
    )


# -- configuration errors --------------------------------------------------------------------


def test_malformed_config_names_the_file_and_field(run_cli: RunCli, project: Path) -> None:
    (project / "toolgate.yaml").write_text(
        "python:\n  - module: x\n    namspace: y\n", encoding="utf-8"
    )
    result = run_cli("tools", "list")
    assert result.returncode == 3
    assert "toolgate.yaml: python[0].namspace: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_yaml_is_a_configuration_error(run_cli: RunCli, project: Path) -> None:
    (project / "toolgate.yaml").write_text("python: [unclosed\n", encoding="utf-8")
    result = run_cli("call", "tools:add")
    assert result.returncode == 3
    assert "toolgate.yaml: invalid YAML at line" in result.stderr


def test_import_failure_is_a_configuration_error(run_cli: RunCli, project: Path) -> None:
    (project / "toolgate.yaml").write_text("python:\n  - nope.mod:thing\n", encoding="utf-8")
    result = run_cli("tools", "list")
    assert result.returncode == 3
    assert (
        "configuration error: toolgate.yaml: python[0]: cannot import 'nope.mod': "
        "No module named 'nope'" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_config_option_and_toolgate_home(
    run_cli: RunCli, project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    (toolgate_home / "toolgate.yaml").write_text("demo: true\n", encoding="utf-8")
    assert "demo:add" in _ok(run_cli("tools", "list"))

    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (other / "custom.yaml").write_text("python: [./tools.py]\n", encoding="utf-8")
    out = _ok(run_cli("--config", str(other / "custom.yaml"), "tools", "list"))
    assert "tools:add" in out and "demo:add" not in out

    missing = run_cli("--config", "nowhere.yaml", "tools", "list")
    assert missing.returncode == 3
    assert "nowhere.yaml: configuration file not found" in missing.stderr


# -- demo ------------------------------------------------------------------------------------


def test_demo_tour(run_cli: RunCli) -> None:
    out = _ok(run_cli("demo"))
    lines = out.splitlines()
    assert len(lines) < 170
    for expected in (
        "demo:list_files",  # the catalog
        "model sees: 5",  # a call
        "│ + b = 3",  # diff
        "Planets",  # table
        "✓ Write the tools",  # to-do list
        "$ echo 'hello from a pretend shell'",  # shell output
        "Counted 4 words in greeting-v2.txt.",  # none (the word_count tool folder)
        "Full output: ",  # overflow
        "Error [invalid_arguments]",  # what the model reads on a bad call
        "demo:word_count ",  # the demo tool folders are in the catalog
        '"words": 4, "lines": 2',  # a script tool (demo:word_count)
        "│ + brave new world",  # a script tool's diff (demo:file_diff)
        '"name": "demo__add"',  # the OpenAI export
    ):
        assert expected in out, expected


def test_demo_tools_through_config(run_cli: RunCli, project: Path) -> None:
    (project / "toolgate.yaml").write_text("demo: true\n", encoding="utf-8")
    (project / "notes.txt").write_text("hi", encoding="utf-8")
    out = _ok(run_cli("call", "demo:list_files"))
    assert re.search(r"file\s+notes\.txt", out)
    escaped = run_cli("call", "demo:list_files", "--args", '{"folder": ".."}')
    assert escaped.returncode == 1
    assert "outside the workspace" in escaped.stderr
