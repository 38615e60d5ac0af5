"""Typed, diagnosed access to the fields of one Kubernetes-style resource document.

Internal to :mod:`toolgate.formats.resource.parse`. Every problem becomes a :class:`Diagnostic`
whose
``path`` is the file and whose ``field`` is ``document N: /json/pointer`` (documents are numbered
from 1 in the order they appear in a multi-document file); the message says what was expected
and what was found. Nothing here raises for what a document contains.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .diagnostics import Diagnostic, Severity
from .messages import got, pointer

__all__ = ["Checker", "DocumentRef", "got", "parse_duration", "pointer"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float | None:
    """Seconds from a number of seconds or a duration string (``500ms``, ``30s``, ``2m``,
    ``1h``); ``None`` when ``value`` is neither, or not positive and finite."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


@dataclass(frozen=True, slots=True)
class DocumentRef:
    """Where one resource document is: its file, its number in the file, its first line."""

    path: str
    """The file."""
    number: int
    """1-based position among the file's documents."""
    line: int = 1
    """1-based line the document starts on."""

    def field(self, at: str = "") -> str:
        """The ``Diagnostic.field`` for the JSON pointer ``at`` inside this document."""
        return f"document {self.number}: {at}" if at else f"document {self.number}"

    def diagnostic(self, at: str, message: str, severity: Severity = Severity.ERROR) -> Diagnostic:
        """A diagnostic about the field at ``at`` (a JSON pointer; ``""`` for the document)."""
        return Diagnostic(self.path, self.field(at), message, severity)


class Checker:
    """Collects the diagnostics of one document and reads its fields with type checks."""

    def __init__(self, where: DocumentRef) -> None:
        self.where = where
        self.items: list[Diagnostic] = []

    @property
    def failed(self) -> bool:
        """True once any error was recorded."""
        return any(d.severity is Severity.ERROR for d in self.items)

    def error(self, at: str, message: str) -> None:
        """Record an error about the field at the JSON pointer ``at``."""
        self.items.append(self.where.diagnostic(at, message))

    def warning(self, at: str, message: str) -> None:
        """Record a warning about the field at the JSON pointer ``at``."""
        self.items.append(self.where.diagnostic(at, message, Severity.WARNING))

    # -- shapes ---------------------------------------------------------------------------------

    def only(self, data: Mapping[str, Any], at: str, known: Iterable[str]) -> None:
        """Error for every key of ``data`` not in ``known`` (a typo in a rule must not silently
        drop the rule: unknown fields fail the resource), with a "did you mean"."""
        names = tuple(known)
        for key in data:
            if key in names:
                continue
            close = difflib.get_close_matches(str(key), names, n=1)
            if not close:
                lowered = {name.lower(): name for name in names}
                close = [lowered[str(key).lower()]] if str(key).lower() in lowered else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.error(
                pointer(*_parts(at), str(key)),
                f"unknown field {key!r}{hint} (expected one of: {', '.join(names)})",
            )

    def mapping(
        self, data: Mapping[str, Any], key: str, at: str, *, required: bool = False
    ) -> dict[str, Any] | None:
        """``data[key]`` when it is an object; ``None`` (and an error when it is present but
        not an object, or ``required`` and missing) otherwise."""
        here = pointer(*_parts(at), key)
        if key not in data or data[key] is None:
            if required:
                self.error(here, "is required: expected an object")
            return None
        value = data[key]
        if not isinstance(value, dict):
            self.error(here, f"expected an object, {got(value)}")
            return None
        return value

    def string(
        self,
        data: Mapping[str, Any],
        key: str,
        at: str,
        *,
        required: bool = False,
        choices: Iterable[str] | None = None,
    ) -> str | None:
        """``data[key]`` as a non-empty string (one of ``choices`` when given)."""
        here = pointer(*_parts(at), key)
        options = tuple(choices) if choices is not None else None
        expected = f"one of {', '.join(options)}" if options is not None else "a non-empty string"
        if key not in data or data[key] is None:
            if required:
                self.error(here, f"is required: expected {expected}")
            return None
        value = data[key]
        if not isinstance(value, str) or not value.strip():
            self.error(here, f"expected {expected}, {got(value)}")
            return None
        if options is not None and value not in options:
            close = difflib.get_close_matches(value, options, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            self.error(here, f"expected {expected}, {got(value)}{hint}")
            return None
        return value

    def boolean(self, data: Mapping[str, Any], key: str, at: str) -> bool | None:
        """``data[key]`` as a boolean (``true``/``false``), or ``None`` when absent."""
        if key not in data or data[key] is None:
            return None
        value = data[key]
        if not isinstance(value, bool):
            self.error(pointer(*_parts(at), key), f"expected true or false, {got(value)}")
            return None
        return value

    def positive_int(self, data: Mapping[str, Any], key: str, at: str) -> int | None:
        """``data[key]`` as an integer of at least 1, or ``None`` when absent."""
        if key not in data or data[key] is None:
            return None
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.error(pointer(*_parts(at), key), f"expected a whole number >= 1, {got(value)}")
            return None
        return value

    def duration(self, data: Mapping[str, Any], key: str, at: str) -> float | None:
        """``data[key]`` as seconds (see :func:`parse_duration`), or ``None`` when absent."""
        if key not in data or data[key] is None:
            return None
        seconds = parse_duration(data[key])
        if seconds is None:
            self.error(
                pointer(*_parts(at), key),
                "expected a positive duration: seconds as a number, or a string such as "
                f"'500ms', '30s', '2m', '1h'; {got(data[key])}",
            )
        return seconds

    def strings(
        self, data: Mapping[str, Any], key: str, at: str, *, non_empty: bool = False
    ) -> tuple[str, ...] | None:
        """``data[key]`` as a list of non-empty strings, or ``None`` when absent."""
        here = pointer(*_parts(at), key)
        if key not in data or data[key] is None:
            return None
        value = data[key]
        if not isinstance(value, list):
            self.error(here, f"expected a list of strings, {got(value)}")
            return None
        if non_empty and not value:
            self.error(here, "expected a non-empty list of strings, got an empty list")
            return None
        bad = False
        for index, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.error(
                    pointer(*_parts(here), index), f"expected a non-empty string, {got(item)}"
                )
                bad = True
        return None if bad else tuple(value)


def _parts(at: str) -> list[str]:
    """The segments of a JSON pointer, unescaped (so :func:`pointer` can extend it)."""
    if not at:
        return []
    return [part.replace("~1", "/").replace("~0", "~") for part in at.split("/")[1:]]
