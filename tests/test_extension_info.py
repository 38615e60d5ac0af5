"""Extension Info manifests (seed 003): loading the seed's own examples with an implementation,
running them through the pipeline, binding rules, precise diagnostics for broken variants, the
command line (validate, tools list/show, call, approvals) and the exporters.

The fixtures in ``fixtures/extension_info`` are the seed's documents as the seed shows them
(``simplest``, ``hello``, ``maps``), each with the implementation this project adds beside it,
and the helloWorld tool as YAML implemented by a tool folder (``folder``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic.types as anthropic_types
import google.genai.types as gemini_types
import mcp.types as mcp_types
import openai.types.chat as openai_chat
import pydantic
import pytest

from doc_blocks import doc_block
from toolgate import CallStatus, ConfigError, ErrorCode, Gateway, SourceFormat
from toolgate.exporters import EXAMPLES_META_KEY, EXPORT_FORMATS, UI_META_KEY, export_tool
from toolgate.formats._common.diagnostics import Diagnostic, Severity
from toolgate.formats.detect import detect_format, validate_path
from toolgate.formats.extension_info.parse import load_extension_info
from toolgate.formats.extension_info.source import ExtensionInfoSource
from toolgate.model import ImplementationKind
from toolgate.model.display import render_display

RunCli = Callable[..., subprocess.CompletedProcess[str]]
FIXTURES = Path(__file__).parent / "fixtures" / "extension_info"
TOOLGATE = Path(sys.executable).parent / "toolgate"
SHOW_MAP = "mynamespace:showMapAtAddressAndZoom"
HELLO = "mynamespace:helloWorld"
CAIRO = {"address": "Cairo", "zoom": 12}
CAIRO_DISPLAY = 'Show Map Of "Cairo" At Zoom Level 12'


def _errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity is Severity.ERROR]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return path


def _manifest(folder: Path, tools: dict[str, Any], name: str = "ext.json") -> Path:
    document = {"ns": "shop", "title": "Shop", "tools": tools}
    return _write(folder, name, json.dumps(document, indent=2))


def _one(diagnostics: list[Diagnostic], field: str) -> Diagnostic:
    found = [d for d in diagnostics if d.field == field]
    assert len(found) == 1, diagnostics
    return found[0]


# -- the seed's examples, through the pipeline -----------------------------------------------------


def test_the_seed_map_tool_loads_with_title_examples_schema_and_tile() -> None:
    with Gateway() as gateway:
        load = gateway.add_source(FIXTURES / "maps" / "maps.json", format="extension-info")
        assert load.diagnostics == []
        tool = gateway.get_tool(SHOW_MAP)
    assert tool.title == "Show Map at Address and Zoom"
    assert tool.display.examples == (
        "Show map of london",
        "Show map of cairo at zoom 12",
        "map of rio zoom 13",
    )
    assert tool.input_schema_dict() == {
        "type": "object",
        "properties": {
            "address": {"type": "string", "description": "the address to display in the map"},
            "zoom": {
                "type": "integer",
                "description": "the zoom level for the map, from 0 to 19, default to 12",
            },
        },
        "additionalProperties": False,
    }
    assert tool.display.ui is not None
    assert [arg.name for arg in tool.display.ui.args] == ["address", "zoom"]
    assert tool.source.format is SourceFormat.EXTENSION_INFO
    assert tool.source.location == str(FIXTURES / "maps" / "maps.json")
    assert tool.kind is ImplementationKind.PYTHON
    # The handler's own declarations (@tool(access="read"), docstring) are kept.
    assert tool.description == "Show a map of a place at a zoom level."
    assert str(tool.side_effect) == "read_only"
    assert render_display(tool, CAIRO) == CAIRO_DISPLAY


def test_the_seed_map_tool_runs_through_the_pipeline() -> None:
    with Gateway() as gateway:
        gateway.add_source(FIXTURES / "maps" / "maps.json", format="extension-info")
        outcome = gateway.call_sync(SHOW_MAP, CAIRO)
        assert outcome.status is CallStatus.OK, outcome.text
        assert outcome.content == {
            "center": "Cairo",
            "zoom": 12,
            "tiles": "https://tiles.example/12/Cairo",
        }
        # Optional fields: "Show map of london" gives no zoom, and the handler's default applies.
        assert gateway.call_sync(SHOW_MAP, {"address": "London"}).content["zoom"] == 12
        # The manifest's schema is enforced: wrong types and undeclared arguments never run.
        wrong = gateway.call_sync(SHOW_MAP, {"address": "Rio", "zoom": "13"})
        assert wrong.code is ErrorCode.INVALID_ARGUMENTS and "/zoom" in wrong.text
        extra = gateway.call_sync(SHOW_MAP, {"address": "Rio", "style": "dark"})
        assert extra.code is ErrorCode.INVALID_ARGUMENTS and "/style" in extra.text
        missing = gateway.call_sync(SHOW_MAP, {"zoom": 3})
        assert missing.code is ErrorCode.TOOL_ERROR and "Which place?" in missing.text


def test_the_seed_hello_world_tool_runs() -> None:
    with Gateway() as gateway:
        load = gateway.add_source(FIXTURES / "hello" / "hello.json", format="extension-info")
        assert load.diagnostics == []
        tool = gateway.get_tool(HELLO)
        assert tool.title == "Hello World"
        assert tool.display.examples == ("Show Hello World", "Say hello")
        assert tool.input_schema_dict() == {
            "type": "object",
            "properties": {},
            "additionalProperties": False,
        }
        # No docstring: the title is what the model reads.
        assert tool.description == "Hello World"
        assert render_display(tool, {}) == "Hello World"
        assert gateway.call_sync(HELLO).content == "Hello World!"


def test_the_simplest_seed_document_loads_with_a_warning_and_no_tools() -> None:
    path = FIXTURES / "simplest" / "simplest.json"
    assert [str(d) for d in ExtensionInfoSource.validate(path)] == [
        f"{path}: /tools: no tools are declared; an extension should have at least one"
    ]
    with Gateway() as gateway:
        load = gateway.add_source(path, format="extension-info")
        assert load.entries == [] and _errors(load.diagnostics) == []


def test_a_tool_folder_implements_a_yaml_manifest() -> None:
    with Gateway() as gateway:
        load = gateway.add_source(FIXTURES / "folder", format="extension-info")
        assert load.diagnostics == []
        tool = gateway.get_tool(HELLO)
        assert tool.kind is ImplementationKind.SCRIPT
        assert tool.source.format is SourceFormat.EXTENSION_INFO
        assert tool.source.location == str(FIXTURES / "folder" / "hello.yaml")
        assert tool.description == "Greet someone by name (or the world)."  # the tool.md body
        assert tool.timeout == 20.0  # from tool.md
        assert tool.output_schema is not None
        assert render_display(tool, {"name": "Ada"}) == 'Say Hello To "Ada"'
        outcome = gateway.call_sync(HELLO, {"name": "Ada"})
        assert outcome.status is CallStatus.OK, outcome.text
        assert outcome.content == {"greeting": "Hello Ada!"}
        assert gateway.call_sync(HELLO).content == {"greeting": "Hello World!"}


def test_formats_are_detected() -> None:
    for path in (
        FIXTURES / "maps" / "maps.json",
        FIXTURES / "simplest" / "simplest.json",
        FIXTURES / "folder" / "hello.yaml",
        FIXTURES / "folder",
    ):
        assert detect_format(path) == "extension-info", path
    with Gateway() as gateway:
        gateway.add_source(FIXTURES / "hello" / "hello.json")
        assert gateway.call_sync(HELLO).content == "Hello World!"


# -- binding ---------------------------------------------------------------------------------------


def test_the_python_option_names_files_and_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = _manifest(
        tmp_path,
        {
            "addToCart": {
                "title": "Add to cart",
                "schema": {
                    "fields": {
                        "item": {"type": "string", "required": True},
                        "quantity": {"type": "integer", "minimum": 1, "default": 1},
                    }
                },
            },
            "empty-cart": {"title": "Empty the cart"},
        },
    )
    _write(
        tmp_path,
        "impl/cart.py",
        """
        from toolgate import tool

        def addToCart(item: str, quantity: int = 1) -> str:
            return f"{quantity} x {item}"

        # "empty-cart" is no Python name: a @tool with the id <ns>:<tool id> binds it.
        @tool(id="shop:empty-cart", approval=False)
        def empty() -> str:
            return "emptied"
    """,
    )
    with Gateway() as gateway:
        load = gateway.add_source(
            manifest, format="extension-info", options={"python": "impl/cart.py"}
        )
        assert load.diagnostics == []
        assert gateway.call_sync("shop:addToCart", {"item": "tea"}).content == "1 x tea"
        assert gateway.call_sync("shop:empty-cart").content == "emptied"
        # "required": true is enforced by the schema.
        assert gateway.call_sync("shop:addToCart", {}).code is ErrorCode.INVALID_ARGUMENTS

    monkeypatch.syspath_prepend(str(tmp_path / "impl"))
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info", options={"python": ["cart"]})
        assert load.diagnostics == []
        assert gateway.call_sync("shop:addToCart", {"item": "jam", "quantity": 2}).ok


def test_options_are_checked(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {})
    with Gateway() as gateway:
        with pytest.raises(ConfigError, match="unknown option 'pyhton'; expected python"):
            gateway.add_source(manifest, format="extension-info", options={"pyhton": "x.py"})
        with pytest.raises(ConfigError, match=r"options\.python must be"):
            gateway.add_source(manifest, format="extension-info", options={"python": 3})
        with pytest.raises(ConfigError, match=r"options\.tool_folders must be"):
            gateway.add_source(manifest, format="extension-info", options={"tool_folders": []})


def test_a_tool_without_implementation_does_not_load_and_the_others_do(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path, {"helloWorld": {"title": "Hello World"}, "bye": {"title": "Bye"}}
    )
    _write(tmp_path, "ext.py", "def bye() -> str:\n    return 'bye'\n")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        problem = _one(load.diagnostics, "/tools/helloWorld")
        assert problem.path == str(manifest)
        assert problem.severity is Severity.ERROR
        assert "has no implementation: define a function helloWorld in" in problem.message
        assert f"or add a tool folder {tmp_path / 'helloWorld'}" in problem.message
        assert [entry.tool.id for entry in gateway.entries()] == ["shop:bye"]
        assert gateway.call_sync("shop:helloWorld").code is ErrorCode.TOOL_NOT_FOUND
        assert problem in gateway.diagnostics()


def test_the_manifest_alone_is_a_diagnostic(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hello World"}})
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        assert load.entries == []
        message = _one(load.diagnostics, "/tools/helloWorld").message
        assert f"define a function helloWorld in {tmp_path / 'ext.py'} (or in the file" in message
    # validate says so too, as a warning: the source's options may still name one.
    warning = _one(ExtensionInfoSource.validate(manifest), "/tools/helloWorld")
    assert warning.severity is Severity.WARNING
    assert "no implementation beside the manifest (no ext.py, no tool folder helloWorld/)" in (
        warning.message
    )


def test_a_tool_implemented_twice_does_not_load(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hello World"}})
    _write(tmp_path, "ext.py", "def helloWorld() -> str:\n    return 'hi'\n")
    shutil.copytree(FIXTURES / "folder" / "helloWorld", tmp_path / "helloWorld")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        message = _one(load.diagnostics, "/tools/helloWorld").message
        assert "implemented more than once" in message
        assert f"ext.py:helloWorld; the tool folder {tmp_path / 'helloWorld'}" in message
        assert load.entries == []


def test_a_python_file_that_fails_to_import_is_a_diagnostic(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hello World"}})
    handlers = _write(tmp_path, "ext.py", "import no_such_module_here\n")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
    [module_problem] = [d for d in load.diagnostics if d.path == str(handlers)]
    assert "ModuleNotFoundError" in module_problem.message and "no_such_module_here" in (
        module_problem.message
    )
    tool_problem = _one(load.diagnostics, "/tools/helloWorld")
    assert f"(the Python code in {handlers} did not load)" in tool_problem.message


def test_a_handler_must_be_a_function(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hello World"}})
    _write(tmp_path, "ext.py", "helloWorld = 'hello'\n")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
    message = _one(load.diagnostics, "/tools/helloWorld").message
    assert "ext.py:helloWorld is not a function or a @tool function (it is a str)" in message


def test_a_module_that_exits_does_not_end_the_gateway(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hello World"}})
    _write(tmp_path, "ext.py", "import sys\nsys.exit(3)\n")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
    assert any("SystemExit: 3" in d.message for d in load.diagnostics)


HANDLER_CASES = {
    "a field the handler does not take": (
        {"city": {"type": "string"}, "days": {"type": "integer"}},
        "def forecast(city: str | None = None) -> str: ...",
        "/tools/forecast/schema/fields/days",
        "the handler ext.py:forecast has no input 'days': every field must be one of its inputs",
    ),
    "a type the handler does not accept": (
        {"days": {"type": "number"}},
        "def forecast(days: int = 1) -> str: ...",
        "/tools/forecast/schema/fields/days",
        "the field is a number here, but the handler ext.py:forecast takes integer for 'days'",
    ),
    "a required input the field leaves optional": (
        {"city": {"type": "string"}},
        "def forecast(city: str) -> str: ...",
        "/tools/forecast/schema/fields/city",
        "requires 'city', but the field is optional: add \"required\": true to the field",
    ),
    "a required input that is no field": (
        {},
        "def forecast(city: str) -> str: ...",
        "/tools/forecast/schema/fields",
        "requires 'city', which is not a field, so no call could give it",
    ),
}


@pytest.mark.parametrize("case", list(HANDLER_CASES), ids=str)
def test_a_handler_must_agree_with_the_fields(tmp_path: Path, case: str) -> None:
    fields, handler, field, expected = HANDLER_CASES[case]
    manifest = _manifest(
        tmp_path, {"forecast": {"title": "Forecast", "schema": {"fields": fields}}}
    )
    _write(tmp_path, "ext.py", handler + "\n")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        problem = _one(load.diagnostics, field)
        assert problem.path == str(manifest) and problem.severity is Severity.ERROR
        assert expected in problem.message.replace(str(tmp_path) + "/", "")
        assert "shop:forecast" not in gateway.registry


def test_compatible_handlers_load(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path,
        {
            "forecast": {
                "title": "Forecast",
                "schema": {
                    "fields": {
                        "city": {"type": "string", "required": True},
                        "days": {"type": "integer"},
                        "unit": {"type": "string", "enum": ["c", "f"]},
                    }
                },
            }
        },
    )
    _write(
        tmp_path,
        "ext.py",
        """
        import enum

        from toolgate import ToolContext


        class Unit(enum.Enum):
            C = "c"
            F = "f"


        def forecast(
            ctx: ToolContext, city: str, days: float = 1, unit: Unit = Unit.C, verbose: bool = False
        ) -> str:
            return f"{city} {days} {unit.value} {verbose} {ctx.tool_id}"
    """,
    )
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        # An optional input that is no field loads, with a warning: it keeps its default.
        [warning] = load.diagnostics
        assert (
            warning.severity is Severity.WARNING
            and warning.field == "/tools/forecast/schema/fields"
        )
        assert "takes 'verbose', which is not a field, so it always keeps its default" in (
            warning.message
        )
        outcome = gateway.call_sync("shop:forecast", {"city": "Oslo", "days": 2, "unit": "f"})
        assert outcome.content == "Oslo 2.0 f False shop:forecast"  # days: float


def test_a_tool_folder_must_agree_and_carry_the_tool_id(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path,
        {"helloWorld": {"title": "Hi", "schema": {"fields": {"name": {"type": "integer"}}}}},
    )
    shutil.copytree(FIXTURES / "folder" / "helloWorld", tmp_path / "helloWorld")
    problem = _one(ExtensionInfoSource.validate(manifest), "/tools/helloWorld/schema/fields/name")
    assert f"the tool folder {tmp_path / 'helloWorld'} takes string for 'name'" in problem.message

    renamed = tmp_path / "helloWorld" / "tool.md"
    renamed.write_text(renamed.read_text().replace("name: helloWorld", "name: hello"))
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hi"}})
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        name = _one(load.diagnostics, "name")
        assert name.path == str(renamed)
        assert "so its name must be 'helloWorld', not 'hello'" in name.message
        assert load.entries == []


def test_a_broken_tool_folder_is_reported_where_it_is(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hi"}})
    shutil.copytree(FIXTURES / "folder" / "helloWorld", tmp_path / "helloWorld")
    (tmp_path / "helloWorld" / "hello.py").unlink()
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
    script = _one(load.diagnostics, "script")
    assert script.path == str(tmp_path / "helloWorld" / "tool.md")
    assert "does not exist" in script.message
    assert "does not load" in _one(load.diagnostics, "/tools/helloWorld").message


def test_tool_folders_option_and_script_availability(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hi"}})
    shutil.copytree(FIXTURES / "folder" / "helloWorld", tmp_path / "impl" / "helloWorld")
    source = ExtensionInfoSource.open(manifest, _context(), {"tool_folders": "impl"})
    with Gateway() as gateway:
        load = gateway.add_source(source)
        [entry] = load.entries
        assert entry.unavailable_reason == "no python here"
        assert gateway.call_sync(HELLO.replace("mynamespace", "shop")).code is (
            ErrorCode.UNAVAILABLE
        )


def _context() -> Any:
    from toolgate.formats.declarations import SourceContext

    return SourceContext(script_availability=lambda tool: "no python here")


def test_a_folder_of_manifests_loads_each_and_skips_other_files(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "maps" / "maps.json", tmp_path / "maps.json")
    shutil.copy(FIXTURES / "maps" / "maps.py", tmp_path / "maps.py")
    shutil.copy(FIXTURES / "hello" / "hello.json", tmp_path / "hello.json")
    shutil.copy(FIXTURES / "hello" / "hello.py", tmp_path / "hello.py")
    _write(tmp_path, "notes.yaml", "just: some settings\n")
    with Gateway() as gateway:
        load = gateway.add_source(tmp_path, format="extension-info")
        assert load.diagnostics == []
        assert sorted(entry.tool.id for entry in load.entries) == [HELLO, SHOW_MAP]
    empty = tmp_path / "empty"
    empty.mkdir()
    [problem] = ExtensionInfoSource.validate(empty)
    assert problem.path == str(empty) and "no Extension Info manifest in this folder" in (
        problem.message
    )


def test_reloading_sees_edited_code(tmp_path: Path) -> None:
    manifest = _manifest(tmp_path, {"helloWorld": {"title": "Hi"}})
    handlers = _write(tmp_path, "ext.py", "def helloWorld() -> str:\n    return 'v1'\n")
    with Gateway() as gateway:
        gateway.add_source(manifest, format="extension-info")
        assert gateway.call_sync("shop:helloWorld").content == "v1"
        handlers.write_text("def helloWorld() -> str:\n    return 'v2'\n", encoding="utf-8")
        [source] = gateway.declarations.sources
        gateway.declarations.reload(source)
        assert gateway.call_sync("shop:helloWorld").content == "v2"


# -- broken manifests ------------------------------------------------------------------------------

BROKEN: dict[str, tuple[str, str, str | None, str]] = {
    # name: (file name, content, JSON pointer, what the message says)
    "ui arg that is not a field": (
        "ext.json",
        json.dumps(
            {
                "ns": "maps",
                "title": "Maps",
                "tools": {
                    "show": {
                        "title": "Show",
                        "schema": {"fields": {"zoom": {"type": "integer"}}},
                        "ui": {
                            "prefix": "Show Map",
                            "args": {"zoom": {}, "adress": {"prefix": "Of"}},
                        },
                    }
                },
            }
        ),
        "/tools/show/ui/args/adress",
        "'adress' is not a field of schema.fields; ui.args keys must name fields (fields: zoom)",
    ),
    "missing ns": (
        "ext.yaml",
        "title: Maps\ntools: {}\n",
        "/ns",
        "'ns' is required: the extension's stable identifier",
    ),
    "ns with white space": (
        "ext.yaml",
        "ns: my maps\ntitle: Maps\ntools: {}\n",
        "/ns",
        "'my maps' is not a valid namespace",
    ),
    "tools as a list": (
        "ext.yaml",
        "ns: maps\ntitle: Maps\ntools: [show]\n",
        "/tools",
        "'tools' must be an object mapping each tool id to its tool, got array",
    ),
    "tool id with a colon": (
        "ext.yaml",
        "ns: maps\ntitle: Maps\ntools:\n  'a:b': {title: AB}\n",
        "/tools/a:b",
        "'a:b' is not a valid tool id",
    ),
    "tool id with a slash": (
        "ext.yaml",
        "ns: maps\ntitle: Maps\ntools:\n  a/b: {title: AB}\n",
        "/tools/a~1b",
        "'a/b' is not a valid tool id",
    ),
    "tool id that climbs out of the folder": (
        "ext.yaml",
        "ns: maps\ntitle: Maps\ntools:\n  '..': {title: Up}\n",
        "/tools/..",
        "'..' is not a valid tool id",
    ),
    "unsupported field type": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        when: {type: date}\n",
        "/tools/show/schema/fields/when/type",
        "'type' must be one of the supported types, got string 'date'; use one of: string, "
        "integer, number, boolean, array, object",
    ),
    "field without a type": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        when: {description: the day}\n",
        "/tools/show/schema/fields/when/type",
        "'type' is required",
    ),
    "keyword outside the subset": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        zoom: {type: integer, maxLength: 2}\n",
        "/tools/show/schema/fields/zoom/maxLength",
        "'maxLength' is not part of the supported JSON Schema subset for an integer field",
    ),
    "required that is not a boolean": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        zoom: {type: integer, required: 'yes'}\n",
        "/tools/show/schema/fields/zoom/required",
        "'required' must be true or false, got string 'yes'",
    ),
    "default of the wrong type": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        zoom: {type: integer, default: twelve}\n",
        "/tools/show/schema/fields/zoom/default",
        "'default' must be an integer like the field, got string 'twelve'",
    ),
    "enum value of the wrong type": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        style: {type: string, enum: [dark, 3]}\n",
        "/tools/show/schema/fields/style/enum/1",
        "'enum' values must be strings, got number 3",
    ),
    "pattern that is no regex": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        code: {type: string, pattern: '('}\n",
        "/tools/show/schema/fields/code/pattern",
        "'pattern' is not a regular expression the gateway can use",
    ),
    "nested items without a type": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show:\n    title: S\n    schema:\n      fields:\n"
        "        tags: {type: array, items: {}}\n",
        "/tools/show/schema/fields/tags/items/type",
        "'type' is required",
    ),
    "examples that are not a list": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show: {title: S, examples: show a map}\n",
        "/tools/show/examples",
        "'examples' must be a list of prompts, got string 'show a map'",
    ),
    "an empty example": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show: {title: S, examples: [ok, '']}\n",
        "/tools/show/examples/1",
        "an example must be a non-empty string",
    ),
    "ui prefix over two lines": (
        "ext.yaml",
        'ns: maps\ntitle: M\ntools:\n  show: {title: S, ui: {prefix: "Show\\nMap"}}\n',
        "/tools/show/ui/prefix",
        "must be one line of printable text",
    ),
    "ui args as a list": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show: {title: S, ui: {args: [zoom]}}\n",
        "/tools/show/ui/args",
        "'ui.args' must map field names to {prefix, suffix}, got array",
    ),
    "tool that is not an object": (
        "ext.yaml",
        "ns: maps\ntitle: M\ntools:\n  show: Show a map\n",
        "/tools/show",
        "a tool must be an object (title, examples, schema, ui), got string 'Show a map'",
    ),
    "invalid JSON": (
        "ext.json",
        '{"ns": "maps", "tools": {,}}',
        None,
        "invalid JSON: line 1, column 26: Expecting property name enclosed in double quotes",
    ),
    "duplicate JSON key": (
        "ext.json",
        '{"ns": "maps", "ns": "other", "tools": {}}',
        None,
        "invalid JSON: duplicate key 'ns'",
    ),
    "invalid YAML": (
        "ext.yaml",
        "ns: maps\ntools: {show: [}\n",
        None,
        "invalid YAML: line 2",
    ),
    "not an object": (
        "ext.yaml",
        "- ns: maps\n",
        None,
        "expected an object with ns, title and tools, got array",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN), ids=str)
def test_broken_manifests_get_precise_diagnostics(tmp_path: Path, case: str) -> None:
    name, content, field, expected = BROKEN[case]
    path = _write(tmp_path, name, content)
    diagnostics = list(load_extension_info(path).diagnostics)
    matching = [d for d in diagnostics if d.field == field and expected in d.message]
    assert matching, diagnostics
    assert all(d.path == str(path) for d in matching)
    assert matching[0].severity is Severity.ERROR
    # toolgate validate's function reports the same, naming the format.
    assert validate_path(path, "extension-info") == ("extension-info", diagnostics)


def test_one_broken_tool_does_not_stop_the_others(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path,
        {"good": {"title": "Good"}, "bad": {"title": "Bad", "ui": {"args": {"nope": {}}}}},
    )
    _write(tmp_path, "ext.py", "def good() -> str:\n    return 'ok'\n\ndef bad() -> str: ...\n")
    with Gateway() as gateway:
        load = gateway.add_source(manifest, format="extension-info")
        assert [entry.tool.id for entry in load.entries] == ["shop:good"]
        assert _one(load.diagnostics, "/tools/bad/ui/args/nope").severity is Severity.ERROR


def test_unknown_fields_are_warnings_with_a_suggestion(tmp_path: Path) -> None:
    path = _write(tmp_path, "ext.yaml", "ns: m\ntitle: M\ntools:\n  t: {titel: T}\n")
    warning = _one(list(load_extension_info(path).diagnostics), "/tools/t/titel")
    assert warning.severity is Severity.WARNING
    assert warning.message == (
        "unknown field 'titel' (ignored); expected one of: title, examples, schema, ui. "
        "Did you mean 'title'?"
    )


def test_nested_fields_become_json_schema(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "ext.yaml",
        """
        ns: trips
        title: Trips
        tools:
          plan:
            title: Plan a trip
            schema:
              fields:
                stops:
                  type: array
                  minItems: 1
                  items: {type: string, minLength: 1}
                traveller:
                  type: object
                  properties:
                    name: {type: string, required: true}
                    age: {type: integer, minimum: 0}
    """,
    )
    load = load_extension_info(path)
    assert load.diagnostics == ()
    assert load.manifest is not None
    [plan] = load.manifest.tools
    assert plan.input_schema == {
        "type": "object",
        "properties": {
            "stops": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
            "traveller": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "age": {"type": "integer", "minimum": 0},
                },
                "required": ["name"],
                "additionalProperties": False,
            },
        },
        "additionalProperties": False,
    }


# -- exporters -------------------------------------------------------------------------------------


def _typed_dict(tp: Any, value: Any) -> None:
    pydantic.TypeAdapter(tp).validate_python(value, strict=True)


def test_examples_and_the_tile_are_exported_to_mcp_only_and_the_sdks_accept_every_export() -> None:
    with Gateway() as gateway:
        gateway.add_source(FIXTURES / "maps" / "maps.json", format="extension-info")
        tool = gateway.get_tool(SHOW_MAP)
    exported = {format: export_tool(tool, format) for format in EXPORT_FORMATS}
    entry = exported["mcp"]
    parsed = mcp_types.Tool.model_validate(entry)
    assert parsed.meta == {
        EXAMPLES_META_KEY: list(tool.display.examples),
        UI_META_KEY: {
            "prefix": "Show Map",
            "args": [
                {"name": "address", "prefix": "Of", "suffix": None},
                {"name": "zoom", "prefix": "At Zoom Level", "suffix": None},
            ],
            "suffix": None,
        },
    }
    assert parsed.model_dump(by_alias=True, exclude_unset=True, mode="json") == entry
    assert entry["title"] == "Show Map at Address and Zoom"
    # The model providers have no place for prompt examples: not in any field, nor the text.
    for format in ("openai", "openai-responses", "anthropic", "gemini"):
        assert "map of rio" not in json.dumps(exported[format]), format
    _typed_dict(openai_chat.ChatCompletionFunctionToolParam, exported["openai"])
    _typed_dict(anthropic_types.ToolParam, exported["anthropic"])
    gemini_types.FunctionDeclaration.model_validate(exported["gemini"])


# -- the command line ------------------------------------------------------------------------------

CONFIG = """\
sources:
  - path: ./maps/maps.json
    format: extension-info
  - path: ./hello
  - path: ./shop/shop.yaml
    options:
      python: ./impl/postcards.py
