"""The one-line display of a call (``toolgate.model.display.render_display``): the Extension Info
tile rules, the default display of tools without a tile, and hostile values."""

from __future__ import annotations

import io
import re
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from toolgate import DisplaySpec, TileArg, TileDisplay, Tool, tool
from toolgate.cli.prompt import TerminalApprover, print_confirmation
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import ApprovalRequest
from toolgate.model.display import MAX_DISPLAY_CHARS, MAX_VALUE_CHARS, render_display, safe_text

#: The seed's showMapAtAddressAndZoom tile, built directly on the model.
SHOW_MAP = Tool(
    id="mynamespace:showMapAtAddressAndZoom",
    title="Show Map at Address and Zoom",
    description="Show a map.",
    input_schema={
        "type": "object",
        "properties": {"address": {"type": "string"}, "zoom": {"type": "integer"}},
    },
    display=DisplaySpec(
        ui=TileDisplay(
            prefix="Show Map",
            args=(TileArg("address", prefix="Of"), TileArg("zoom", prefix="At Zoom Level")),
        )
    ),
)
PLAIN = Tool(
    id="tools:append",
    title="Append a line",
    description="Append one line.",
    input_schema={"properties": {"line": {"type": "string"}, "count": {"type": "integer"}}},
)
_UNSAFE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _with_ui(ui: TileDisplay, properties: dict[str, Any] | None = None) -> Tool:
    return Tool(
        id="t:tile",
        title="Tile",
        description="A tile.",
        input_schema={"properties": properties or {}},
        display=DisplaySpec(ui=ui),
    )


def _printable_line(text: str) -> bool:
    return all(unicodedata.category(char) not in _UNSAFE for char in text)


# -- the seed's rules ----------------------------------------------------------------------------


def test_the_seed_example_renders_exactly() -> None:
    assert render_display(SHOW_MAP, {"address": "Cairo", "zoom": 12}) == (
        'Show Map Of "Cairo" At Zoom Level 12'
    )


def test_argument_order_is_the_order_of_ui_args_not_of_the_call() -> None:
    assert render_display(SHOW_MAP, {"zoom": 3, "address": "Rio"}) == (
        'Show Map Of "Rio" At Zoom Level 3'
    )
    swapped = _with_ui(
        TileDisplay(prefix="Map", args=(TileArg("zoom", prefix="zoom"), TileArg("address"))),
    )
    assert render_display(swapped, {"address": "Rio", "zoom": 3}) == 'Map zoom 3 "Rio"'


def test_missing_and_null_arguments_are_skipped_with_their_prefix_and_suffix() -> None:
    assert render_display(SHOW_MAP, {"zoom": 12}) == "Show Map At Zoom Level 12"
    assert render_display(SHOW_MAP, {"address": "Oslo", "zoom": None}) == 'Show Map Of "Oslo"'
    assert render_display(SHOW_MAP, {}) == "Show Map"
    assert render_display(SHOW_MAP) == "Show Map"


def test_suffixes_of_the_tile_and_of_each_argument() -> None:
    timer = _with_ui(
        TileDisplay(
            prefix="Set a timer",
            args=(TileArg("minutes", prefix="for", suffix="minutes"), TileArg("label", "named")),
            suffix="now",
        )
    )
    assert render_display(timer, {"minutes": 5, "label": "tea"}) == (
        'Set a timer for 5 minutes named "tea" now'
    )
    assert render_display(timer, {"label": "tea"}) == 'Set a timer named "tea" now'


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("Cairo", '"Cairo"'),
        ("", '""'),
        ('say "hi" \\ bye', '"say \\"hi\\" \\\\ bye"'),
        (12, "12"),
        (-3, "-3"),
        (0.5, "0.5"),
        (True, "true"),
        (False, "false"),
        (["a", 1, None], '["a", 1, null]'),
        ({"k": [1, 2]}, '{"k": [1, 2]}'),
        (float("inf"), "Infinity"),
    ],
    ids=repr,
)
def test_values(value: Any, shown: str) -> None:
    tile = _with_ui(TileDisplay(prefix="Use", args=(TileArg("v"),)))
    assert render_display(tile, {"v": value}) == f"Use {shown}"


