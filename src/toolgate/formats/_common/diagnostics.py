"""Diagnostics: what a loader found wrong with a declaration, naming the file and the field."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Diagnostic", "Report", "Severity"]


class Severity(StrEnum):
    """``error``: the declaration (or this tool) does not load. ``warning``: it loads anyway."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem in one declaration file."""

    path: str
    """The file (or folder) the problem is in."""
    field: str | None
    """The field, as a dotted path or JSON pointer (``inputSchema/properties/x``); ``None`` for
    the file as a whole."""
    message: str
    severity: Severity = Severity.ERROR

    def __str__(self) -> str:
        where = self.path if self.field is None else f"{self.path}: {self.field}"
        return f"{where}: {self.message}"


class Report:
    """Collects the diagnostics of one declaration file (errors and warnings).

    ``prefix`` is put before every field named, for a report about one part of a file (the JSON
    pointer of one document in a multi-document file, for example)."""

    def __init__(self, path: str, *, prefix: str = "") -> None:
        self.path = path
        self.prefix = prefix
        self.items: list[Diagnostic] = []

    def error(self, field: str | None, message: str, *, path: str | None = None) -> None:
        """Record an error: the declaration (or the tool it is about) does not load."""
        self._add(field, message, Severity.ERROR, path)

    def warning(self, field: str | None, message: str, *, path: str | None = None) -> None:
        """Record a warning: the declaration loads anyway."""
        self._add(field, message, Severity.WARNING, path)

    @property
    def failed(self) -> bool:
        """Whether any error was recorded."""
        return any(item.severity is Severity.ERROR for item in self.items)

    def _add(self, field: str | None, message: str, severity: Severity, path: str | None) -> None:
        if self.prefix:
            field = self.prefix + (field or "")
        self.items.append(Diagnostic(path or self.path, field, message, severity))