"""
SHOP = """\
ns: shop
title: Postcards
tools:
  sendPostcard:
    title: Send a postcard
    schema:
      fields:
        to: {type: string, required: true, description: who gets it}
        text: {type: string, required: true}
    ui:
      prefix: Send a Postcard
      args:
        to: {prefix: To}
        text: {prefix: Saying}
    examples: [send a postcard to Ada]
"""
POSTCARDS = '''
from toolgate import tool


@tool(effect="communication", build_confirmation=lambda args: {"title": "Send it?", "facts": []})
def sendPostcard(to: str, text: str) -> str:
    """Send a postcard."""
    return f"sent to {to}"
'''


@pytest.fixture
def configured(project: Path) -> Path:
    """A project with the seed's extensions, and a postcard extension that needs approval."""
    shutil.copytree(FIXTURES / "maps", project / "maps")
    shutil.copytree(FIXTURES / "hello", project / "hello")
    _write(project, "shop/shop.yaml", SHOP)
    _write(project, "shop/impl/postcards.py", POSTCARDS)
    _write(project, "toolgate.yaml", CONFIG)
    return project


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


@pytest.mark.slow
def test_cli_validate(run_cli: RunCli, configured: Path) -> None:
    out = _ok(run_cli("validate", "maps/maps.json"))
    assert "maps/maps.json: extension-info declaration" in out
    assert "OK: no problems found." in out
    out = _ok(run_cli("validate", "shop/shop.yaml", "--format", "extension-info"))
    assert "no implementation beside the manifest (no shop.py, no tool folder sendPostcard/)" in out
    broken = configured / "maps" / "maps.json"
    broken.write_text(broken.read_text().replace('"zoom": { "prefix"', '"zom": { "prefix"'))
    result = run_cli("validate", "maps/maps.json")
    assert result.returncode == 1
    assert (
        "error: maps/maps.json: /tools/showMapAtAddressAndZoom/ui/args/zom: 'zom' is not a field "
        "of schema.fields; ui.args keys must name fields (fields: address, zoom)"
    ) in result.stdout
    assert "does not load (1 error above)" in result.stderr


