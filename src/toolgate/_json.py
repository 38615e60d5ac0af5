"""Small helpers for JSON-shaped values: strict parsing, deep freezing, thawing and canonical
hashing.

:func:`loads_strict` is the one parser of JSON that reaches a tool or comes back from one
(``toolgate call --args``, HTTP call bodies, MCP over HTTP and stdio, a script tool's output): a
duplicate key, ``NaN``/``Infinity`` or nesting deeper than :data:`MAX_DEPTH` levels is an error
naming what is wrong, never a silent last-wins, a ``null`` or a ``RecursionError``.
:func:`json_value_problem` applies the same rules to a value already parsed by someone else (the
MCP SDK, the Python API).

Tool declarations carry JSON Schemas. The model is immutable, so schemas are stored deeply frozen
(``MappingProxyType`` for objects, ``tuple`` for arrays) and thawed back into plain ``dict`` /
``list`` values whenever they leave the model (exporters, validators, surfaces).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "StrictJsonError",
    "canonical_json",
    "digest",
    "freeze",
    "is_text",
    "json_value_problem",
    "loads_strict",
    "thaw",
    "to_text",
]

#: How deeply arguments and tool results may nest (objects and arrays; the top level is 1).
MAX_DEPTH = 64


class StrictJsonError(ValueError):
    """Text that :func:`loads_strict` refuses; the message says why (and names the key).

    ``malformed`` is true when the text is not JSON at all, false when it is JSON the gateway
    refuses (a duplicate key, ``NaN``, nesting too deep). ``problem`` is the reason alone, and
    ``line``/``column`` say where a syntax error is, for callers that word their own message
    (declaration files name the field and the line their own way)."""

    def __init__(
        self,
        message: str,
        *,
        malformed: bool = False,
        problem: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(message)
        self.malformed = malformed
        self.problem = message if problem is None else problem
        self.line = line
        self.column = column


class _Refused(Exception):
    def __init__(self, problem: str, hint: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in items:
        if key in result:
            raise _Refused(f"duplicate key {key!r}", "each key may appear once in an object")
        result[key] = value
    return result


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON value", "JSON has no NaN or Infinity")


def loads_strict(
    text: str | bytes, *, max_depth: int | None = MAX_DEPTH, allow_nan: bool = False
) -> Any:
    """Parse one JSON document; raise :class:`StrictJsonError` for malformed JSON, a duplicate
    key, ``NaN``/``Infinity``/``-Infinity`` or nesting deeper than ``max_depth`` levels
    (``None``: only as deep as Python's parser goes; the caller checks the shape itself).

    ``allow_nan=True`` lets ``NaN``/``Infinity`` through as floats, for a caller that leaves them
    to :func:`json_value_problem` further on (which names where they are)."""
    try:
        value = json.loads(
            text, object_pairs_hook=_pairs, parse_constant=None if allow_nan else _constant
        )
    except json.JSONDecodeError as exc:
        raise StrictJsonError(
            f"{exc.msg} (line {exc.lineno}, column {exc.colno})",
            malformed=True,
            problem=exc.msg,
            line=exc.lineno,
            column=exc.colno,
        ) from None
    except _Refused as exc:
        raise StrictJsonError(f"{exc.problem} ({exc.hint})", problem=exc.problem) from None
    except RecursionError:
        deeper = "too deeply" if max_depth is None else f"deeper than {max_depth} levels"
        raise StrictJsonError(f"nested {deeper}", problem="nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise StrictJsonError(f"not UTF-8 text ({exc.reason})", malformed=True) from None
    except ValueError as exc:  # an integer with more digits than Python converts
        raise StrictJsonError(str(exc)) from None
    problem = None if max_depth is None else _depth_problem(value, max_depth)
    if problem is not None:
        raise StrictJsonError(problem)
    return value


def _depth_problem(value: Any, max_depth: int) -> str | None:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if not children:
            continue
        if depth >= max_depth:
            return f"nested deeper than {max_depth} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def _pointer(parts: tuple[Any, ...]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


#: Types whose values need no further look (``float`` does: it may be NaN).
_FLAT: frozenset[type] = frozenset({str, int, bool, type(None)})


#: What is wrong with a string that is not text (said after its JSON pointer or name).
_NOT_TEXT = (
    "is not valid Unicode text (it holds a lone surrogate such as \\udc80, which no UTF-8 "
    "text can carry)"
)


def is_text(value: str) -> bool:
    """Whether ``value`` is valid Unicode text: it encodes as UTF-8 (no lone surrogate, as a
    JSON ``"\\udc80"`` escape or ``surrogateescape`` decoding leaves)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_value_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str | None:
    """Why an already parsed value is not one :func:`loads_strict` would return (a non-finite
    number or a string that is not text, named by its JSON pointer, or nesting deeper than
    ``max_depth``), else ``None``.

    Iterative: neither a deep nor a self-referencing value can exhaust the stack."""
    # The usual arguments, a flat object of ASCII strings, integers and booleans, need no walk:
    # this runs on every call.
    if type(value) is dict:
        for key, item in value.items():
            kind = type(item)
            if (
                kind not in _FLAT
                or (kind is str and not item.isascii())
                or type(key) is not str
                or not key.isascii()
            ):
                break
        else:
            return None
    stack: list[tuple[Any, int, tuple[Any, ...]]] = [(value, 1, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if not is_text(item):
                return f"{_pointer(path)}: {_NOT_TEXT}"
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return (
                    f"{_pointer(path)}: {item!r} is not a JSON number (JSON has no NaN or Infinity)"
                )
            continue
        if isinstance(item, Mapping):
            for key in item:
                if isinstance(key, str) and not is_text(key):
                    return f"{_pointer(path)}: a key {_NOT_TEXT}"
            children: Any = [(key, item[key]) for key in item]
        elif isinstance(item, (list, tuple)):
            children = list(enumerate(item))
        else:
            continue
        if not children:
            continue
        if depth >= max_depth:
            # The field it is in, not a pointer 64 levels long.
            return f"{_pointer(path[:1])}: nested deeper than {max_depth} levels"
        stack.extend((child, depth + 1, (*path, key)) for key, child in children)
    return None


def freeze(value: Any) -> Any:
    """Return a deeply immutable copy of a JSON-shaped value."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Return a plain, mutable ``dict`` / ``list`` copy of a (possibly frozen) JSON value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


# Built once: json.dumps with options makes a new encoder on every call, which costs more than
# encoding a small argument object (this runs on every idempotent call).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
)
_TEXT = json.JSONEncoder(ensure_ascii=False, default=_default)


def canonical_json(value: Any) -> str:
    """Serialize a value deterministically: sorted keys, no insignificant white space."""
    return _CANONICAL.encode(value)


def digest(value: Any) -> str:
    """A stable SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def to_text(value: Any) -> str:
    """The text a model reads for a JSON value: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return _TEXT.encode(value)
