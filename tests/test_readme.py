"""The README stays true: it opens with the two set-up commands, and its quick start runs as
written. (The docs site and its generated references are checked in ``test_docs_site.py``.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from conftest import RunCli
from doc_blocks import ROOT, doc_block

pytestmark = [pytest.mark.slow, pytest.mark.slow]

README = (ROOT / "README.md").read_text(encoding="utf-8")


def _commands() -> list[list[str]]:
    commands = []
    for line in doc_block("quickstart:commands").splitlines():
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
    (project / "my_tools.py").write_text(doc_block("quickstart:my_tools.py"), encoding="utf-8")
    (project / "toolgate.yaml").write_text(doc_block("quickstart:toolgate.yaml"), encoding="utf-8")
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


def test_the_readme_fits_on_a_few_screens() -> None:
    assert len(README.splitlines()) <= 250


def test_every_link_of_the_readme_leads_to_a_file_of_the_repository() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"