def test_frozen_arguments_render_like_plain_ones() -> None:
    # Approval requests hold their arguments deeply frozen (mapping proxies and tuples).
    request = _request({"address": ["a", {"b": 1}]})
    assert render_display(SHOW_MAP, request.arguments) == 'Show Map Of ["a", {"b": 1}]'


def test_a_tile_with_nothing_to_show_falls_back_to_the_default_display() -> None:
    only_args = _with_ui(TileDisplay(args=(TileArg("x", prefix="with"),)), {"y": {}})
    assert render_display(only_args, {"x": 1}) == "with 1"
    assert render_display(only_args, {"y": 2}) == "Tile (y: 2)"


# -- the default display -------------------------------------------------------------------------


def test_default_display_is_the_title_and_the_arguments_in_schema_order() -> None:
    assert render_display(PLAIN, {"count": 2, "line": "one"}) == (
        'Append a line (line: "one", count: 2)'
    )
    # Arguments the schema does not declare come last, as given; null ones are skipped.
    assert render_display(PLAIN, {"extra": True, "line": "x", "count": None}) == (
        'Append a line (line: "x", extra: true)'
    )
    assert render_display(PLAIN, {}) == "Append a line"


def test_default_display_without_a_title_uses_the_name() -> None:
    untitled = Tool(id="ns:do-it", description="Do it.", input_schema={"type": "object"})
    assert render_display(untitled, {"a": 1}) == "do-it (a: 1)"


def test_every_kind_of_tool_has_a_display(tmp_path: Path) -> None:
    @tool(namespace="demo", title="Add numbers")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @tool(namespace="demo", ui={"prefix": "Say", "args": {"word": {"suffix": "aloud"}}})
    def say(word: str) -> str:
        """Say a word."""
        return word

    assert render_display(add.tool, {"a": 2, "b": 40}) == "Add numbers (a: 2, b: 40)"
    assert render_display(say.tool, {"word": "hi"}) == 'Say "hi" aloud'

    folder = tmp_path / "greet"
    folder.mkdir()
    (folder / "greet.py").write_text("print('{}')\n", encoding="utf-8")
    (folder / "tool.md").write_text(
        "---\nname: greet\nscript: greet.py\nruntime: python\n"
        "inputSchema: {type: object, properties: {name: {type: string}}}\n---\nGreet.\n",
        encoding="utf-8",
    )
    script_tool = load_tool_folder(folder).tool
    assert script_tool is not None
    assert render_display(script_tool, {"name": "Ada"}) == 'greet (name: "Ada")'


# -- hostile values ------------------------------------------------------------------------------

HOSTILE = [
    "\x1b[2J\x1b[31mred",  # clear the screen, recolour
    "line one\nApproval: granted",  # a fake second line
    "ok\rrisk: low",  # carriage return overwrites the line
    "\u202eevil\u202c",  # bidirectional override
    "zero\u200bwidth",
    "csi\x9b31m",  # the one-byte C1 control sequence introducer
    "bell\x07",
    "lone \ud800 surrogate",
    "sep\u2028arator",
    "tag\U000e0041",
]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_control_and_format_characters_are_escaped_visibly(value: str) -> None:
    for tile in (SHOW_MAP, PLAIN):
        shown = render_display(tile, {"address": value, "line": value})
        assert _printable_line(shown), repr(shown)
        assert "\\" in shown  # escaped where it was, not silently removed
        shown.encode("utf-8")  # a lone surrogate would fail here


def test_escapes_are_readable() -> None:
    shown = render_display(SHOW_MAP, {"address": "a\nb\x1b[0m\u202e"})
    assert shown == 'Show Map Of "a\\nb\\x1b[0m\\u202e"'


def test_hostile_argument_names_and_tile_texts_are_escaped_too() -> None:
    assert render_display(PLAIN, {"\x1b[31mkey\n": 1}) == "Append a line (\\x1b[31mkey\\n: 1)"
    sneaky = _with_ui(TileDisplay(prefix="Run\x1b]0;title\x07", args=(TileArg("x", "\n"),)))
    shown = render_display(sneaky, {"x": 1})
    assert shown == "Run\\x1b]0;title\\x07 \\n 1"


