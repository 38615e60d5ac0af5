"""The seam every declaration format plugs into: SourceSet through Gateway.add_source."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from toolgate import Gateway, tool
from toolgate.errors import ErrorCode
from toolgate.formats._common.diagnostics import Diagnostic
from toolgate.formats.declarations import DeclarationSource, SourceAlert, SourceContext, SourceLoad
from toolgate.model import SourceFormat
from toolgate.model.policy import AccessPolicy, PolicyAction, PolicyRule
from toolgate.registry import RegisteredTool

pytestmark = pytest.mark.slow


@tool(namespace="fake")
def echo(text: str) -> str:
    """Return the text."""
    return text


@tool(namespace="fake")
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()


DENY_FAKE = AccessPolicy(
    "no-fake",
    rules=(
        PolicyRule(
            when={"tool.namespace": ("fake",)}, action=PolicyAction.DENY, reason="fake is off"
        ),
    ),
)


class FakeSource(DeclarationSource):
    """A source whose next load is whatever the test sets."""

    format = SourceFormat.RESOURCE

    def __init__(self) -> None:
        super().__init__("memory://fake")
        self.next = SourceLoad()
        self.fail: Exception | None = None

    @classmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> FakeSource:
        return cls()

    @classmethod
    def validate(cls, path: Path) -> list[Diagnostic]:
        return []

    def load(self) -> SourceLoad:
        if self.fail is not None:
            raise self.fail
        return self.next

    def agent_context(
        self, agent: str | None, visible: Callable[[str], bool] = lambda tool_id: True
    ) -> str | None:
        return f"Guide for {agent or 'anyone'}."


def _entry(item: Any) -> RegisteredTool:
    return RegisteredTool(item.tool, item.binding)


def test_a_source_adds_updates_and_removes_its_tools() -> None:
    source = FakeSource()
    source.next = SourceLoad(entries=[_entry(echo), _entry(shout)])
    with Gateway() as gateway:
        gateway.add_source(source)
        assert [t.id for t in gateway.list_tools()] == ["fake:echo", "fake:shout"]
        assert gateway.call_sync("fake:shout", {"text": "hi"}).content == "HI"
        source.next = SourceLoad(entries=[_entry(echo)])
        gateway.declarations.reload(source)
        assert [t.id for t in gateway.list_tools()] == ["fake:echo"]
        assert gateway.call_sync("fake:shout", {"text": "hi"}).code is ErrorCode.TOOL_NOT_FOUND


def test_a_tool_id_taken_by_another_declaration_is_a_diagnostic_not_a_takeover() -> None:
    source = FakeSource()
    source.next = SourceLoad(entries=[_entry(echo)])
    with Gateway() as gateway:
        gateway.add(echo)
        load = gateway.add_source(source)
        assert [d.field for d in load.diagnostics] == ["fake:echo"]
        assert "already registered" in load.diagnostics[0].message
        assert load.diagnostics[0] in gateway.diagnostics()
        # The first registration stays and still runs.
        assert gateway.call_sync("fake:echo", {"text": "x"}).content == "x"


def test_a_source_that_raises_while_loading_is_a_diagnostic_and_keeps_the_gateway_serving() -> None:
    source = FakeSource()
    source.fail = RuntimeError("manifest exploded")
    with Gateway() as gateway:
        gateway.add(echo)
        load = gateway.add_source(source)
        assert "manifest exploded" in load.diagnostics[0].message
        assert load.diagnostics[0].path == "memory://fake"
        assert gateway.call_sync("fake:echo", {"text": "x"}).ok


def test_policies_declared_by_a_source_apply_and_go_away_with_it() -> None:
    source = FakeSource()
    with Gateway() as gateway:
        gateway.add(echo)
        # Called once before the policy exists, so a compiled plan without authorize is cached.
        assert gateway.call_sync("fake:echo", {"text": "x"}, agent="a").ok
        source.next = SourceLoad(policies=[DENY_FAKE])
        gateway.add_source(source)
        denied = gateway.call_sync("fake:echo", {"text": "x"}, agent="a")
        assert denied.code is ErrorCode.TOOL_NOT_FOUND  # hidden: it does not exist for "a"
        assert "no-fake" not in (denied.message or "")
        assert gateway.list_tools(agent="a") == []
        source.next = SourceLoad()
        gateway.declarations.reload(source)
        assert gateway.call_sync("fake:echo", {"text": "x"}, agent="a").ok
        assert [t.id for t in gateway.list_tools(agent="a")] == ["fake:echo"]


def test_alerts_and_agent_context_come_from_the_sources() -> None:
    source = FakeSource()
    source.next = SourceLoad(alerts=[SourceAlert("fake", "warning", "no API key")])
    with Gateway() as gateway:
        gateway.add_source(source)
        assert gateway.alerts() == [SourceAlert("fake", "warning", "no API key")]
        assert gateway.agent_context(agent="bot") == "Guide for bot."


def test_add_source_names_a_missing_path(tmp_path: Path) -> None:
    from toolgate.errors import ConfigError

    with Gateway() as gateway, pytest.raises(ConfigError, match="no such file or folder"):
        gateway.add_source(tmp_path / "missing.yaml")


def test_add_source_refuses_a_file_in_no_known_format(tmp_path: Path) -> None:
    from toolgate.errors import ConfigError

    path = tmp_path / "other.json"
    path.write_text('{"hello": "world"}')
    with Gateway() as gateway, pytest.raises(ConfigError, match="not a declaration in a known"):
        gateway.add_source(path)


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("deep.json", "[" * 100_000 + "]" * 100_000, "deep.json: nested too deeply"),
        ("broken.json", '{"id": "x",}', "broken.json: invalid JSON: Expecting property name"),
        ("latin.yaml", "id: caf\xe9\n", "latin.yaml: not UTF-8 text"),
    ],
)
def test_a_declaration_that_cannot_be_parsed_is_refused_with_the_reason(
    tmp_path: Path, name: str, text: str, reason: str
) -> None:
    # Detection reads the file to tell its format: one it cannot read must be refused with why
    # (a JSON nested 100,000 deep once ended the CLI in a RecursionError traceback).
    from toolgate.errors import ConfigError

    path = tmp_path / name
    path.write_bytes(text.encode("latin-1"))
    with Gateway() as gateway, pytest.raises(ConfigError) as refused:
        gateway.add_source(path)
    assert "not a declaration in a known format" in str(refused.value)
    assert f"it could not be read: {reason}" in str(refused.value)
    result = _toolgate("validate", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr
    assert reason in result.stdout


def _toolgate(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "toolgate"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


def test_validate_cli_reports_unknown_files_and_bad_paths(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text("hello: world\n")
    result = _toolgate("validate", str(path))
    assert result.returncode == 1
    assert "not a declaration in a known format" in result.stdout
    missing = _toolgate("validate", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert "no such file or folder" in missing.stderr
    unknown = _toolgate("validate", str(path), "--format", "zip")
    assert unknown.returncode == 2
    assert "unknown format" in unknown.stderr


class StartRecordingSource(FakeSource):
    def __init__(self) -> None:
        super().__init__()
        self.started = asyncio.Event()
        self.changed: Callable[[], None] | None = None

    async def start(self, changed: Callable[[], None]) -> None:
        self.changed = changed
        self.started.set()


async def test_a_source_added_to_a_running_gateway_is_started_and_can_ask_for_a_reload() -> None:
    source = StartRecordingSource()
    async with Gateway() as gateway:
        gateway.add_source(source)
        await asyncio.wait_for(source.started.wait(), 10)
        assert source.changed is not None
        source.next = SourceLoad(entries=[_entry(echo)])
        source.changed()
        assert [t.id for t in gateway.list_tools()] == ["fake:echo"]


async def test_a_source_added_from_another_thread_is_started_on_the_gateways_loop() -> None:
    source = StartRecordingSource()
    async with Gateway() as gateway:
        await asyncio.to_thread(gateway.add_source, source)
        await asyncio.wait_for(source.started.wait(), 10)