@pytest.mark.slow
def test_cli_tools_list_and_show(run_cli: RunCli, configured: Path) -> None:
    out = _ok(run_cli("tools", "list"))
    # Long ids fold in the ID column; each row still reads "python  extension-info  available".
    assert "shop:sendPostcard" in out
    assert len(re.findall(r"\bpython\s+extension-info\s+available\b", out)) == 3, out
    assert "3 tools" in out and "problem" not in out
    rows = {row["id"]: row for row in json.loads(_ok(run_cli("tools", "list", "--json")))}
    assert rows[SHOW_MAP]["source_format"] == "extension-info"
    assert rows[SHOW_MAP]["source"] == str(configured / "maps" / "maps.json")

    shown = _ok(run_cli("tools", "show", SHOW_MAP))
    assert re.search(r"Tile\s+Show Map Of <address> At Zoom Level <zoom>", shown)
    assert "Examples" in shown and "• map of rio zoom 13" in shown
    details = json.loads(_ok(run_cli("tools", "show", SHOW_MAP, "--json")))
    assert details["examples"] == [
        "Show map of london",
        "Show map of cairo at zoom 12",
        "map of rio zoom 13",
    ]
    assert details["ui"]["args"][0] == {"name": "address", "prefix": "Of", "suffix": None}


