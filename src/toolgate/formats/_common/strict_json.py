"""One strict JSON parser for declaration files: no key twice, no ``NaN``, bounded size.

Python's ``json`` accepts a key written twice (the last one wins) and ``NaN``/``Infinity``; a
declaration that does either is ambiguous, so each is an error naming what is wrong."""

from __future__ import annotations

import json
from typing import Any

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


class _Refused(Exception):
    pass


def _pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in items:
        if key in result:
            raise _Refused(f"duplicate key {key!r}")
        result[key] = value
    return result


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON value")


def parse_json_document(text: str) -> Any:
    """Parse one declaration's JSON text; raise :class:`JsonTextError` for malformed JSON, a
    duplicate key, ``NaN``/``Infinity``, nesting too deep or a document over the size bounds
    that YAML declarations have too."""
    try:
        data = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise JsonTextError(exc.msg, line=exc.lineno, column=exc.colno) from None
    except _Refused as exc:
        raise JsonTextError(str(exc)) from None
    except RecursionError:
        raise JsonTextError("nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise JsonTextError(str(exc)) from None
    problem = shape_problem(data, max_nodes=DEFAULT_MAX_NODES, max_depth=DEFAULT_MAX_DEPTH)
    if problem is not None:
        raise JsonTextError(problem, too_large=True)
    return data
