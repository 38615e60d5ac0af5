"""``import toolgate`` loads no agent framework, and the integrations package itself loads none
either: each framework is imported by its own adapter module only (import-linter also forbids it
in the code; this checks what a running interpreter actually loads)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FRAMEWORKS = {"pydantic_ai", "agents", "langchain", "langchain_core", "langgraph"}


@pytest.mark.slow
def test_import_toolgate_and_its_integrations_package_load_no_framework() -> None:
    code = (
        "import json, sys, toolgate, toolgate.integrations\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(result.stdout))
    assert "toolgate" in loaded
    assert loaded & FRAMEWORKS == set()
    # Nor the HTTP client library, the web framework or the MCP SDK.
    assert loaded & {"httpx2", "httpx", "fastapi", "starlette", "mcp"} == set()


@pytest.mark.slow
def test_toolgate_client_is_imported_on_first_use() -> None:
    code = (
        "import json, sys, toolgate\n"
        "before = 'httpx2' in sys.modules\n"
        "client = toolgate.Client\n"
        "print(json.dumps([before, 'httpx2' in sys.modules, client.__module__]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == [False, True, "toolgate.client.remote"]