@pytest.mark.slow
def test_cli_call_shows_the_display_before_the_result(run_cli: RunCli, configured: Path) -> None:
    result = run_cli("call", SHOW_MAP, "--args", json.dumps(CAIRO))
    out = _ok(result)
    assert json.loads(out)["center"] == "Cairo"  # stdout: exactly what the model reads
    assert result.stderr.splitlines()[0] == f"▸ {CAIRO_DISPLAY}"
    hello = run_cli("call", HELLO)
    assert _ok(hello) == "Hello World!\n"
    assert hello.stderr == "▸ Hello World\n"
    # A hostile argument cannot reach the terminal through the display.
    hostile = run_cli("call", SHOW_MAP, "--args", json.dumps({"address": "x\x1b[2J\ny"}))
    assert hostile.stderr.splitlines()[0] == '▸ Show Map Of "x\\x1b[2J\\ny"'
    # JSON mode prints no display line (stderr stays empty for machines).
    as_json = run_cli("call", SHOW_MAP, "--json", "--args", json.dumps(CAIRO))
    assert json.loads(_ok(as_json))["status"] == "ok" and as_json.stderr == ""


@pytest.mark.slow
def test_cli_pending_approval_and_approvals_show_the_display(
    run_cli: RunCli, configured: Path
) -> None:
    args = json.dumps({"to": "Ada", "text": "Hi!"})
    display = 'Send a Postcard To "Ada" Saying "Hi!"'
    pending = run_cli("call", "shop:sendPostcard", "--args", args)
    assert pending.returncode == 4, pending.stdout + pending.stderr
    assert re.search(rf"Call\s+{re.escape(display)}", pending.stdout)
    request_id = re.search(r"apr_[0-9a-f]{32}", pending.stdout)
    assert request_id is not None
    listed = _ok(run_cli("approvals", "list"))
    assert "Send it?" in listed
    assert f"Calls:\n  {request_id.group(0)}  {display}\n" in listed
    [entry] = json.loads(_ok(run_cli("approvals", "list", "--json")))
    assert entry["display"] == display
    shown = _ok(run_cli("approvals", "show", request_id.group(0)))
    assert re.search(rf"Call\s+{re.escape(display)}", shown)
    assert (
        json.loads(_ok(run_cli("approvals", "show", request_id.group(0), "--json")))["display"]
        == display
    )


