"""The one-line display of a call: what a tile, a terminal or an approval prompt shows.

The extension info format: ``ui.prefix``, then for each argument in ``ui.args`` order its
``prefix``, its value and its ``suffix``, then ``ui.suffix``, joined by single spaces. For
``{"address": "Cairo", "zoom": 12}`` and the format's own example tile,
``showMapAtAddressAndZoom``, that is::

    Show Map Of "Cairo" At Zoom Level 12

Values:

* strings are quoted (``"Cairo"``; a ``"`` or ``\\`` inside is escaped with a backslash);
* numbers are written as they are (``12``, ``0.5``);
* booleans, lists and objects are written as compact JSON (``true``, ``["a", "b"]``,
  ``{"k": 1}``), so what a person sees is what the tool gets;
* an argument that is missing **or null** is skipped together with its prefix and suffix: null
  means "not given" in a tool call, and ``At Zoom Level null`` tells a person nothing.

A tool without ``ui`` gets a default display: its title, then the given arguments in the order of
its input schema (arguments it does not declare last, as given), as ``name: value`` in
parentheses — ``Append a line (line: "one")``; just the title when there are none.

Displays go into terminals and approval prompts, and argument values come from the model, so the
line is made safe to print: every control or format character (escape sequences, new lines,
carriage returns, bidirectional overrides, zero-width characters, lone surrogates) is written as
a visible escape such as ``\\x1b`` or ``\\u202e`` — never passed through, and never silently
dropped, which could make two different arguments look the same — and every value is cut at
:data:`MAX_VALUE_CHARS` characters and the whole line at ``max_length`` (default
:data:`MAX_DISPLAY_CHARS`), each cut marked with ``…``.

This module is pure (no I/O); it is available for every tool as ``toolgate.render_display``.
"""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from .._json import thaw
from ..redaction import record_masker, redact_values
from .tool import TileDisplay, Tool

__all__ = ["MAX_DISPLAY_CHARS", "MAX_VALUE_CHARS", "render_display", "safe_text"]

#: Masks the credentials of URLs in what a display shows.
_URLS = record_masker()

#: The longest display line, in characters (after escaping), unless the caller asks otherwise.
MAX_DISPLAY_CHARS = 200
#: The most characters one argument value takes in the line (after escaping and quoting).
MAX_VALUE_CHARS = 80

_ELLIPSIS = "…"
#: Unicode categories written as escapes: controls, format characters (bidirectional overrides,
#: zero-width characters), line and paragraph separators, and lone surrogates (which cannot even
#: be encoded for a terminal).
_ESCAPED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(char: str) -> str:
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _pieces(text: str, *, quote: bool) -> Iterator[str]:
    """``text`` one printable piece per character: escapes for what a terminal would act on,
    and (inside quotes) ``\\"`` and ``\\\\``."""
    for char in text:
        if unicodedata.category(char) in _ESCAPED:
            yield _escape_char(char)
        elif quote and char in '"\\':
            yield "\\" + char
        else:
            yield char


def _bounded(pieces: Iterator[str], limit: int, *, closing: str = "") -> str:
    """Join ``pieces`` into at most ``limit`` characters (``closing`` included), never cutting
    an escape in half; a cut ends with ``…`` before ``closing``. Reads at most one piece past
    the limit, so a huge value costs no more than a short one."""
    budget = limit - len(closing)
    out: list[str] = []
    used = 0
    for piece in pieces:
        out.append(piece)
        used += len(piece)
        if used > budget:
            while out and used + len(_ELLIPSIS) > budget:
                used -= len(out.pop())
            return "".join(out) + _ELLIPSIS + closing
    return "".join(out) + closing


def safe_text(text: str, limit: int = MAX_DISPLAY_CHARS) -> str:
    """``text`` safe to print on one line: control and format characters escaped, at most
    ``limit`` characters (a cut marked with ``…``)."""
    return _bounded(_pieces(text, quote=False), max(limit, 1))


def _format_value(value: Any) -> str:
    """One argument value as the display writes it (see the module docstring)."""
    if isinstance(value, str):
        return _bounded(iter(['"', *_pieces(value, quote=True)]), MAX_VALUE_CHARS, closing='"')
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            text = str(value)
        except ValueError:  # more digits than Python converts to text
            text = f"{'-' if value < 0 else ''}{_ELLIPSIS}"
    elif isinstance(value, float):
        text = repr(value) if math.isfinite(value) else json.dumps(value)
    else:
        try:
            text = json.dumps(thaw(value), ensure_ascii=False, separators=(", ", ": "), default=str)
        except (ValueError, TypeError, RecursionError):
            text = _ELLIPSIS
    return _bounded(_pieces(text, quote=False), MAX_VALUE_CHARS)


def _tile_parts(ui: TileDisplay, arguments: Mapping[str, Any]) -> list[str]:
    parts: list[str] = []
    if ui.prefix:
        parts.append(safe_text(ui.prefix))
    for arg in ui.args:
        if arguments.get(arg.name) is None:
            continue
        if arg.prefix:
            parts.append(safe_text(arg.prefix))
        parts.append(_format_value(arguments[arg.name]))
        if arg.suffix:
            parts.append(safe_text(arg.suffix))
    if ui.suffix:
        parts.append(safe_text(ui.suffix))
    return [part for part in parts if part.strip()]


def _default_parts(tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
    declared = [str(name) for name in (tool.input_schema.get("properties") or {})]
    order = [name for name in declared if name in arguments]
    order += [name for name in arguments if name not in declared]
    pairs = [
        f"{safe_text(name, MAX_VALUE_CHARS)}: {_format_value(arguments[name])}"
        for name in order
        if arguments[name] is not None
    ]
    title = safe_text(tool.display_title)
    return [title, f"({', '.join(pairs)})"] if pairs else [title]


def render_display(
    tool: Tool, arguments: Mapping[str, Any] | None = None, *, max_length: int = MAX_DISPLAY_CHARS
) -> str:
    """The one-line display of a call of ``tool`` with ``arguments``.

    Uses the tool's tile (``tool.display.ui``) when it declares one, else the default display
    (title and arguments); see the module docstring for the exact rules. The result is safe to
    print in a terminal and at most ``max_length`` characters long. Never raises for any
    argument values.
    """
    # Keys as text: the Python API may be handed anything, and a display never raises. People
    # read it (approvals, the call log of the web UI): the credentials of URLs are masked.
    given = {str(key): redact_values(value, _URLS) for key, value in (arguments or {}).items()}
    ui = tool.display.ui
    parts = _tile_parts(ui, given) if ui is not None else []
    if not parts:
        parts = _default_parts(tool, given)
    line = " ".join(parts)
    limit = max(max_length, 1)
    return line if len(line) <= limit else line[: limit - 1] + _ELLIPSIS
