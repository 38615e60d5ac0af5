"""Result shaping: visualizations for people, overflow to a file, bookkeeping never to the model."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from toolgate import Gateway, tool
from toolgate.model import VISUALIZATION_TYPES, InvalidVisualization, validate_visualization

DIFF = {
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

# The seed's own example for each of the nine types (Jean2, "9 visualization types").
VALID: dict[str, dict[str, Any]] = {
    "diff": DIFF,
    "diffs": {"type": "diffs", "items": [DIFF, DIFF]},
    "code": {
        "type": "code",
        "path": "src/new-file.ts",
        "content": "// full file content here...",
        "language": "typescript",
        "created": True,
        "lineCount": 42,
        "highlightLines": [10, 11, 12],
    },
    "file-list": {
        "type": "file-list",
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
        "total": 3,
    },
    "table": {
        "type": "table",
        "columns": [
            {"key": "name", "label": "Name"},
            {"key": "status", "label": "Status", "width": "100px"},
        ],
        "rows": [
            {"name": "server", "status": "running"},
            {"name": "database", "status": "stopped"},
        ],
        "totalRows": 2,
    },
    "markdown": {
        "type": "markdown",
        "content": "# Title\n\nParagraph with **bold** text.",
        "sourceUrl": "https://example.com",
    },
    "shell-output": {
        "type": "shell-output",
        "command": "npm test",
        "stdout": "Tests: 42 passed\n",
        "stderr": "",
        "exitCode": 0,
    },
    "todo-list": {
        "type": "todo-list",
        "items": [
            {"content": "Set up database", "status": "completed", "priority": "high"},
            {"content": "Write API endpoint", "status": "in_progress", "priority": "medium"},
            {"content": "Add tests", "status": "pending", "priority": "low"},
        ],
    },
    "none": {"type": "none", "message": "Operation completed silently"},
}

INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "diff": ({**DIFF, "hunks": [{"oldStart": 1}]}, "hunks.0.oldLines"),
    "diffs": ({"type": "diffs", "items": [{"type": "diff", "path": "x"}]}, "items.0.hunks"),
    "code": ({"type": "code", "lineCount": -1, "content": "x"}, "lineCount"),
    "file-list": ({"type": "file-list", "groups": [{"files": []}]}, "groups.0.label"),
    "table": ({"type": "table", "columns": [{"key": "a"}], "rows": []}, "columns.0.label"),
    "markdown": ({"type": "markdown"}, "content"),
    "shell-output": ({"type": "shell-output", "stdout": "x", "exitCode": "zero"}, "command"),
    "todo-list": ({"type": "todo-list", "items": [{"content": "x", "status": "done"}]}, "status"),
    "none": ({"type": "none", "message": 5}, "message"),
}


def test_every_type_has_a_valid_and_an_invalid_case() -> None:
    assert set(VALID) == set(INVALID) == set(VISUALIZATION_TYPES)
    assert len(VISUALIZATION_TYPES) == 9


@pytest.mark.parametrize("kind", VISUALIZATION_TYPES)
def test_valid_visualizations_round_trip(kind: str) -> None:
    value = {**VALID[kind], "title": "Shown to people", "collapsed": True}
    assert validate_visualization(value) == value


@pytest.mark.parametrize("kind", VISUALIZATION_TYPES)
def test_invalid_visualizations_name_the_field(kind: str) -> None:
    value, field = INVALID[kind]
    with pytest.raises(InvalidVisualization, match=field.replace(".", r"\.")):
        validate_visualization(value)


@pytest.mark.parametrize("value", [{"type": "chart"}, {"no": "type"}, ["diff"], "diff"])
def test_unknown_or_malformed_visualizations(value: Any) -> None:
    with pytest.raises(InvalidVisualization):
        validate_visualization(value)


def test_title_and_collapsed_are_type_checked() -> None:
    with pytest.raises(InvalidVisualization, match="collapsed"):
        validate_visualization({"type": "none", "collapsed": "yes please"})


@pytest.mark.parametrize("kind", VISUALIZATION_TYPES)
def test_the_pipeline_keeps_the_visualization_for_people_and_strips_it_for_the_model(
    kind: str,
) -> None:
    @tool(namespace="v")
    def show() -> dict[str, Any]:
        """Show."""
        return {"content": "summary for the model", "_visualization": VALID[kind]}

    with Gateway() as gateway:
        gateway.add(show)
        outcome = gateway.call_sync("v:show")
    assert outcome.ok
    assert outcome.content == {"content": "summary for the model"}
    assert "_visualization" not in outcome.text
    assert outcome.visualization == VALID[kind]


def test_an_invalid_visualization_is_dropped_but_the_call_succeeds() -> None:
    @tool(namespace="v")
    def show() -> dict[str, Any]:
        """Show."""
        return {"result": 1, "_visualization": {"type": "diff"}}

    with Gateway() as gateway:
        gateway.add(show)
        outcome = gateway.call_sync("v:show")
    assert outcome.ok and outcome.content == {"result": 1}
    assert outcome.visualization is None
    assert outcome.detail is not None and "visualization dropped" in outcome.detail


def test_bookkeeping_fields_never_reach_the_model() -> None:
    @tool(namespace="v")
    def sneaky() -> dict[str, Any]:
        """Sneaky."""
        return {"ok": True, "_persisted": True, "_filePath": "/etc/passwd", "_originalSize": 9}

    with Gateway() as gateway:
        gateway.add(sneaky)
        outcome = gateway.call_sync("v:sneaky")
    assert outcome.content == {"ok": True}
    assert outcome.overflow is None


# -- overflow --------------------------------------------------------------------------------------


@tool(namespace="big")
def text_of(size: int) -> str:
    """Return ``size`` characters."""
    return "".join(chr(ord("a") + i % 26) for i in range(size))


def call_big(tmp_path: Path, size: int, **options: Any) -> Any:
    with gateway_with(spill_dir=tmp_path, **options) as gateway:
        gateway.add(text_of)
        return gateway.call_sync("big:text_of", {"size": size}, session_id="sess-1")


def test_exactly_the_limit_is_returned_whole(tmp_path: Path) -> None:
    outcome = call_big(tmp_path, 50_000)
    assert outcome.overflow is None
    assert len(outcome.content) == 50_000
    assert not any(tmp_path.rglob("*.txt"))


def test_one_over_the_limit_is_spilled_with_a_10k_preview_and_a_note(tmp_path: Path) -> None:
    outcome = call_big(tmp_path, 50_001)
    full = text_of(50_001)
    assert outcome.ok and outcome.overflow is not None
    assert outcome.overflow.original_size == 50_001
    path = Path(outcome.overflow.path)
    assert path.parent == tmp_path / "sess-1"
    assert path.read_text() == full
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    preview, _, note = outcome.content.partition("\n\n[Output truncated")
    assert preview == full[:10_000]
    assert str(path) in note and "50,001" in note
    assert "_persisted" not in outcome.text and "_originalSize" not in outcome.text


def test_structured_results_are_measured_as_the_json_the_model_reads(tmp_path: Path) -> None:
    @tool(namespace="big")
    def rows(n: int) -> dict[str, Any]:
        """Rows."""
        return {"rows": ["x" * 98] * n}

    with gateway_with(spill_dir=tmp_path) as gateway:
        gateway.add(rows)
        small = gateway.call_sync("big:rows", {"n": 400})
        large = gateway.call_sync("big:rows", {"n": 600})
    assert small.overflow is None and isinstance(small.content, dict)
    assert large.overflow is not None
    assert json.loads(Path(large.overflow.path).read_text()) == {"rows": ["x" * 98] * 600}


def test_limits_are_configurable(tmp_path: Path) -> None:
    outcome = call_big(tmp_path, 101, overflow_limit=100, preview_chars=7)
    assert outcome.overflow is not None
    assert outcome.content.startswith(text_of(7) + "\n\n[Output truncated")
    assert call_big(tmp_path, 100, overflow_limit=100, preview_chars=7).overflow is None
    with pytest.raises(ValueError, match="preview"):
        gateway_with(overflow_limit=10, preview_chars=11)


@pytest.mark.parametrize("session", ["../../etc", "a/b", "..", "x" * 200, "spaces here"])
def test_hostile_session_ids_cannot_steer_the_spill_path(tmp_path: Path, session: str) -> None:
    root = tmp_path / "spill"
    with gateway_with(spill_dir=root) as gateway:
        gateway.add(text_of)
        outcome = gateway.call_sync("big:text_of", {"size": 50_001}, session_id=session)
    assert outcome.overflow is not None
    path = Path(outcome.overflow.path).resolve()
    assert path.parent.parent == root.resolve()
    assert path.parent.name.startswith("s-")


def test_spill_folder_is_private(tmp_path: Path) -> None:
    outcome = call_big(tmp_path / "root", 50_001)
    folder = Path(outcome.overflow.path).parent
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