@pytest.mark.slow
def test_the_terminal_prompt_shows_the_display(configured: Path, toolgate_home: Path) -> None:
    pexpect = pytest.importorskip("pexpect")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(TOOLGATE_HOME=str(toolgate_home), TERM="dumb", PYTHONIOENCODING="utf-8")
    child = pexpect.spawn(
        str(TOOLGATE),
        ["call", "shop:sendPostcard", "--args", json.dumps({"to": "Ada", "text": "x\x1b[31m"})],
        cwd=str(configured),
        env=env,
        encoding="utf-8",
        dimensions=(50, 140),
        timeout=60,
    )
    child.expect(r"\[o\] Allow once  \[always\] Always allow  \[d\] Deny")
    shown: str = child.before
    display = 'Send a Postcard To "Ada" Saying "x\\x1b[31m"'
    assert f"▸ {display}" in shown  # the line printed as the call starts
    assert re.search(rf"Call\s+{re.escape(display)}", shown)  # and in the confirmation
    assert "\x1b[31m" not in shown
    child.sendline("o")
    child.expect(pexpect.EOF)
    out: str = child.before
    child.close()
    assert child.exitstatus == 0, out
    assert "sent to Ada" in out


# -- the README section -----------------------------------------------------------------------


def _doc_block(marker: str) -> str:
    return doc_block(f"extension-info:{marker}")


@pytest.mark.slow
def test_the_readme_example_works_as_written(run_cli: RunCli, project: Path) -> None:
    _write(project, "extensions/maps/maps.json", _doc_block("maps.json"))
    _write(project, "extensions/maps/maps.py", _doc_block("maps.py"))
    _write(project, "toolgate.yaml", _doc_block("toolgate.yaml"))
    commands = [
        shlex.split(line.split("  #")[0]) for line in _doc_block("commands").splitlines() if line
    ]
    assert [command[:2] for command in commands] == [
        ["toolgate", "validate"],
        ["toolgate", "tools"],
        ["toolgate", "call"],
    ]
    validated, shown, called = (run_cli(*command[1:]) for command in commands)
    assert "extension-info declaration" in _ok(validated) and "OK" in validated.stdout
    assert "Show Map Of <address> At Zoom Level <zoom>" in _ok(shown)
    assert "map of rio zoom 13" in shown.stdout
    assert _ok(called) == '{"center": "Cairo", "zoom": 12}\n'
    assert called.stderr == f"▸ {CAIRO_DISPLAY}\n"
