"""Turning a tool's ``_visualization`` into safe HTML pieces: highlighted code, rendered
Markdown, and checked link targets.

The nine visualization types are laid out by the ``_visualization.html`` template; this module
provides what a template cannot do by itself. Everything a tool wrote is escaped: Pygments
escapes the code it highlights, and Markdown is rendered with raw HTML turned off (``<script>``
in a tool's Markdown shows as text) and markdown-it's link check (no ``javascript:`` links).
"""

from __future__ import annotations

import functools
import importlib
import json
from typing import Any, Final
from urllib.parse import urlsplit

from markupsafe import Markup

from ...model.visualization import InvalidVisualization, validate_visualization

__all__ = [
    "MAX_HIGHLIGHT_CHARS",
    "cell_text",
    "checked_visualization",
    "highlight",
    "highlight_css",
    "markdown",
    "safe_url",
]

#: Code longer than this is shown as plain text: highlighting is for reading, and some lexers
#: are slow on pathological input.
MAX_HIGHLIGHT_CHARS: Final = 200_000
_CSS_CLASS: Final = "hl"


def checked_visualization(value: Any) -> tuple[dict[str, Any] | None, str | None]:
    """``(visualization, None)`` when ``value`` is one of the nine types (normalized), else
    ``(None, why)``. Stored visualizations are checked again: the audit database is a file."""
    if value is None:
        return None, None
    try:
        return validate_visualization(value), None
    except InvalidVisualization as exc:
        return None, str(exc)


@functools.cache
def _pygments() -> tuple[Any, Any, Any, Any, Any, type[Exception]]:
    """Pygments' pieces, imported when code is first shown. Pygments ships no type
    information, so it is reached through ``importlib`` and typed ``Any`` here, in one place."""
    lexers = importlib.import_module("pygments.lexers")
    return (
        importlib.import_module("pygments").highlight,
        importlib.import_module("pygments.formatters").HtmlFormatter,
        lexers.get_lexer_by_name,
        lexers.get_lexer_for_filename,
        importlib.import_module("pygments.lexers.special").TextLexer,
        importlib.import_module("pygments.util").ClassNotFound,
    )


def _lexer(language: str | None, path: str | None) -> Any:
    _, _, by_name, for_filename, text_lexer, not_found = _pygments()
    for find, key in ((by_name, language), (for_filename, path)):
        if key:
            try:
                return find(key, stripnl=False)
            except not_found:
                continue
    return text_lexer(stripnl=False)


def highlight(
    code: str,
    language: str | None = None,
    path: str | None = None,
    highlight_lines: list[int] | None = None,
) -> Markup:
    """``code`` as highlighted HTML with line numbers (plain, escaped text past
    :data:`MAX_HIGHLIGHT_CHARS`)."""
    if len(code) > MAX_HIGHLIGHT_CHARS:
        return Markup('<pre class="plain">{}</pre>').format(code)
    run, formatter_class = _pygments()[:2]
    formatter = formatter_class(
        cssclass=_CSS_CLASS,
        linenos="table",
        hl_lines=[n for n in highlight_lines or () if isinstance(n, int)],
        wrapcode=True,
    )
    # Pygments escapes every token it writes; the result is safe to embed.
    return Markup(run(code, _lexer(language, path), formatter))


@functools.cache
def highlight_css() -> str:
    """The stylesheet for :func:`highlight`'s classes (Pygments' default style)."""
    formatter = _pygments()[1](cssclass=_CSS_CLASS)
    # Background and token rules only, all under ".hl": get_style_defs also styles every <pre>.
    scope = f".{_CSS_CLASS}"
    rules = [*formatter.get_background_style_defs(scope), *formatter.get_token_style_defs(scope)]
    return "\n".join(str(rule) for rule in rules) + "\n"


@functools.cache
def _markdown_renderer() -> Any:
    from markdown_it import MarkdownIt

    # "html": False escapes raw HTML blocks and inline tags instead of passing them through.
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["table", "strikethrough"]
    )


def markdown(text: str) -> Markup:
    """Markdown rendered to HTML with raw HTML escaped and unsafe links dropped."""
    rendered: str = _markdown_renderer().render(text)
    # markdown-it escapes the text, and raw HTML too with html=False.
    return Markup(rendered)


def safe_url(url: Any) -> str | None:
    """``url`` when it is an absolute http(s) URL, else ``None`` (never a ``javascript:`` link)."""
    if not isinstance(url, str):
        return None
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    return url.strip() if parts.scheme in ("http", "https") and parts.netloc else None


def cell_text(value: Any) -> str:
    """A table cell: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)
