"""What users read names the declaration formats by what they are, not by where they come from.

toolgate's formats come from other projects (Jean2: tool folders; Jingle: capability manifests;
Pandora: plugins; Joch: Kubernetes-style ``Tool`` resources), and a newcomer knows none of those
names. They appear only where the format reference says where a format comes from. This test
reads what users read — every command's ``--help``, the web UI's templates, the error messages of
:mod:`toolgate.errors`, the source of the modules that define the public API, and the docs pages —
and names the file and line of each origin name it finds.

Identifiers and wire values that carry an origin name (``apiVersion: joch.dev/v1alpha1``, the
plugin manifest's file names ``pandora.json``/``pandora.yaml``/``pandora.yml``) are not mentions:
they are removed before a line is checked.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import toolgate
from doc_blocks import ROOT, documentation_files
from toolgate.cli.app import app as toolgate_app

SRC = ROOT / "src" / "toolgate"

#: An origin name, or the old name of the format documents ("the seed", "seed 001").
ORIGIN_NAME = re.compile(r"\b(?:jean2|jingle|pandora|joch)\b|\bthe seeds?\b|\bseed \d{3}\b", re.I)

#: Identifiers and wire values that contain an origin name; they are not mentions.
IDENTIFIERS = re.compile(r"joch\.dev/[\w./-]*|\bpandora\.(?:json|yaml|yml)\b", re.I)

#: The format reference: each says once where its format comes from (and shows its identifiers).
FORMAT_REFERENCE = frozenset(
    {
        "docs/guides/formats.md",
        "docs/guides/tool-folders.md",
        "docs/guides/capabilities.md",
        "docs/guides/plugins.md",
        "docs/guides/extension-info.md",
        "docs/guides/resources.md",
        "docs/guides/mcp-servers.md",
    }
)


def _mentions(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line that names an origin project."""
    for number, line in enumerate(lines, 1):
        if ORIGIN_NAME.search(IDENTIFIERS.sub("", line)):
            yield number, line.strip()


def _file_mentions(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        where = path.relative_to(ROOT).as_posix()
        lines = path.read_text(encoding="utf-8").splitlines()
        found += [f"{where}:{number}: {line}" for number, line in _mentions(lines)]
    return found


def test_the_patterns_tell_a_mention_from_an_identifier() -> None:
    lines = [
        "Jean2: denied by default for safety",
        "a Pandora plugin",
        "the seed's order",
        "(seed 001)",
        "apiVersion: joch.dev/v1alpha1",
        "plugins/hello/pandora.json and @pandorakit/weather",
        "a random seed of 42",
    ]
    assert [number for number, _ in _mentions(lines)] == [1, 2, 3, 4]


# -- the command line ---------------------------------------------------------------------------


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every command under ``command``, hidden ones included."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


@pytest.mark.slow
def test_no_command_help_names_an_origin_project() -> None:
    runner = CliRunner()
    commands = list(_commands(typer.main.get_command(toolgate_app)))
    assert len(commands) > 40 and ("js", "install") in commands
    found = []
    for path in commands:
        shown = runner.invoke(toolgate_app, [*path, "--help"], env={"COLUMNS": "200"})
        assert shown.exit_code == 0, (path, shown.output)
        found += [
            f"{' '.join(('toolgate', *path))} --help, line {number}: {line}"
            for number, line in _mentions(shown.output.splitlines())
        ]
    assert not found, "\n".join(found)


# -- the web UI, the error messages, the public API ---------------------------------------------


def test_no_web_ui_template_names_an_origin_project() -> None:
    templates = sorted((SRC / "serve" / "web" / "templates").glob("*.html"))
    assert len(templates) > 5
    found = _file_mentions(templates)
    assert not found, "\n".join(found)


def test_no_error_message_names_an_origin_project() -> None:
    from toolgate import errors

    text = " ".join(errors.ERROR_DESCRIPTIONS.values())
    assert not ORIGIN_NAME.search(text), text
    found = _file_mentions([Path(inspect.getfile(errors))])
    assert not found, "\n".join(found)


def _public_modules() -> list[Path]:
    """The source files of ``toolgate``, of the modules defining its ``__all__``, and of the
    exporters (the Python API reference is generated from their docstrings)."""
    files = {Path(inspect.getfile(toolgate))}
    for name in toolgate.__all__:
        module = inspect.getmodule(getattr(toolgate, name))
        if module is not None and module.__name__.startswith("toolgate"):
            files.add(Path(inspect.getfile(module)))
    files |= set((SRC / "exporters").glob("*.py"))
    return sorted(files)


def test_the_public_api_names_no_origin_project() -> None:
    modules = _public_modules()
    assert SRC / "model" / "tool.py" in modules and SRC / "python" / "decorator.py" in modules
    found = _file_mentions(modules)
    assert not found, "\n".join(found)


# -- the docs -----------------------------------------------------------------------------------


def test_no_docs_page_outside_the_format_reference_names_an_origin_project() -> None:
    pages = documentation_files()
    shown = {path.relative_to(ROOT).as_posix() for path in pages}
    assert not FORMAT_REFERENCE - shown, FORMAT_REFERENCE - shown
    found = _file_mentions(
        [path for path in pages if path.relative_to(ROOT).as_posix() not in FORMAT_REFERENCE]
    )
    assert not found, "\n".join(found)


def test_the_format_reference_names_each_origin_once_per_guide() -> None:
    """Each format guide says where its format comes from in one place, its introduction."""
    for guide, origin in (
        ("tool-folders.md", "Jean2"),
        ("capabilities.md", "Jingle"),
        ("plugins.md", "Pandora"),
        ("resources.md", "Joch"),
    ):
        text = (ROOT / "docs" / "guides" / guide).read_text(encoding="utf-8")
        intro = text.split("\n\n", 2)[1]
        assert f"This format comes from {origin}" in " ".join(intro.split()), guide
        rest = IDENTIFIERS.sub("", text.replace(intro, "", 1))
        assert not ORIGIN_NAME.search(rest), (guide, ORIGIN_NAME.search(rest))
