"""``toolgate plugins install`` / ``remove``: a plugin packed by npm, its manifest checked before
it is put in ``$TOOLGATE_HOME/plugins``, its npm dependencies installed inside it, and loaded by
the configured gateway."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from js_support import FIXTURES, js_runtime

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = pytest.mark.usefixtures("js_runtime")


def test_install_call_and_remove_a_packaged_plugin(
    run_cli: Any, project: Path, toolgate_home: Path
) -> None:
    (project / "toolgate.yaml").write_text("demo: false\n")
    installed = run_cli("plugins", "install", str(FIXTURES / "packaged"))
    assert installed.returncode == 0, installed.stderr + installed.stdout
    folder = toolgate_home / "plugins" / "acme__durations"
    assert f"Installed plugin @acme/durations 1.0.0 in {folder}" in installed.stdout
    assert (folder / "node_modules" / "ms" / "package.json").is_file()
    listed = json.loads(run_cli("plugins", "--json").stdout)
    assert [p["id"] for p in listed] == ["@acme/durations"]
    called = run_cli("call", "@acme/durations:milliseconds", "--args", '{"duration": "2 days"}')
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout.splitlines()[0]) == {"ms": 172_800_000}
    again = run_cli("plugins", "install", str(FIXTURES / "packaged"))
    assert again.returncode == 1 and "is installed already" in again.stderr
    removed = run_cli("plugins", "remove", "@acme/durations")
    assert removed.returncode == 0, removed.stderr
    assert not folder.exists()
    assert json.loads(run_cli("plugins", "--json").stdout) == []
    missing = run_cli("plugins", "remove", "@acme/durations")
    assert missing.returncode == 1 and "no installed plugin" in missing.stderr


def test_a_plugin_with_an_invalid_manifest_is_not_installed(
    run_cli: Any, toolgate_home: Path
) -> None:
    result = run_cli("plugins", "install", str(FIXTURES / "packaged_broken"))
    assert result.returncode == 1
    assert "the plugin manifest is invalid, so it was not installed" in result.stderr
    assert "/provides/tools/sandbox" in result.stderr and "/provides/tools/entry" in result.stderr
    leftovers = list((toolgate_home / "plugins").iterdir())
    assert leftovers == []
