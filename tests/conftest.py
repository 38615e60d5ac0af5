"""Shared fixtures: a temporary project folder and ``TOOLGATE_HOME``, and the real CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

#: The installed console script, next to the interpreter running the tests.
TOOLGATE = Path(sys.executable).parent / "toolgate"

RunCli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def toolgate_home(tmp_path: Path) -> Path:
    """An empty ``TOOLGATE_HOME`` folder."""
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """An empty folder to run commands in (the current folder of the CLI)."""
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


@pytest.fixture
def run_cli(project: Path, toolgate_home: Path) -> RunCli:
    """Run ``toolgate ARGS...`` through its console script in ``project``, output not a TTY."""
    env = {
        **os.environ,
        "TOOLGATE_HOME": str(toolgate_home),
        "PYTHONIOENCODING": "utf-8",
    }
    # Plain output must come from stdout not being a terminal, not from these.
    for name in (
        "COLUMNS",
        "LINES",
        "NO_COLOR",
        "FORCE_COLOR",
        "TTY_COMPATIBLE",
        "TTY_INTERACTIVE",
    ):
        env.pop(name, None)

    def run(
        *args: str, input: str | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TOOLGATE), *args],
            cwd=cwd or project,
            env=env,
            input=input,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=60,
        )

    return run
