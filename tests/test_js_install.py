"""``toolgate js install`` and what happens without Node.js: a clear error, the gateway serves."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from js_support import FIXTURES, js_runtime
from toolgate import tool
from toolgate.backends import js_host
from toolgate.backends.js_install import install_folder

pytestmark = pytest.mark.slow

__all__ = ["js_runtime"]  # the fixture, used by name


@pytest.fixture
def own_js_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    """No shared install folder (set before ``run_cli`` copies the environment)."""
    monkeypatch.delenv("TOOLGATE_JS_DIR", raising=False)


def test_js_install_runs_npm_ci_into_toolgate_home(
    own_js_dir: None, run_cli: Any, toolgate_home: Path
) -> None:
    result = run_cli("js", "install")
    assert result.returncode == 0, result.stderr
    folder = install_folder(toolgate_home)
    assert folder.parent == toolgate_home / "js"
    assert str(folder) in result.stdout
    for package in ("ses", "esbuild"):
        assert (folder / "node_modules" / package / "package.json").is_file()
    again = run_cli("js", "install")  # already installed: nothing to do, same answer
    assert again.returncode == 0 and str(folder) in again.stdout


@pytest.fixture
def no_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATH without node or npm (and no runtime found before)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(js_host, "_RUNTIME", None)


def test_js_install_without_node_says_so(no_node: None, run_cli: Any) -> None:
    result = run_cli("js", "install")
    assert result.returncode == 1
    assert "Node.js is not installed" in result.stderr + result.stdout


@pytest.mark.usefixtures("js_runtime", "no_node")
def test_a_js_plugin_without_node_is_a_diagnostic_and_the_gateway_keeps_serving() -> None:
    @tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    with gateway_with(environ=dict(os.environ)) as gateway:
        gateway.add(ping)
        loaded = gateway.add_source(FIXTURES / "search")
        [diagnostic] = loaded.diagnostics
        assert "plugin @pandorakit/search" in diagnostic.message
        assert "Node.js is not installed" in diagnostic.message
        assert gateway.call_sync("test_js_install:ping", {}).content == "pong"
