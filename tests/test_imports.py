"""``import toolgate`` stays light, and the layering of docs/concepts/architecture.md holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# Third-party packages that belong to surfaces or stores, never to the core import.
HEAVY = {
    "fastapi",
    "starlette",
    "uvicorn",
    "mcp",
    "fastmcp",
    "httpx",
    "sqlite3",
    "_sqlite3",
    "sqlalchemy",
    "psycopg",
    "psycopg2",
    "redis",
    "asyncpg",
    "jinja2",
    "typer",
    "openai",
    "anthropic",
    "google",
    # OAuth (the oauth extra), loaded only when auth: is configured.
    "jwt",
    "cryptography",
    "joserfc",
    "httpx2",
    # Telemetry: OpenTelemetry only when the OTEL_* variables turn it on, prometheus_client only
    # for toolgate serve's /metrics route.
    "opentelemetry",
    "prometheus_client",
    # Tool search loads its ranking libraries on the first search, not on import.
    "bm25s",
    "numpy",
    "onnxruntime",
    "tokenizers",
    "torch",
    "sentence_transformers",
}


def test_import_toolgate_does_not_import_frameworks_sdks_or_database_drivers() -> None:
    code = (
        "import json, sys, toolgate\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(result.stdout))
    assert "toolgate" in loaded  # the check itself works
    assert loaded & HEAVY == set()


def test_layers_follow_the_architecture() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    if not lint.exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run([str(lint), "--no-cache"], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
