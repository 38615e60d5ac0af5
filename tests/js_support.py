"""What the JavaScript plugin tests share: the host's pinned npm dependencies, installed once.

The tests need Node.js and npm (CI installs both). They are installed into a folder shared by
every test of the run (``TOOLGATE_JS_DIR``), so each test's own ``TOOLGATE_HOME`` stays empty.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from toolgate.backends.js_install import install

FIXTURES = Path(__file__).parent / "fixtures" / "js_plugins"


@pytest.fixture(scope="session")
def js_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed dependencies' folder (``npm ci`` once per test run)."""
    shared = os.environ.get("TOOLGATE_JS_DIR") or str(
        Path.home() / ".cache" / "toolgate-tests" / "js"
    )
    os.environ["TOOLGATE_JS_DIR"] = shared
    return install()


def plugin_copy(tmp_path: Path, name: str, **tools_entry: Any) -> Path:
    """A copy of the fixture plugin ``name`` whose manifest's tools entry is updated with
    ``tools_entry`` (``permissions=…``, ``sandbox=…``)."""
    folder = tmp_path / name
    shutil.copytree(FIXTURES / name, folder)
    manifest = folder / "pandora.json"
    document = json.loads(manifest.read_text())
    document["provides"]["tools"].update(tools_entry)
    manifest.write_text(json.dumps(document))
    return folder
