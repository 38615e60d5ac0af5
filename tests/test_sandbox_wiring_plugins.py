"""Pandora plugins in a compartment: listed and run by the sandboxed worker, never imported on
the host, through a real toolgate.yaml and the installed ``toolgate`` console script."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from folder_tools import require_program
from gateway_support import gateway_with
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

pytestmark = pytest.mark.slow

INDEX = """\
import os, pathlib

# Top-level code: it must run only inside the sandbox, never on the host.
pathlib.Path(os.environ.get("TMPDIR", "/tmp"), "imported").write_text("x")
HOST_MARK = {marker!r}
try:
    open(HOST_MARK, "w").close()
except OSError:
    pass


def execute(input, ctx):
    try:
        with open(input["path"]) as handle:
            text = handle.read()
    except OSError as exc:
        text = None
        why = str(exc)
    else:
        why = None
    return {{
        "text": text,
        "why": why,
        "env": dict(ctx.env),
        "time": ctx.now is not None,
        "random": ctx.random is not None,
    }}


def resolve_tools(ctx):
    return {{"tools": [{{
        "id": "dynamic",
        "name": "Dynamic",
        "annotations": {{"readOnlyHint": True}},
        "description": "Made by resolve_tools with " + str(ctx.plugin_config.get("units")),
        "parameters": {{"type": "object"}},
        "execute": lambda input, ctx: {{"units": ctx.plugin_config.get("units")}},
    }}], "alerts": [{{"level": "info", "message": "resolved in the sandbox"}}]}}


tools = [{{
    "id": "peek",
    "name": "Peek",
    "annotations": {{"readOnlyHint": True}},
    "description": "Read a file.",
    "parameters": {{"type": "object", "properties": {{"path": {{"type": "string"}}}}}},
    "execute": execute,
}}]
"""


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host("bwrap")
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


def _plugin(project: Path, marker: Path) -> Path:
    folder = project / "peek-plugin"
    folder.mkdir()
    manifest = {
        "id": "@t/peek",
        "provides": {
            "tools": {
                "entry": "index.py",
                "permissions": {"env": ["API_TOKEN"], "time": True},
            }
        },
    }
    (folder / "pandora.json").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / "index.py").write_text(INDEX.format(marker=str(marker)), encoding="utf-8")
    return folder


def _config(project: Path, extra: str = "") -> None:
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: peek-plugin\n    format: plugin\n"
        "    options: {config: {units: metric}}\n" + textwrap.dedent(extra)
    )


def _call(run_cli: RunCli, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    done = run_cli("call", tool, "--json", "-a", json.dumps(arguments))
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    secret = folder / "secret.txt"
    secret.write_text("host only\n")
    return secret


def test_a_compartment_plugin_runs_in_the_worker_without_host_mode(
    run_cli: RunCli, project: Path, toolgate_home: Path, outside: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    marker = tmp_path / "ran-on-the-host"
    _plugin(project, marker)
    _config(project)
    (toolgate_home / ".env").write_text("API_TOKEN=granted\n")

    outcome = _call(run_cli, "@t/peek:peek", {"path": str(outside)})
    assert outcome["status"] == "ok", outcome
    result = outcome["content"]
    assert result["text"] is None and "No such file" in result["why"]
    # time was granted, random was not: the context offers only what was granted.
    assert result["time"] is True and result["random"] is False
    # What was enforced is in the outcome (and so in the audit record), as for script tools.
    assert outcome["metadata"]["sandbox"] == {"mode": "compartment", "enforced": True, "egress": []}
    # The plugin's module never ran on the host (its top-level code writes the marker).
    assert not marker.exists()

    dynamic = _call(run_cli, "@t/peek:dynamic", {})
    assert dynamic["content"] == {"units": "metric"}

    listed = json.loads(run_cli("tools", "list", "--json").stdout)
    ids = {item["id"]: item for item in listed}
    assert ids["@t/peek:peek"]["available"] is True
    shown = json.loads(run_cli("tools", "show", "@t/peek:peek", "--json").stdout)
    assert shown["sandbox"]["enforced"]["sandbox"] == "compartment (bubblewrap)"
    assert not marker.exists()


def test_a_compartment_plugin_reads_only_its_declared_env(
    project: Path, outside: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    folder = _plugin(project, tmp_path / "marker")
    environ = {"API_TOKEN": "granted", "OTHER": "not declared", "PATH": "/usr/bin:/bin"}
    with gateway_with(environ=environ, sandbox=Sandbox(SandboxConfig())) as gateway:
        load = gateway.add_source(folder)
        assert [a.message for a in load.alerts] == ["resolved in the sandbox"]
        outcome = gateway.call_sync("@t/peek:peek", {"path": str(folder / "index.py")})
        assert outcome.status == "ok", outcome.message
        assert outcome.content["env"] == {"API_TOKEN": "granted"}
        assert "HOST_MARK" in outcome.content["text"]  # its own folder is readable
    assert not (tmp_path / "marker").exists()


def test_without_a_working_sandbox_the_entry_is_not_imported(
    run_cli: RunCli, project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-on-the-host"
    _plugin(project, marker)
    _config(project, f"sandbox:\n  bwrap_path: {tmp_path / 'no-such-bwrap'}\n  layer: bubblewrap\n")
    done = run_cli("call", "@t/peek:peek", "--json", "-a", "{}")
    assert done.returncode != 0
    assert json.loads(done.stdout)["code"] == "tool_not_found"
    plugins = run_cli("plugins")
    text = " ".join((plugins.stdout + plugins.stderr).split())
    assert "bubblewrap was not found" in text, text
    # Both ways out are named: the unsandboxed host (labelled) and host_mode.
    assert "unsandboxed_host: true" in text
    assert "host_mode: true" in text
    assert not marker.exists()


def test_an_unsandboxed_host_runs_the_worker_on_the_host_labelled(
    run_cli: RunCli, project: Path, tmp_path: Path, outside: Path
) -> None:
    # The operator's explicit choice, as for script tools: the worker runs on the host and
    # every outcome carries the label (a plugin's code is still never imported by the gateway).
    marker = tmp_path / "ran-on-the-host"
    _plugin(project, marker)
    _config(
        project,
        f"sandbox:\n  bwrap_path: {tmp_path / 'no-such-bwrap'}\n  layer: bubblewrap\n"
        "  unsandboxed_host: true\n",
    )
    outcome = _call(run_cli, "@t/peek:peek", {"path": str(outside)})
    assert outcome["status"] == "ok", outcome
    assert outcome["content"]["text"] == "host only\n"  # nothing is enforced
    assert outcome["metadata"]["sandbox"] == {
        "mode": "compartment",
        "enforced": False,
        "label": "unsandboxed-host",
    }
    shown = json.loads(run_cli("tools", "show", "@t/peek:peek", "--json").stdout)
    assert shown["sandbox"]["enforced"] == {"sandbox": "unsandboxed-host"}
    assert marker.exists()  # its top-level code ran in the worker, on the host
    listed = run_cli("plugins").stdout
    assert "worker on the host (unsandboxed-host)" in listed, listed
    assert "sandboxed worker" not in listed
