"""``toolgate sandbox check`` and the sandbox's configuration section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from folder_tools import require_program
from toolgate.cli.options import CliState
from toolgate.cli.sandbox import register, sandbox_report
from toolgate.model import (
    Permissions,
    SandboxMode,
    SandboxSpec,
    SourceFormat,
    Tool,
    ToolSource,
)
from toolgate.sandbox.settings import SandboxConfig


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main(ctx: typer.Context) -> None:
        ctx.obj = CliState()

    register(app)
    return app


def test_check_reports_a_working_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_program("bwrap")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(_app(), ["sandbox", "check", "--json"])
    report = json.loads(result.stdout)
    if not report["works"]:
        pytest.skip(f"bubblewrap cannot sandbox here: {report['problem']}")
    assert result.exit_code == 0
    assert report["compartment_tools"] == "run sandboxed"
    assert set(report["limits"]) >= {"cpu time", "memory", "file size", "processes"}
    text = CliRunner().invoke(_app(), ["sandbox", "check"])
    assert "Sandbox works" in text.stdout and "processes:" in text.stdout


def test_check_fails_with_a_fix_when_bwrap_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = sandbox_report(SandboxConfig(bwrap_path=str(tmp_path / "none"), layer="bubblewrap"))
    assert report["works"] is False
    assert "apt-get install bubblewrap" in report["problem"]
    assert report["compartment_tools"] == "are unavailable"
    labelled = sandbox_report(
        SandboxConfig(bwrap_path=str(tmp_path / "none"), layer="bubblewrap", unsandboxed_host=True)
    )
    assert "unsandboxed-host" in labelled["compartment_tools"]


def _tool(tool_id: str, fmt: SourceFormat, mode: SandboxMode = SandboxMode.HOST) -> Tool:
    return Tool(
        id=tool_id,
        description="d",
        input_schema={"type": "object"},
        sandbox=SandboxSpec(mode, Permissions()),
        source=ToolSource(fmt),
    )


def test_mode_resolution_namespace_then_declaration_then_format_default() -> None:
    config = SandboxConfig.model_validate(
        {
            "default": {"tool-folder": "compartment"},
            "namespaces": {"legacy": "host", "risky": "compartment"},
        }
    )
    folder = SourceFormat.TOOL_FOLDER
    assert config.mode_for(_tool("local:a", folder)) is SandboxMode.COMPARTMENT
    assert config.mode_for(_tool("legacy:a", folder)) is SandboxMode.HOST
    assert config.mode_for(_tool("x:a", SourceFormat.RESOURCE)) is SandboxMode.HOST
    assert config.mode_for(_tool("risky:a", SourceFormat.PYTHON)) is SandboxMode.COMPARTMENT
    declared = _tool("x:a", SourceFormat.RESOURCE, SandboxMode.COMPARTMENT)
    assert config.mode_for(declared) is SandboxMode.COMPARTMENT
    assert SandboxConfig().mode_for(_tool("local:a", folder)) is SandboxMode.HOST


def test_the_section_rejects_typos_and_relative_paths() -> None:
    with pytest.raises(ValidationError):
        SandboxConfig.model_validate({"default": {"tool-folder": "jail"}})
    with pytest.raises(ValidationError):
        SandboxConfig.model_validate({"unsandboxed": True})
    with pytest.raises(ValidationError):
        SandboxConfig.model_validate({"system_paths": ["opt/node"]})
    with pytest.raises(ValidationError):
        SandboxConfig.model_validate({"limits": {"processes": 0}})
