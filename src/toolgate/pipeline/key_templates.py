"""Idempotency key templates: the Jinja sandbox that renders them, and a compiled renderer for
the common simple ones (see :mod:`toolgate.pipeline.idempotency` for what a key is).

The common templates — literal text and ``{{ args.name }}`` with ``| lower`` / ``| hash`` —
are rendered by a compiled Python function instead of the Jinja sandbox (~10 µs per call).
Anything else, and any value that is not a plain string or number, goes to Jinja, so the
result is always Jinja's (a test compares the two on many templates).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._json import digest
from ..errors import ErrorCode

if TYPE_CHECKING:
    from jinja2 import Template
    from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["KeyTemplateError", "compile_fast", "render_error", "template"]

_MISSING = object()


class KeyTemplateError(Exception):
    """The key template could not be rendered. ``code`` says whose fault it is."""

    def __init__(self, message: str, code: ErrorCode) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _hash(value: Any) -> str:
    """The ``hash`` filter: SHA-256 hex of the canonical JSON of ``value``. (An undefined value
    raises ``UndefinedError`` when serialized: ``StrictUndefined`` refuses ``str()``.)"""
    return digest(value)


_environment: ImmutableSandboxedEnvironment | None = None
_templates: dict[str, Template] = {}
_environment_lock = threading.Lock()


def template(source: str) -> Template:
    """``source`` compiled in the immutable sandbox (``hash`` filter, ``StrictUndefined``),
    cached."""
    global _environment
    found = _templates.get(source)
    if found is not None:
        return found
    with _environment_lock:
        if _environment is None:
            from jinja2 import StrictUndefined
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            environment = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
            environment.filters["hash"] = _hash
            _environment = environment
        compiled = _environment.from_string(source)
        if len(_templates) < 4096:
            _templates[source] = compiled
        return compiled


_SIMPLE_PART = re.compile(
    r"\{\{\s*args\.([A-Za-z_][A-Za-z0-9_]*)\s*((?:\|\s*(?:lower|hash)\s*)*)\}\}"
)
_DICT_ATTRIBUTES = frozenset(dir(dict))
_FAST_TYPES = (str, int, float)


def compile_fast(source: str) -> Callable[[Mapping[str, Any]], str | None] | None:
    """A renderer for a simple template, or ``None`` when the template needs Jinja."""
    pieces: list[str | tuple[str, tuple[str, ...]]] = []
    position = 0
    for match in _SIMPLE_PART.finditer(source):
        literal = source[position : match.start()]
        if "{" in literal or "}" in literal:
            return None
        pieces.append(literal)
        name = match.group(1)
        if name in _DICT_ATTRIBUTES:
            return None  # Jinja would find the dict's method, not the argument
        filters = tuple(f.strip() for f in match.group(2).split("|") if f.strip())
        pieces.append((name, filters))
        position = match.end()
    tail = source[position:]
    if "{" in tail or "}" in tail or not any(isinstance(p, tuple) for p in pieces):
        return None
    pieces.append(tail)

    def render(arguments: Mapping[str, Any]) -> str | None:
        out: list[str] = []
        for piece in pieces:
            if isinstance(piece, str):
                out.append(piece)
                continue
            name, filters = piece
            value = arguments.get(name, _MISSING)
            if type(value) not in _FAST_TYPES or type(value) is bool:
                return None  # missing, or not a plain value: Jinja decides (and explains)
            for applied in filters:
                if applied == "hash":
                    value = _hash(value)
                elif isinstance(value, str):
                    value = value.lower()
                else:
                    return None  # ``lower`` of a number: leave it to Jinja
            out.append(str(value))
        return "".join(out)

    return render


def render_error(exc: Exception) -> KeyTemplateError:
    """Why a key template failed, and whose fault it is."""
    from jinja2.exceptions import SecurityError, TemplateSyntaxError, UndefinedError

    if isinstance(exc, TemplateSyntaxError):
        return KeyTemplateError(
            f"its idempotency key template is malformed (line {exc.lineno}: {exc.message})",
            ErrorCode.UNAVAILABLE,
        )
    if isinstance(exc, SecurityError):
        return KeyTemplateError(
            f"its idempotency key template breaks the sandbox ({exc})", ErrorCode.UNAVAILABLE
        )
    if isinstance(exc, UndefinedError):
        return KeyTemplateError(
            f"its idempotency key needs a value this call does not provide ({exc.message}); "
            "pass the argument the key is built from",
            ErrorCode.INVALID_ARGUMENTS,
        )
    return KeyTemplateError(
        f"its idempotency key could not be built from these arguments "
        f"({type(exc).__name__}: {exc})",
        ErrorCode.INVALID_ARGUMENTS,
    )