@pytest.mark.slow
def test_values_and_the_line_are_bounded() -> None:
    huge = "x" * 10_000_000
    shown = render_display(SHOW_MAP, {"address": huge, "zoom": 12})
    value = shown.removeprefix("Show Map Of ").removesuffix(" At Zoom Level 12")
    assert len(value) == MAX_VALUE_CHARS
    assert value.startswith('"x') and value.endswith('…"')
    many = {f"arg{i}": "y" * 50 for i in range(100)}
    line = render_display(PLAIN, many)
    assert len(line) == MAX_DISPLAY_CHARS and line.endswith("…")
    assert len(render_display(SHOW_MAP, {"address": "Cairo"}, max_length=12)) == 12
    # An escape is never cut in half: the cut falls before it.
    escapes = render_display(SHOW_MAP, {"address": "\x1b" * 100})
    assert escapes.endswith('\\x1b…"')
    assert len(render_display(SHOW_MAP, {"address": [list(range(10_000))]})) < MAX_DISPLAY_CHARS
    assert render_display(SHOW_MAP, {"address": 10**5000}) == "Show Map Of …"


def test_safe_text() -> None:
    assert safe_text("plain ünïcode") == "plain ünïcode"
    assert safe_text("a\tb\x00") == "a\\tb\\x00"
    assert safe_text("abcdef", 4) == "abc…"


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    value=st.one_of(
        st.text(),
        st.integers(),
        st.floats(),
        st.booleans(),
        st.none(),
        st.lists(st.text(max_size=20), max_size=5),
        st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=5),
    ),
    key=st.text(max_size=30),
)
def test_any_value_gives_one_bounded_printable_line(value: Any, key: str) -> None:
    for target in (SHOW_MAP, PLAIN):
        shown = render_display(target, {"address": value, key: value})
        assert _printable_line(shown)
        assert 0 < len(shown) <= MAX_DISPLAY_CHARS
        shown.encode("utf-8")


# -- where it is shown ---------------------------------------------------------------------------


def _request(arguments: dict[str, Any], display: str | None = None) -> ApprovalRequest:
    now = time.time()
    return ApprovalRequest(
        id="apr_" + "0" * 32,
        tool_id=SHOW_MAP.id,
        title="Show a map",
        risk="low",
        facts=(("Address", "Cairo"),),
        arguments=arguments,
        arguments_digest="d",
        definition_hash="h",
        created_at=now,
        expires_at=now + 300,
        display=display,
    )


def _screen() -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, width=120, color_system=None), screen


def test_the_confirmation_shows_the_display() -> None:
    console, screen = _screen()
    arguments = {"address": "Cairo", "zoom": 12}
    print_confirmation(_request(arguments), console, display=render_display(SHOW_MAP, arguments))
    assert re.search(r'Call\s+Show Map Of "Cairo" At Zoom Level 12\n', screen.getvalue())
    # Without one, the display stored with the request is shown; with neither, no row.
    console, screen = _screen()
    print_confirmation(_request(arguments, display="Stored display"), console)
    assert re.search(r"Call\s+Stored display", screen.getvalue())
    console, screen = _screen()
    print_confirmation(_request(arguments), console)
    assert "Call" not in screen.getvalue()


def test_the_confirmation_escapes_a_stored_display() -> None:
    console, screen = _screen()
    print_confirmation(_request({}, display="x\x1b[2Ky\nz"), console)
    shown = screen.getvalue()
    assert "\x1b" not in shown and "x\\x1b[2Ky\\x0az" in shown


def test_the_terminal_approver_shows_the_display() -> None:
    console, screen = _screen()
    approver = TerminalApprover(console, stdin=io.StringIO("d\n"))
    arguments = {"address": "Cairo", "zoom": 12}
    decision, _ = approver(_request(arguments), display=render_display(SHOW_MAP, arguments))
    assert decision == "deny"
    assert 'Show Map Of "Cairo" At Zoom Level 12' in screen.getvalue()
