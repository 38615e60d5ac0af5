"""Redaction: masking values at declared paths, and secret values wherever they appear.

Two mechanisms, applied together to everything the audit log records:

* **Paths** (``ObservabilitySpec.redact_fields``) such as ``args.body``,
  ``args.customer_email`` or ``result.items.*.token``. Segments are separated by dots; ``*``
  matches any key of an object or any item of a list, a number matches that list index. The
  value at a matching path — a string, a number, a whole object or list — is replaced by
  :data:`MARKER`. The strings removed that way are collected (see ``removed``) so that the caller
  can also scrub them from free text (an error message or a stderr tail that echoes the value).
* **Values** (secrets the tool received, and the collected strings): every occurrence inside any
  string — object keys included — is replaced by :data:`MARKER`. Only values of at least
  :data:`MIN_VALUE_LENGTH` characters are used, so that short, common strings (``"a"``, ``"ok"``,
  ``"yes"``) do not blank out unrelated text.

Every function returns a new value and never mutates its input.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any, Final

__all__ = [
    "MARKER",
    "MIN_EDGE_LENGTH",
    "MIN_VALUE_LENGTH",
    "redact",
    "redact_edges",
    "redact_text",
    "redact_values",
    "text_pattern",
]

#: What a redacted value is replaced with.
MARKER: Final = "[REDACTED]"

#: Shorter values are never searched for inside text.
MIN_VALUE_LENGTH: Final = 4


@lru_cache(maxsize=512)
def _compile(values: tuple[str, ...]) -> re.Pattern[str] | None:
    if not values:
        return None
    # Longest first: a value that contains another one is masked as a whole.
    ordered = sorted(values, key=lambda v: (-len(v), v))
    return re.compile("|".join(re.escape(v) for v in ordered))


def text_pattern(values: Iterable[str]) -> re.Pattern[str] | None:
    """A compiled pattern matching any of ``values`` (those of at least
    :data:`MIN_VALUE_LENGTH` characters), or ``None`` when there is none. Cached."""
    if not values:  # the common case: nothing to mask
        return None
    usable = tuple(sorted({v for v in values if isinstance(v, str) and len(v) >= MIN_VALUE_LENGTH}))
    return _compile(usable)


def redact_text(text: str, values: Iterable[str] | re.Pattern[str] | None) -> str:
    """``text`` with every occurrence of any of ``values`` replaced by :data:`MARKER`.

    ``values`` may be a pattern from :func:`text_pattern`; values shorter than
    :data:`MIN_VALUE_LENGTH` are ignored.
    """
    pattern = values if isinstance(values, re.Pattern) or values is None else text_pattern(values)
    if pattern is None or not text:
        return text
    return pattern.sub(MARKER, text)


def redact_values(value: Any, values: Iterable[str] | re.Pattern[str] | None) -> Any:
    """A copy of the JSON-shaped ``value`` with every occurrence of ``values`` masked inside
    every string (object keys included). A number whose decimal text contains a value is
    replaced by :data:`MARKER` as a whole."""
    pattern = values if isinstance(values, re.Pattern) or values is None else text_pattern(values)
    if pattern is None:
        return _copy(value)
    return _scrub(value, pattern)


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is int or kind is str or kind is float or value is None or kind is bool:
        return value  # the common leaves first: the ABC checks below cost more than the copy
    if isinstance(value, Mapping):
        return {str(k): _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


def _scrub(value: Any, pattern: re.Pattern[str]) -> Any:
    if isinstance(value, str):
        return pattern.sub(MARKER, value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            new_key = pattern.sub(MARKER, str(key))
            if new_key in out:  # two keys masked to the same text: keep both
                n = 2
                while f"{new_key} ({n})" in out:
                    n += 1
                new_key = f"{new_key} ({n})"
            out[new_key] = _scrub(item, pattern)
        return out
    if isinstance(value, (list, tuple)):
        return [_scrub(v, pattern) for v in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return MARKER if pattern.search(str(value)) else value
    return value


@lru_cache(maxsize=1024)
def _split(paths: tuple[str, ...], prefix: str) -> tuple[tuple[str, ...], ...]:
    """The paths under ``prefix`` as segment tuples (``()`` means the whole value). Cached: a
    tool's paths are the same on every call."""
    head = tuple(prefix.split(".")) if prefix else ()
    out: list[tuple[str, ...]] = []
    for path in paths:
        parts = tuple(p for p in path.strip().split(".") if p != "")
        if not parts:
            continue
        if parts[: len(head)] == head:
            out.append(parts[len(head) :])
    return tuple(out)


def _matches(segment: str, key: str | int) -> bool:
    return segment == "*" or segment == str(key)


def _collect(value: Any, removed: set[str]) -> None:
    """Every string (and number's text) inside a value being masked."""
    if isinstance(value, str):
        if len(value) >= MIN_VALUE_LENGTH:
            removed.add(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, removed)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, removed)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_VALUE_LENGTH:
            removed.add(text)


def _mask(value: Any, paths: tuple[tuple[str, ...], ...], removed: set[str]) -> Any:
    if () in paths:  # a path ending here: mask the whole value
        _collect(value, removed)
        return MARKER
    if type(value) is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            below = tuple(p[1:] for p in paths if _matches(p[0], str(key)))
            out[str(key)] = _mask(item, below, removed) if below else _copy(item)
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for index, item in enumerate(value):
            below = tuple(p[1:] for p in paths if _matches(p[0], index))
            items.append(_mask(item, below, removed) if below else _copy(item))
        return items
    return value  # a path that goes deeper than the value: nothing there to mask


def redact(
    value: Any,
    paths: Iterable[str],
    *,
    prefix: str = "",
    secrets: Collection[str] = (),
    removed: set[str] | None = None,
) -> Any:
    """A redacted copy of the JSON-shaped ``value``.

    ``paths`` are full paths such as ``args.body``; only those starting with ``prefix``
    (``"args"``, ``"result"``) apply, relative to ``value``. A path equal to ``prefix`` masks the
    whole value. Then every occurrence of any of ``secrets`` inside any string (keys included)
    is masked. When ``removed`` is given, the strings masked by path (at least
    :data:`MIN_VALUE_LENGTH` long) are added to it, for scrubbing other text with
    :func:`redact_text`.
    """
    relative = _split(paths if isinstance(paths, tuple) else tuple(paths), prefix)
    sink: set[str] = set() if removed is None else removed
    masked = _mask(value, relative, sink) if relative else _copy(value)
    pattern = text_pattern(secrets)
    return masked if pattern is None else _scrub(masked, pattern)


#: The shortest piece of a secret masked at the cut edge of a text (see :func:`redact_edges`).
MIN_EDGE_LENGTH: Final = 6


def redact_edges(text: str, values: Iterable[str]) -> str:
    """``text`` with a piece of any of ``values`` cut by its edges masked.

    A bounded tail (the last KiB of a script's stderr) can start in the middle of a secret and a
    bounded head can end in one; whole-value matching misses those pieces. A suffix of a value
    that starts the text, or a prefix that ends it, of at least :data:`MIN_EDGE_LENGTH`
    characters, is replaced by :data:`MARKER`.
    """
    for value in values:
        if len(value) < MIN_VALUE_LENGTH:
            continue
        for size in range(len(value) - 1, MIN_EDGE_LENGTH - 1, -1):
            if text.startswith(value[-size:]):
                text = MARKER + text[size:]
                break
        for size in range(len(value) - 1, MIN_EDGE_LENGTH - 1, -1):
            if text.endswith(value[:size]):
                text = text[:-size] + MARKER
                break
    return text
