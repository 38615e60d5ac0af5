"""``toolgate tools search`` through the real console script (issue 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import RunCli
from toolgate import ConfigError
from toolgate.config import load_gateway, parse_config

pytestmark = pytest.mark.slow

TOOLS = """\
from toolgate import tool


@tool(namespace="fs", effect="read_only")
def read_file(path: str) -> str:
    "Read the complete contents of a file."
    return path


@tool(namespace="time", effect="read_only", examples=["what time is it in Tokyo"])
def now(timezone: str) -> str:
    "Get the current time in an IANA timezone."
    return timezone


@tool(namespace="ops", effect="read_only", allowed_agents=["alice"])
def restart(service: str) -> str:
    "Restart a service."
    return service
"""


@pytest.fixture
def configured(project: Path) -> Path:
    (project / "mytools.py").write_text(TOOLS, encoding="utf-8")
    (project / "toolgate.yaml").write_text(
        "python:\n  - module: ./mytools.py\nagents:\n  alice: {}\n  bob: {}\n"
        "search:\n  semantic: false\n",
        encoding="utf-8",
    )
    return project


def test_search_prints_a_table_with_scores(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("tools", "search", "current time in Tokyo")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("#"))
    for column in ("ID", "Title", "Score", "Lexical", "Semantic"):
        assert column in header
    first = next(line for line in lines if line.lstrip().startswith("1 "))
    assert "time:now" in first


def test_search_json_and_agent_filter(run_cli: RunCli, configured: Path) -> None:
    found = json.loads(run_cli("tools", "search", "restart the service", "--json").stdout)
    assert found == []  # the default agent may not call ops:restart
    alice = run_cli("tools", "search", "restart the service", "--agent", "alice", "--json")
    (hit,) = json.loads(alice.stdout)
    assert hit["id"] == "ops:restart" and hit["rank"] == 1 and hit["score"] > 0
    assert hit["lexical_rank"] == 1 and hit["semantic_rank"] is None
    bob = run_cli("tools", "search", "restart the service", "--agent", "bob", "--json")
    assert json.loads(bob.stdout) == []


def test_search_without_a_match_says_so(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("tools", "search", "zebra")
    assert result.returncode == 0 and "No tool matches 'zebra'" in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["", "--json"], "query: is empty"),
        (["\x01\x02"], "query: is empty"),
        (["x" * 100_000], "query: is 100,000 characters long"),
        (["file", "--limit", "0"], "limit: must be between 1 and 100, not 0"),
        (["file", "--limit", "1000000000"], "limit: must be between 1 and 100"),
        (["file", "--mode", "psychic"], "--mode: expected lexical, semantic or fused"),
    ],
)
def test_bad_input_is_a_usage_error_naming_the_field(
    run_cli: RunCli, configured: Path, args: list[str], words: str
) -> None:
    result = run_cli("tools", "search", *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("search: {semantc: false}\n", r"search\.semantc: unknown key"),
        ("search: {core: 3}\n", r"search\.core"),
        ("search: {progressive: maybe}\n", r"search\.progressive"),
    ],
)
def test_a_malformed_search_section_names_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_the_search_section_configures_the_gateway(tmp_path: Path) -> None:
    config = tmp_path / "toolgate.yaml"
    config.write_text(
        "search:\n  semantic: false\n  progressive: true\n  core: ['x:*']\n", encoding="utf-8"
    )
    with load_gateway(config, environ={"TOOLGATE_HOME": str(tmp_path / "home")}) as gateway:
        assert gateway.search_index.semantic is False
        assert gateway.disclosure is not None and gateway.disclosure.core == ("x:*",)
        assert gateway.get_tool("toolgate:search_tools").side_effect == "read_only"


def test_search_explain_says_why_each_tool_ranked(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("tools", "search", "current time in Tokyo", "--explain")
    assert result.returncode == 0, result.stderr
    assert "1. time:now" in result.stdout
    assert "BM25" in result.stdout and "tim 0." in result.stdout  # a (stemmed) term, its share
    found = json.loads(run_cli("tools", "search", "current time", "--explain", "--json").stdout)
    why = found[0]["explain"]
    assert found[0]["id"] == "time:now" and {t["term"] for t in why["terms"]} >= {"tim"}
    assert why["lexical_score"] == pytest.approx(found[0]["score"])
    plain = json.loads(run_cli("tools", "search", "current time", "--json").stdout)
    assert "explain" not in plain[0]
