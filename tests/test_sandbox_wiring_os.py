"""Joch ``os`` tools in a compartment, declared in a resource file loaded through toolgate.yaml.

Calls go through the installed ``toolgate`` console script: an ``os`` tool runs under bubblewrap
by default (no host-mode opt-in needed any more), with its ``spec.permissions``; ``sandbox:
host`` still needs the operator's ``host_mode``; a host that cannot sandbox makes it unavailable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import RunCli
from folder_tools import require_program
from toolgate.formats.resource.parse import load_resources
from toolgate.model import SandboxMode
from toolgate.sandbox.host import probe_host

pytestmark = pytest.mark.slow

#: Reads a file and one environment variable (no "error" key: that would be a tool error).
PEEK = """\
import json, os, sys
data = json.load(sys.stdin)
try:
    with open(data["path"]) as handle:
        result = {"read": True, "text": handle.read()}
except OSError as exc:
    result = {"read": False, "why": str(exc)}
result["env"] = {k: os.environ.get(k) for k in ("API_TOKEN", "OTHER_TOKEN")}
print(json.dumps(result))
"""


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host("bwrap")
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


def _resources(project: Path, **extra: Any) -> Path:
    spec: dict[str, Any] = {
        "type": "os",
        "description": "Read a file.",
        "command": ["python3", "-c", PEEK],
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}},
        "sideEffects": {"level": "read_only"},
        **extra,
    }
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "peek", "namespace": "ops"},
        "spec": spec,
    }
    path = project / "ops.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def _config(project: Path, extra: str = "", options: str = "") -> None:
    source = "sources:\n  - path: ops.yaml\n    format: resource\n"
    if options:
        source += f"    options: {options}\n"
    (project / "toolgate.yaml").write_text(source + extra)


def _call(run_cli: RunCli, path: Path, project: Path) -> dict[str, Any]:
    done = run_cli(
        "call", "ops:peek", "--json", "-a", json.dumps({"path": str(path)}),
        "--workspace", str(project),
    )  # fmt: skip
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file the host can read, outside the project (the workspace)."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    secret = folder / "secret.txt"
    secret.write_text("host only\n")
    return secret


def test_an_os_tool_runs_in_a_compartment_without_any_opt_in(
    run_cli: RunCli, project: Path, toolgate_home: Path, outside: Path
) -> None:
    _sandbox_works()
    (toolgate_home / ".env").write_text("API_TOKEN=granted\nOTHER_TOKEN=not-granted\n")
    _resources(project)
    _config(project)

    denied = _call(run_cli, outside, project)
    assert denied["status"] == "ok", denied
    assert denied["content"]["read"] is False
    assert denied["metadata"]["sandbox"]["enforced"] is True
    # No permissions.env: no variable from .env at all.
    assert denied["content"]["env"] == {"API_TOKEN": None, "OTHER_TOKEN": None}

    # The gateway's .env is never readable, even by path.
    env_file = _call(run_cli, toolgate_home / ".env", project)
    assert env_file["content"]["read"] is False or env_file["content"]["text"] == ""


def test_os_tool_permissions_grant_fs_prefixes_and_env_keys(
    run_cli: RunCli, project: Path, toolgate_home: Path, outside: Path
) -> None:
    _sandbox_works()
    (toolgate_home / ".env").write_text("API_TOKEN=granted\nOTHER_TOKEN=not-granted\n")
    _resources(project, permissions={"fs": [str(outside.parent)], "env": ["API_TOKEN"]})
    _config(project)

    outcome = _call(run_cli, outside, project)
    assert outcome["content"]["read"] is True, outcome
    assert outcome["content"]["text"] == "host only\n"
    # The granted key reached the tool; its value, a credential by its name, is masked in what
    # the caller gets back (the gateway's credentials never reach the model).
    assert outcome["content"]["env"] == {"API_TOKEN": "[REDACTED]", "OTHER_TOKEN": None}
    assert outcome["metadata"]["sandbox"]["enforced"] is True

    shown = json.loads(run_cli("tools", "show", "ops:peek", "--json").stdout)
    enforced = shown["sandbox"]["enforced"]
    assert f"read-only: {outside.parent}" in enforced["filesystem"]
    assert "workspace read-only" in enforced["filesystem"]
    assert enforced["environment"] == "declared keys only: API_TOKEN"
    assert enforced["network"] == "none"


def test_an_os_tool_in_host_mode_still_needs_the_operator_opt_in(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    _resources(project, sandbox="host")
    _config(project)
    done = run_cli("call", "ops:peek", "--json", "-a", json.dumps({"path": str(outside)}))
    outcome = json.loads(done.stdout)
    assert outcome["code"] == "unavailable"
    assert "sandbox mode 'host'" in outcome["message"]
    assert "host_mode: [ops:peek]" in outcome["message"]

    _config(project, options="{host_mode: [ops:peek]}")
    ran = _call(run_cli, outside, project)
    assert ran["content"]["read"] is True
    assert "sandbox" not in ran.get("metadata", {})


def test_an_os_tool_is_unavailable_when_bwrap_is_missing(
    run_cli: RunCli, project: Path, outside: Path, tmp_path: Path
) -> None:
    _resources(project)
    _config(project, f"sandbox:\n  bwrap_path: {tmp_path / 'no-such-bwrap'}\n  layer: bubblewrap\n")
    done = run_cli("call", "ops:peek", "--json", "-a", json.dumps({"path": str(outside)}))
    outcome = json.loads(done.stdout)
    assert outcome["code"] == "unavailable"
    assert "bubblewrap was not found" in outcome["message"]

    _config(
        project,
        f"sandbox:\n  bwrap_path: {tmp_path / 'no-such-bwrap'}\n  layer: bubblewrap\n"
        "  unsandboxed_host: true\n",
    )
    labelled = _call(run_cli, outside, project)
    assert labelled["content"]["read"] is True
    assert labelled["metadata"]["sandbox"]["label"] == "unsandboxed-host"


def test_the_loader_reads_os_sandbox_and_permissions(project: Path) -> None:
    path = _resources(project, permissions={"env": ["A"], "fs": ["data"], "time": True})
    loaded = load_resources(path)
    assert not [d for d in loaded.diagnostics if d.severity == "error"], loaded.diagnostics
    (resource,) = loaded.tools
    spec = resource.tool.sandbox
    assert spec.mode is SandboxMode.COMPARTMENT
    assert spec.permissions.fs == (str(project / "data"),)
    assert spec.permissions.time is True
    assert resource.tool.env == ("A",)


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"sandbox": "jail"}, "/spec/sandbox", "'compartment' or 'host' (default 'compartment')"),
        ({"permissions": {"network": ["*"]}}, "/spec/permissions/network/0", "not a valid host"),
        ({"permissions": ["fs"]}, "/spec/permissions", "must be an object"),
    ],
)
def test_a_bad_os_sandbox_declaration_is_a_diagnostic(
    project: Path, extra: dict[str, Any], field: str, says: str
) -> None:
    loaded = load_resources(_resources(project, **extra))
    assert not loaded.tools
    assert any((d.field or "").endswith(field) and says in d.message for d in loaded.diagnostics), (
        loaded.diagnostics
    )


def test_sandbox_fields_are_only_for_os_tools(project: Path) -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "get", "namespace": "api"},
        "spec": {
            "type": "rest",
            "description": "Get.",
            "endpoint": {"method": "GET", "url": "https://api.example.com/x"},
            "inputSchema": {"type": "object"},
            "sandbox": "compartment",
        },
    }
    path = project / "api.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    loaded = load_resources(path)
    assert not loaded.tools
    assert any(
        (d.field or "").endswith("/spec/sandbox") and "only for type: os" in d.message
        for d in loaded.diagnostics
    ), loaded.diagnostics
