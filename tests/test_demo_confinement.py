"""The demo's file tools read project files only (issue 23): any MCP client of an unconfigured
``toolgate mcp`` or ``toolgate serve`` may call them, without approval, so they must not read
what lies outside the workspace, hidden files (``.env``, ``.ssh``), or a whole-system workspace.
The scripts are run as toolgate runs them: one JSON object on stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import toolgate.demo

FOLDERS = Path(toolgate.demo.__file__).parent / "tool_folders"


def _run(script: str, workspace: Path | str, **arguments: Any) -> dict[str, Any]:
    request = {**arguments, "workspacePath": str(workspace), "sessionId": "s"}
    ran = subprocess.run(
        [sys.executable, str(FOLDERS / script.split(".")[0] / script)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    answer: dict[str, Any] = json.loads(ran.stdout)
    return answer


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    (folder / ".ssh").mkdir(parents=True)
    (folder / ".ssh" / "id_rsa").write_text("SECRET KEY\n")
    (folder / ".env").write_text("TOKEN=hunter2\n")
    (folder / "notes.txt").write_text("one two\n")
    (tmp_path / "outside.txt").write_text("not yours\n")
    (folder / "link.txt").symlink_to(tmp_path / "outside.txt")
    return folder


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("../outside.txt", "outside the workspace"),
        ("/etc/hostname", "outside the workspace"),
        ("link.txt", "outside the workspace"),  # a link out is followed, then refused
        (".env", "hidden"),
        (".ssh/id_rsa", "hidden"),
    ],
)
def test_word_count_and_file_diff_refuse_what_is_not_a_project_file(
    project: Path, path: str, refusal: str
) -> None:
    counted = _run("word_count.py", project, path=path)
    assert refusal in counted["error"] and "words" not in counted
    diffed = _run("file_diff.py", project, oldPath="notes.txt", newPath=path)
    assert refusal in diffed["error"] and "hunter2" not in json.dumps(diffed)


def test_a_named_pipe_is_refused_instead_of_blocking_the_tool(project: Path) -> None:
    import os

    os.mkfifo(project / "pipe.txt")
    assert "not a regular file" in _run("word_count.py", project, path="pipe.txt")["error"]
    diffed = _run("file_diff.py", project, oldPath="notes.txt", newPath="pipe.txt")
    assert "not a regular file" in diffed["error"]


def test_a_whole_system_workspace_is_refused(project: Path) -> None:
    for answer in (
        _run("word_count.py", "/", path="etc/hostname"),
        _run("file_diff.py", "/", oldPath="etc/hostname", newPath="etc/hostname"),
    ):
        assert "whole file system" in answer["error"]


def test_project_files_are_still_read(project: Path) -> None:
    assert _run("word_count.py", project, path="notes.txt")["words"] == 2
    assert _run("word_count.py", project, path=str(project / "notes.txt"))["words"] == 2
