"""The console's Jinja2 environment: autoescaped templates and the filters they use."""

from __future__ import annotations

import json
import math
import time
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from ..._json import thaw
from ...model.content import ContentResult
from ...model.hidden_text import escape_hidden
from .visualize import cell_text, checked_visualization, highlight, markdown, safe_url

__all__ = ["make_environment"]


def _when(timestamp: Any) -> str:
    """Local time, to the second."""
    if not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp))


def _ago(timestamp: Any) -> str:
    """``12 s ago`` / ``in 4 min``."""
    if not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
        return ""
    delta = timestamp - time.time()
    size = abs(delta)
    for unit, seconds in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if size >= seconds:
            amount = f"{int(size // seconds)} {unit}"
            break
    else:
        amount = f"{int(size)} s"
    return f"in {amount}" if delta > 0 else f"{amount} ago"


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _pretty_json(value: Any) -> str:
    """Indented JSON (as text: the template escapes it)."""
    try:
        return json.dumps(thaw(value), indent=2, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _percent(value: Any) -> str:
    return f"{value * 100:.1f} %" if isinstance(value, (int, float)) else "-"


def _segment(value: Any) -> str:
    """A value made safe as one URL path segment or query value."""
    return quote(str(value), safe="")


def _text(value: Any) -> str:
    """Content for people: strings as they are, content blocks as their text and notes (no
    base64), anything else as indented JSON."""
    if isinstance(value, ContentResult):
        return value.text
    return value if isinstance(value, str) else _pretty_json(value)


def _shown(value: Any) -> Any:
    """Every value a template prints, with invisible and bidirectional characters (zero-width,
    right-to-left overrides, Unicode tags…) shown as escapes such as ``\\u202e``: a tool's text
    cannot hide anything from the person reading the page."""
    if isinstance(value, Markup):
        # Already escaped markup: the escapes add only backslashes and hex digits.
        return Markup(escape_hidden(str(value)))
    if isinstance(value, str):
        return escape_hidden(value)
    return value


def make_environment() -> Environment:
    """The environment for the templates shipped in ``toolgate/serve/web/templates``.

    Autoescaping is on for every template, so anything a tool, a manifest or a caller wrote is
    shown as text; only :mod:`~toolgate.serve.web.visualize` produces markup, from escaped input.
    """
    env = Environment(
        loader=PackageLoader("toolgate.serve.web", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_shown,
    )
    env.filters.update(
        when=_when,
        ago=_ago,
        duration=_duration,
        pretty_json=_pretty_json,
        percent=_percent,
        segment=_segment,
        text=_text,
        cell=cell_text,
        markdown=markdown,
        highlight=highlight,
        safe_url=safe_url,
    )
    env.globals.update(checked_visualization=checked_visualization)
    return env
