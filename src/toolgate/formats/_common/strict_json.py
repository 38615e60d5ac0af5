"""Strict JSON for declaration files: no key twice, no ``NaN``, bounded size and depth.

The parsing is :func:`toolgate._json.loads_strict`'s (the gateway's one strict JSON parser);
this module words its refusals the way declaration diagnostics do and bounds the document like
YAML declarations (:func:`~toolgate.formats._common.safe_yaml.shape_problem`)."""

from __future__ import annotations

from typing import Any

from ..._json import StrictJsonError, loads_strict
from .safe_yaml import DEFAULT_MAX_DEPTH, DEFAULT_MAX_NODES, shape_problem

__all__ = ["JsonTextError", "parse_json_document"]


class JsonTextError(ValueError):
    """A declaration's JSON text that is refused.

    ``problem`` says what is wrong; ``line`` and ``column`` say where, for a syntax error;
    ``too_large`` is true when the text parsed but the document is too large or deep."""

    def __init__(
        self,
        problem: str,
        *,
        line: int | None = None,
        column: int | None = None,
        too_large: bool = False,
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.column = column
        self.too_large = too_large

    @property
    def message(self) -> str:
        """The diagnostic's wording: ``invalid JSON at line 3, column 5: …``, ``invalid JSON:
        duplicate key 'a'`` or ``the JSON document is …``."""
        if self.line is not None:
            return f"invalid JSON at line {self.line}, column {self.column}: {self.problem}"
        if self.too_large:
            return f"the JSON document is {self.problem}"
        return f"invalid JSON: {self.problem}"


def parse_json_document(text: str) -> Any:
    """Parse one declaration's JSON text; raise :class:`JsonTextError` for malformed JSON, a
    duplicate key, ``NaN``/``Infinity``, nesting too deep or a document over the size bounds
    that YAML declarations have too."""
    try:
        data = loads_strict(text, max_depth=None)
    except StrictJsonError as exc:
        raise JsonTextError(exc.problem, line=exc.line, column=exc.column) from None
    problem = shape_problem(data, max_nodes=DEFAULT_MAX_NODES, max_depth=DEFAULT_MAX_DEPTH)
    if problem is not None:
        raise JsonTextError(problem, too_large=True)
    return data
