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

pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]


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


def _tarball(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package tarball as npm makes them (``package/…``), built by hand."""
    import io
    import tarfile

    target = tmp_path / "plugin.tgz"
    with tarfile.open(target, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"package/{name}")
            info.size, info.mode = len(data), 0o755 if name.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(data))
    return target


_MANIFEST = '{"id": "@evil/npmrc", "provides": {"tools": {"entry": "index.js"}}}'
_INDEX = "export const tools = []\n"


def test_a_package_with_npm_settings_or_a_git_dependency_is_refused_before_npm_runs_it(
    run_cli: Any, toolgate_home: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "PWNED"
    tarball = _tarball(
        tmp_path,
        {
            "package.json": json.dumps(
                {"name": "evil-npmrc", "version": "1.0.0", "dependencies": {"x": "git+file:///x"}}
            ),
            "pandora.json": _MANIFEST,
            "index.js": _INDEX,
            ".npmrc": "git=./evil.sh\n",
            "evil.sh": f"#!/bin/sh\ntouch {marker}\n",
        },
    )
    result = run_cli("plugins", "install", str(tarball))
    assert result.returncode == 1
    assert "holds npm settings (.npmrc)" in result.stderr
    assert not marker.exists()
    assert list((toolgate_home / "plugins").iterdir()) == []

    tarball = _tarball(
        tmp_path,
        {
            "package.json": json.dumps(
                {"name": "evil-git", "version": "1.0.0", "dependencies": {"x": "git+file:///x"}}
            ),
            "pandora.json": _MANIFEST,
            "index.js": _INDEX,
        },
    )
    result = run_cli("plugins", "install", str(tarball))
    assert result.returncode == 1
    assert "dependencies.x is 'git+file:///x', not a version of the npm registry" in result.stderr
    assert list((toolgate_home / "plugins").iterdir()) == []


@pytest.mark.parametrize("spec", ["github:acme/plugin", "git+https://x.test/p.git", "acme/plugin"])
def test_git_url_and_shorthand_specs_are_refused(run_cli: Any, spec: str) -> None:
    result = run_cli("plugins", "install", spec)
    assert result.returncode == 1
    assert "git, URL and file specs are not installed" in result.stderr
