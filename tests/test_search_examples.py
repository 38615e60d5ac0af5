"""Prompt ``examples`` in every declaration format (toolgate's extension), and
``toolgate examples check [PATH]`` through the real CLI (issue 14)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import RunCli
from folder_tools import write_tool
from gateway_support import gateway_with
from toolgate import Gateway
from toolgate.formats._common.examples import MAX_EXAMPLE_CHARS, parse_examples
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.registry import RegisteredTool, Registry
from toolgate.search import ToolIndex
from toolgate.search.examples_check import check_examples

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent / "fixtures"


# -- declaring examples -----------------------------------------------------------------------


def test_a_tool_folder_declares_examples(tmp_path: Path) -> None:
    folder = write_tool(tmp_path, "greet", "echo '{}'", examples=["say hi to Ann", "greet Bob"])
    load = load_tool_folder(folder)
    assert load.tool is not None and load.diagnostics == ()
    assert load.tool.display.examples == ("say hi to Ann", "greet Bob")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("say hi", "expected a list of prompts"),
        (["ok", ""], "item 1: expected a non-empty string"),
        (["ok", 3], "item 1: expected a non-empty string"),
        (["x" * (MAX_EXAMPLE_CHARS + 1)], f"at most {MAX_EXAMPLE_CHARS} characters"),
        (["x"] * 51, "at most 50 examples"),
    ],
)
def test_bad_examples_are_diagnosed_naming_the_field(
    tmp_path: Path, value: Any, problem: str
) -> None:
    load = load_tool_folder(write_tool(tmp_path, "greet", "echo '{}'", examples=value))
    assert load.tool is None
    (diagnostic,) = [d for d in load.diagnostics if d.field == "examples"]
    assert problem in diagnostic.message


def test_examples_are_normalized() -> None:
    assert parse_examples(["  say\n hi ", "say hi", "other"]) == (("say hi", "other"), None)
    assert parse_examples(None) == ((), None)


def test_a_capability_tool_declares_examples(tmp_path: Path) -> None:
    folder = Path(shutil.copytree(FIXTURES / "capabilities" / "notion", tmp_path / "notion"))
    tools = folder / "tools.py"
    tools.write_text(
        tools.read_text(encoding="utf-8").replace(
            '"name": "searchPages",',
            '"name": "searchPages", "examples": ["find my meeting notes in Notion"],',
        ),
        encoding="utf-8",
    )
    with Gateway() as gateway:
        load = gateway.add_source(folder / "manifest.yaml")
        assert load.diagnostics == []
        assert gateway.get_tool("notion:searchPages").display.examples == (
            "find my meeting notes in Notion",
        )
        assert gateway.get_tool("notion:getPage").display.examples == ()


def test_a_plugin_tool_declares_examples(tmp_path: Path) -> None:
    folder = Path(shutil.copytree(FIXTURES / "plugins" / "weather", tmp_path / "weather"))
    module = folder / "weather.py"
    module.write_text(
        module.read_text(encoding="utf-8").replace(
            '"id": "weather",', '"id": "weather", "examples": ["is it raining in Oslo?"],'
        ),
        encoding="utf-8",
    )
    with gateway_with(environ={}, semantic_search=False) as gateway:
        gateway.add_source(folder, options={"host_mode": ["weather"]})
        tool = gateway.get_tool("@pandorakit/weather:weather")
        assert tool.display.examples == ("is it raining in Oslo?",)
        assert gateway.search_tools("raining in Oslo")[0].tool.id == tool.id


def _resource(examples: Any) -> dict[str, Any]:
    return {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "lookup", "namespace": "orders"},
        "spec": {
            "type": "function",
            "function": "./handlers.py:lookup_order",
            "description": "Look up an order.",
            "inputSchema": {
                "type": "object",
                "required": ["order_id"],
                "properties": {"order_id": {"type": "string"}},
            },
            "examples": examples,
        },
    }


def test_a_tool_resource_declares_examples(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "resources" / "handlers.py", tmp_path / "handlers.py")
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(_resource(["where is parcel 42?"])), encoding="utf-8")
    with Gateway() as gateway:
        load = gateway.add_source(path)
        assert load.diagnostics == []
        assert gateway.get_tool("orders:lookup").display.examples == ("where is parcel 42?",)
    path.write_text(yaml.safe_dump(_resource("where is it")), encoding="utf-8")
    with Gateway() as gateway:
        load = gateway.add_source(path)
        (problem,) = [d for d in load.diagnostics if "examples" in (d.field or "")]
        assert problem.field == "document 1: /spec/examples"
        assert "expected a list of prompts" in problem.message


def test_extension_info_examples_are_searched() -> None:
    with gateway_with(semantic_search=False) as gateway:
        gateway.add_source(FIXTURES / "extension_info" / "maps")
        with_examples = [e for e in gateway.entries() if e.tool.display.examples]
        assert with_examples
        tool = with_examples[0].tool
        assert gateway.search_tools(tool.display.examples[0])[0].tool.id == tool.id


# -- the check ----------------------------------------------------------------------------------


def _colliding_folders(root: Path) -> Path:
    tools = root / "tools"
    write_tool(
        tools,
        "send_email",
        "echo '{}'",
        body="Send an email message to a recipient.",
        examples=["email the quarterly report", "send Bob an email about lunch"],
    )
    write_tool(
        tools,
        "send_sms",
        "echo '{}'",
        body="Send a short text message to a phone number.",
        # The collision: an email request among the SMS tool's examples.
        examples=["text my phone number a reminder", "send an email to Carl"],
    )
    write_tool(tools, "no_examples", "echo '{}'", body="Something else entirely.")
    return tools


def test_check_reports_per_tool_and_the_confusion(tmp_path: Path) -> None:
    with gateway_with(semantic_search=False) as gateway:
        gateway.add_tool_folder(_colliding_folders(tmp_path))
        report = check_examples(gateway.registry, gateway.search_index)
    by_id = {tool.tool_id: tool for tool in report.tools}
    assert set(by_id) == {"local:send_email", "local:send_sms"}
    assert report.without_examples == ("local:no_examples",)
    sms = by_id["local:send_sms"]
    assert (sms.examples, sms.top1) == (2, 1)
    assert sms.confused_with == {"local:send_email": 1}
    assert sms.misses[0].example == "send an email to Carl" and sms.misses[0].rank == 2
    assert report.examples == 4 and report.top1_rate == 0.75 and report.top3_rate == 1.0


def test_examples_check_ranks_as_the_search_does(tmp_path: Path) -> None:
    # Issue 29: the check built its own index (default model, its own mode); it now searches
    # with a copy of the gateway's index: same model, same mode, same fusion.
    models: list[str] = []

    with gateway_with(semantic_search=False) as gateway:
        gateway.add_tool_folder(_colliding_folders(tmp_path))
        index = gateway.search_index
        copy = index.like(gateway.registry)
        assert copy.semantic is index.semantic
        for request in ("send an email to Carl", "text Bob that I am late", "something else"):
            ours = [(hit.tool.id, hit.score) for hit in copy.search(request)]
            assert ours == [(hit.tool.id, hit.score) for hit in index.search(request)]
    custom = ToolIndex(Registry(), semantic=False, model=lambda: models.append("used"))  # type: ignore[arg-type, func-returns-value]
    assert custom.like(Registry())._model_factory is custom._model_factory


def test_examples_check_path_json_and_exit_code(run_cli: RunCli, tmp_path: Path) -> None:
    tools = _colliding_folders(tmp_path)
    failed = run_cli("examples", "check", str(tools), "--json", "--mode", "lexical")
    assert failed.returncode == 1, failed.stderr
    report = json.loads(failed.stdout)
    assert report["passed"] is False and report["top1_rate"] == 0.75
    sms = next(t for t in report["tools"] if t["id"] == "local:send_sms")
    assert sms["confused_with"] == {"local:send_email": 1}
    assert sms["misses"] == [
        {"example": "send an email to Carl", "rank": 2, "first": "local:send_email"}
    ]
    passed = run_cli("examples", "check", str(tools), "--min-top1", "0.7", "--mode", "lexical")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "local:send_sms" in passed.stdout and "local:send_email (1)" in passed.stdout
    assert "75.0% ranked first" in passed.stdout and "passed" in passed.stdout
    # One tool folder names its parent.
    one = run_cli("examples", "check", str(tools / "send_email"), "--json", "--mode", "lexical")
    assert json.loads(one.stdout)["examples"] == 4


def test_examples_check_of_the_configured_tools(run_cli: RunCli, project: Path) -> None:
    (project / "mine.py").write_text(
        "from toolgate import tool\n\n"
        "@tool(namespace='m', examples=['add 2 and 3 together'])\n"
        "def add(a: int, b: int) -> int:\n"
        "    'Add two numbers.'\n"
        "    return a + b\n",
        encoding="utf-8",
    )
    (project / "toolgate.yaml").write_text(
        "python:\n  - module: ./mine.py\nsearch:\n  semantic: false\n", encoding="utf-8"
    )
    result = run_cli("examples", "check", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tools"][0]["id"] == "m:add" and report["tools"][0]["top1"] == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--min-top1", "1.5"], "--min-top1: expected a share from 0 to 1"),
        (["--mode", "magic"], "--mode: expected lexical, semantic or fused"),
        (["/no/such/path"], "PATH: no such file or folder"),
    ],
)
def test_examples_check_usage_errors(run_cli: RunCli, args: list[str], words: str) -> None:
    result = run_cli("examples", "check", *args)
    assert result.returncode == 2 and words in result.stderr


def test_registered_entries_keep_their_examples(tmp_path: Path) -> None:
    with Gateway() as gateway:
        gateway.add_tool_folder(_colliding_folders(tmp_path))
        entry = gateway.registry.get("local:send_email")
        assert isinstance(entry, RegisteredTool)
        assert len(entry.tool.display.examples) == 2
