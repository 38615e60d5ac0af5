"""The README stays true: its quick start runs as written, and its tables match the code."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from conftest import RunCli
from toolgate import ErrorCode
from toolgate.errors import ERROR_DESCRIPTIONS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _block(marker: str) -> str:
    match = re.search(rf"<!-- {re.escape(marker)} -->\n```\w*\n(.*?)```", README, re.DOTALL)
    assert match, f"README has no block marked {marker!r}"
    return match.group(1)


def _commands() -> list[list[str]]:
    commands = []
    for line in _block("quickstart:commands").splitlines():
        command = line.split(" # ")[0].strip() if " # " in line else line.strip()
        if command:
            commands.append(shlex.split(command))
    return commands


def test_the_readme_opens_with_the_two_setup_commands() -> None:
    head = README.split("## ", 1)[0]
    assert "pip install -e . && toolgate serve" in head
    assert "pip install -e '.[test]' && python -m pytest" in head


def test_ci_runs_the_readme_test_command() -> None:
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install --quiet -e '.[test]' && python -m pytest" in ci


def test_quick_start_works_as_written(project: Path, run_cli: RunCli) -> None:
    (project / "my_tools.py").write_text(_block("quickstart:my_tools.py"), encoding="utf-8")
    (project / "toolgate.yaml").write_text(_block("quickstart:toolgate.yaml"), encoding="utf-8")
    commands = _commands()
    assert [c[:2] for c in commands] == [
        ["toolgate", "tools"],
        ["toolgate", "tools"],
        ["toolgate", "call"],
        ["toolgate", "call"],
        ["toolgate", "export"],
        ["toolgate", "export"],
    ]
    listing, show, good, bad, openai, anthropic = (run_cli(*c[1:]) for c in commands)

    assert listing.returncode == 0 and "notes:search" in listing.stdout
    assert show.returncode == 0 and "Words to look for" in show.stdout
    assert good.returncode == 0
    assert json.loads(good.stdout.splitlines()[0]) == ["Gate codes", "Gateway design"]
    assert bad.returncode == 1
    assert '/query: 42 is not of type "string"' in bad.stderr
    assert json.loads(openai.stdout)[0]["function"]["name"] == "notes__search"
    assert json.loads(anthropic.stdout)[0]["name"] == "notes__search"


def test_error_code_table_lists_every_code_with_its_description() -> None:
    table = README.split("<!-- error-codes -->", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.*) \|$", table, re.MULTILINE))
    assert set(rows) == {code.value for code in ErrorCode}
    for code, description in ERROR_DESCRIPTIONS.items():
        assert rows[code.value] == description
