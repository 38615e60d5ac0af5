"""Argument validation: a compiled JSON Schema validator per tool, and messages a model can use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema_rs

from ..errors import ErrorCode
from ..model import CallOutcome, Tool
from ..registry import RegisteredTool
from ..schema_check import check_schema, compile_schema
from .state import CallState, Handler, error_outcome

__all__ = [
    "SchemaValidator",
    "ValidateArgumentsStage",
    "check_schema",
    "compile_schema",
    "describe_errors",
]

#: A model cannot act on a hundred problems at once, and a huge value would flood its context.
_MAX_REPORTED = 20
_MAX_PROBLEM_CHARS = 300


def _pointer(parts: Iterable[Any]) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _shorten(text: str) -> str:
    if len(text) <= _MAX_PROBLEM_CHARS:
        return text
    return text[: _MAX_PROBLEM_CHARS - 1] + "…"


def describe_errors(validator: jsonschema_rs.Validator, instance: Any) -> list[str]:
    """Every problem as ``/json/pointer: what was expected`` (at most 20)."""
    problems: list[str] = []
    for error in validator.iter_errors(instance):
        path = list(error.instance_path)
        if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required):
            problems.append(f"{_pointer([*path, error.kind.property])}: required field is missing")
        elif isinstance(error.kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
            for name in error.kind.unexpected:
                problems.append(f"{_pointer([*path, name])}: unexpected field (not in the schema)")
        else:
            problems.append(f"{_pointer(path)}: {_shorten(error.message)}")
        if len(problems) >= _MAX_REPORTED:
            problems.append("(more problems not shown)")
            break
    return problems


class SchemaValidator:
    """A compiled validator for one schema, with a fast happy path."""

    __slots__ = ("_validator",)

    def __init__(self, schema: Mapping[str, Any], where: str) -> None:
        self._validator = compile_schema(schema, where)

    def problems(self, instance: Any) -> list[str]:
        """``[]`` when ``instance`` is valid, otherwise one line per problem."""
        try:
            if self._validator.is_valid(instance):
                return []
            return describe_errors(self._validator, instance)
        except (ValueError, TypeError, OverflowError) as exc:
            # Values JSON cannot carry (sets, NaN, objects) reach here from the Python API.
            return [f"/: value is not JSON ({exc})"]


def invalid_arguments_message(tool: Tool, problems: list[str]) -> str:
    """The message a model reads when its arguments were rejected."""
    lines = "\n".join(f"- {p}" for p in problems)
    return (
        f"Invalid arguments for tool {tool.id}; it did not run.\n{lines}\n"
        "Fix these fields to match the tool's input schema and call it again."
    )


class ValidateArgumentsStage:
    """Reject arguments that do not match the input schema; the tool does not run."""

    name = "validate_arguments"
    suspends = False

    def __init__(self) -> None:
        self._validators: dict[str, tuple[Tool, SchemaValidator]] = {}

    def applies_to(self, entry: RegisteredTool) -> bool:
        return True

    def validator_for(self, tool: Tool) -> SchemaValidator:
        """The compiled validator for this tool definition (compiled once, then cached)."""
        cached = self._validators.get(tool.id)
        if cached is not None and cached[0] is tool:
            return cached[1]
        validator = SchemaValidator(tool.input_schema, f"{tool.id}: input schema")
        self._validators[tool.id] = (tool, validator)
        return validator

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        arguments = state.arguments
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            return error_outcome(
                state,
                ErrorCode.INVALID_ARGUMENTS,
                f"Arguments for tool {state.tool.id} must be a JSON object, "
                f"not {type(arguments).__name__}. Call it again with an object.",
            )
        problems = self.validator_for(state.tool).problems(
            arguments if isinstance(arguments, dict) else dict(arguments)
        )
        if problems:
            return error_outcome(
                state, ErrorCode.INVALID_ARGUMENTS, invalid_arguments_message(state.tool, problems)
            )
        return await proceed(state)
