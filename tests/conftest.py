"""Shared fixtures: a temporary project folder and ``TOOLGATE_HOME``, and the real CLI; and the
lock that keeps a test marked ``exclusive`` alone while the suite runs on several workers."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

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


# -- the workers' terminal size -----------------------------------------------------------------
#
# A pytest-xdist worker starts with COLUMNS=80 and LINES=24 in its environment even when the
# command that started the run had neither, and Rich reads COLUMNS before its piped default
# width: CLI output and the banners of servers the tests start would wrap at 80 columns in a
# parallel run only. Each worker gets the two variables exactly as the command had them.

_TERMINAL_SIZE = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the command's process: pass its terminal size on to ``node``."""
    node.workerinput["terminal_size"] = {name: os.environ.get(name) for name in _TERMINAL_SIZE}


def pytest_configure(config: pytest.Config) -> None:
    """In a worker, set the terminal-size variables to the command's."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return
    for name, value in workerinput["terminal_size"].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# -- how many workers --------------------------------------------------------------------------


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): one worker per CPU for a folder (the whole suite), none
    when the command line names only test files or tests, whose run would be shorter than the
    few seconds each worker takes to start and collect."""
    named = [arg.partition("::")[0] for arg in config.args]
    if named and all(Path(arg).is_file() for arg in named):
        return 0
    return len(os.sched_getaffinity(0))


# -- tests that need the machine to themselves, in a parallel run ------------------------------
#
# The suite runs on several pytest-xdist workers (``-n`` in pyproject's addopts). A test marked
# ``exclusive`` stops and starts a service every other worker's tests may be using (the local
# PostgreSQL or Redis), so it must never overlap with another test. Each worker holds a shared
# lock on a file of this run while it runs a test, and an exclusive test takes it exclusively: a
# readers-writer lock between processes. A second file is the turnstile that gives the writer
# priority: an exclusive test waiting for the others keeps new tests from starting meanwhile, so
# a busy worker cannot starve it. Module-scoped fixtures of other modules stay up while an
# exclusive test runs; they hold only database URLs, each test opens its own connections.


def _run_lock_folder(config: pytest.Config) -> Path | None:
    """The folder shared by every worker of this run, or ``None`` outside a parallel run.

    pytest-xdist gives each worker ``<run's basetemp>/popen-gwN`` as its basetemp.
    """
    if "PYTEST_XDIST_WORKER" not in os.environ or not config.option.basetemp:
        return None
    return Path(config.option.basetemp).parent


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Run ``item`` under the run's shared lock, or alone if it is marked ``exclusive``."""
    folder = _run_lock_folder(item.config)
    if folder is None:
        return (yield)
    exclusive = item.get_closest_marker("exclusive") is not None
    with (
        (folder / "exclusive-turnstile.lock").open("a") as turnstile,
        (folder / "exclusive-tests.lock").open("a") as tests,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(tests, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            return (yield)
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            if exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
