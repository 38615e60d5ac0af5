"""Diagnostics: what a loader found wrong with a declaration, naming the file and the field."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Diagnostic", "Severity"]


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
