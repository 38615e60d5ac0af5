"""The documentation site builds strictly, and its references are generated from the code.

``mkdocs build --strict`` fails on a broken link, a missing page or anchor, a page left out of the
navigation and a reference that cannot be generated. The built pages are then checked against the
code they were generated from: every error code, command, HTTP operation and configuration key is
there, so nothing in the reference is kept by hand.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
import typer.main
import yaml

from conftest import RunCli
from doc_blocks import ROOT, documentation_files, marked_blocks
from toolgate import Gateway
from toolgate.cli.app import app as toolgate_app
from toolgate.config.files import parse_config
from toolgate.config.json_schema import config_json_schema
from toolgate.errors import ERROR_DESCRIPTIONS, ErrorCode
from toolgate.serve.api.app import build_api
from web_support import DOCUMENTED_PAGES

mkdocs = pytest.importorskip(
    "mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'"
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` writes it."""
    out = tmp_path_factory.mktemp("site")
    # The notices MkDocs' plugins print about the project's future are not warnings of ours.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    return out


def _text(site: Path, page: str) -> str:
    """The page's HTML with its tags removed and entities decoded."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def test_the_error_code_reference_lists_every_code_with_its_description(site: Path) -> None:
    text = " ".join(_text(site, "reference/errors").split())
    for code in ErrorCode:
        assert f"{code.value} {ERROR_DESCRIPTIONS[code]}" in text, code


# Typer carries its own copy of Click, so commands are told apart by what they have.
TOOLGATE = typer.main.get_command(toolgate_app)


def _commands(command: Any, path: str) -> dict[str, Any]:
    """Every command under ``command`` by its full name (``toolgate tools list``)."""
    found = {path: command}
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            found |= _commands(sub, f"{path} {name}")
    return found


def test_the_cli_reference_has_every_command_and_option(site: Path) -> None:
    raw = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    text = _text(site, "reference/cli")
    commands = _commands(TOOLGATE, "toolgate")
    assert {"toolgate call", "toolgate tools list", "toolgate config schema"} <= set(commands)
    options = 0
    for path, command in commands.items():
        assert re.search(rf"\b{re.escape(path)}\b", text), path
        # Each command's own section lists each of its options.
        heading = re.search(rf'<h\d id="[^"]*"><code>{re.escape(path)}</code>', raw)
        if path != "toolgate":  # the root's options come first, under the page's title
            assert heading, f"no section for {path}"
            after = re.split(r"<h\d", raw[heading.end() :], maxsplit=1)[0]
            section = html.unescape(re.sub(r"<[^>]+>", " ", after))
        else:
            section = text
        for param in command.params:
            if param.param_type_name == "option" and not param.hidden:
                options += 1
                assert any(flag in section for flag in param.opts), (path, param.opts)
    assert options > 50


def test_the_http_api_reference_has_every_operation(site: Path) -> None:
    with Gateway() as gateway:
        document = build_api(gateway, authenticate=lambda request: "default").openapi()
    text = _text(site, "reference/http-api")
    for path, operations in document["paths"].items():
        for method in operations:
            assert f"{method.upper()} {path}" in text, (method, path)
    published = json.loads((site / "reference" / "openapi.json").read_text(encoding="utf-8"))
    assert published == document


def test_the_serving_guide_names_only_real_operations() -> None:
    with Gateway() as gateway:
        document = build_api(gateway, authenticate=lambda request: "default").openapi()
    guide = (ROOT / "docs" / "guides" / "serving.md").read_text(encoding="utf-8")
    table = guide.split("| to | use | who |", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`(GET|POST|DELETE) (/[^` ]+)`", table)
    assert len(named) >= 15
    for method, path in named:
        assert method.lower() in document["paths"].get(path, {}), f"{method} {path}"


def _keys(schema: dict[str, Any], node: Any) -> set[str]:
    """Every property name reachable from ``node``."""
    defs = schema["$defs"]
    seen: set[str] = set()
    stack = [node]
    names: set[str] = set()
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if ref and ref not in seen:
                seen.add(ref)
                stack.append(defs[ref.rsplit("/", 1)[1]])
            names.update(item.get("properties", {}))
            stack.extend(v for k, v in item.items() if k != "$defs")
        elif isinstance(item, list):
            stack.extend(item)
    return names


def test_the_configuration_reference_has_every_key(site: Path) -> None:
    schema = config_json_schema()
    text = _text(site, "reference/configuration")
    keys = _keys(schema, {k: v for k, v in schema.items() if k != "$defs"})
    assert {"python", "tool_folders", "network_grants", "max_body_bytes", "memory_mb"} <= keys
    for key in keys:
        assert re.search(rf"\b{re.escape(key)}\b", text), key
    published = json.loads((site / "reference" / "toolgate.schema.json").read_text("utf-8"))
    assert published == schema


def test_the_python_api_reference_documents_every_public_name(site: Path) -> None:
    import toolgate

    text = _text(site, "reference/python-api")
    for name in set(toolgate.__all__) - {"__version__"}:
        assert f"toolgate.{name}" in text, name
    assert "Call a tool through the pipeline" in text or "call_sync" in text


def test_the_pictures_of_the_docs_are_taken_by_the_browser_tests() -> None:
    used = {
        Path(match).stem
        for path in documentation_files()
        for match in re.findall(r"assets/screenshots/([\w-]+\.png)", path.read_text("utf-8"))
    }
    assert used, "the docs show the web UI"
    assert used <= DOCUMENTED_PAGES
    for name in used:
        assert (ROOT / "docs" / "assets" / "screenshots" / f"{name}.png").stat().st_size > 1000


# -- the configuration schema ---------------------------------------------------------------------


def _validator() -> Any:
    return jsonschema_rs.validator_for(config_json_schema())


def test_every_documented_toolgate_yaml_matches_the_schema_and_loads() -> None:
    blocks = {**marked_blocks("toolgate.yaml"), **marked_blocks("config:example")}
    assert len(blocks) >= 6, sorted(blocks)
    validator = _validator()
    for marker, text in blocks.items():
        data = yaml.safe_load(text)
        errors = [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(data)]
        assert errors == [], marker
        parse_config(text, label=marker)  # the gateway accepts what the schema accepts


@pytest.mark.parametrize(
    ("document", "valid"),
    [
        ({"python": ["./my_tools.py", {"module": "pkg.mod", "namespace": "x"}]}, True),
        ({"tool_folders": ["./tools"], "sources": ["./ext/manifest.yaml"]}, True),
        ({"serve": {"port": 8470}, "sandbox": {"limits": {"memory_mb": 512}}}, True),
        ({"pyhton": ["./my_tools.py"]}, False),  # a typo
        ({"serve": {"port": "eighty"}}, False),
        ({"approval": {"rules": [{"level": "read_only"}]}}, False),  # require is required
        ({"approval": {"rules": [{"level": "sometimes", "require": True}]}}, False),
    ],
)
def test_the_schema_agrees_with_the_gateway(document: dict[str, Any], valid: bool) -> None:
    assert _validator().is_valid(document) is valid
    try:
        parse_config(yaml.safe_dump(document))
    except Exception:  # noqa: BLE001 - any refusal of the gateway counts
        accepted = False
    else:
        accepted = True
    assert accepted is valid


def test_config_schema_prints_and_writes_the_schema(run_cli: RunCli, project: Path) -> None:
    printed = run_cli("config", "schema")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == config_json_schema()
    written = run_cli("config", "schema", "--output", "toolgate.schema.json")
    assert written.returncode == 0, written.stderr
    assert json.loads((project / "toolgate.schema.json").read_text("utf-8")) == config_json_schema()
    refused = run_cli("config", "schema", "--output", str(project / "missing" / "x.json"))
    assert refused.returncode == 2
    assert "--output: cannot write" in refused.stderr and "missing" in refused.stderr


def test_a_toolgate_yaml_with_the_editor_comment_still_loads(
    run_cli: RunCli, project: Path
) -> None:
    (project / "toolgate.yaml").write_text(
        "# yaml-language-server: $schema=./toolgate.schema.json\ndemo: true\n", encoding="utf-8"
    )
    listed = run_cli("tools", "list")
    assert listed.returncode == 0, listed.stderr
    assert "demo:add" in listed.stdout


def test_the_command_line_guide_names_only_real_commands() -> None:
    guide = (ROOT / "docs" / "guides" / "command-line.md").read_text(encoding="utf-8")
    table = guide.split("| task | commands |", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"`([^`]+)`", table)
    assert len(named) > 20
    for text in named:
        words = text.replace("\\|", "|").split()
        group: Any = TOOLGATE
        for word in words:
            if word.isupper() or word.startswith("-") or not hasattr(group, "commands"):
                break
            choices = word.split("|")
            for choice in choices:
                assert choice in group.commands, f"{text}: no command {choice!r}"
            group = group.commands[choices[0]]
