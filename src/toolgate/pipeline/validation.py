"""Argument validation: a compiled JSON Schema validator per tool, and messages a model can use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema_rs

from .._json import json_value_problem
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


#: What a value of each common ``format`` looks like, for the model reading a refusal.
_FORMAT_HINTS = {
    "date-time": "an RFC 3339 date and time with an offset, such as 2026-01-31T09:30:00Z",
    "date": "an RFC 3339 full date, such as 2026-01-31",
    "time": "an RFC 3339 time with an offset, such as 09:30:00Z",
    "duration": "an ISO 8601 duration, such as P3DT4H",
    "email": "an email address, such as name@example.com",
    "idn-email": "an email address, such as name@example.com",
    "hostname": "a host name, such as example.com",
    "idn-hostname": "a host name, such as example.com",
    "ipv4": "an IPv4 address in dotted form, such as 192.0.2.1",
    "ipv6": "an IPv6 address, such as 2001:db8::1",
    "uri": "an absolute URI with a scheme, such as https://example.com/path",
    "iri": "an absolute IRI with a scheme, such as https://example.com/path",
    "uri-reference": "a URI or a relative reference, such as /path?q=1",
    "iri-reference": "an IRI or a relative reference, such as /path?q=1",
    "uri-template": "an RFC 6570 URI template, such as /users/{id}",
    "uuid": "a UUID, such as 123e4567-e89b-12d3-a456-426614174000",
    "json-pointer": "a JSON pointer, such as /a/0",
    "relative-json-pointer": "a relative JSON pointer, such as 1/a",
    "regex": "a valid regular expression",
}


def _format_problem(path: list[Any], instance: Any, name: str) -> str:
    hint = _FORMAT_HINTS.get(name)
    expected = f"expected {hint}" if hint else f"expected the format {name!r}"
    value = instance if isinstance(instance, str) else str(instance)
    shown = value if len(value) <= 60 else value[:59] + "…"
    return f"{_pointer(path)}: {shown!r} is not a valid {name} ({expected})"


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
        elif isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Format):
            problems.append(_format_problem(path, error.instance, error.kind.format))
        else:
            problems.append(f"{_pointer(path)}: {_shorten(error.message)}")
        if len(problems) >= _MAX_REPORTED:
            problems.append("(more problems not shown)")
            break
    return problems


class SchemaValidator:
    """A compiled validator for one schema, with a fast happy path."""

    __slots__ = ("_validator",)

    def __init__(
        self, schema: Mapping[str, Any], where: str, *, check_formats: bool = True
    ) -> None:
        self._validator = compile_schema(schema, where, check_formats=check_formats)

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

    def problems(self, tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
        """What this stage refuses in ``arguments`` for ``tool`` (``[]``: nothing)."""
        plain = arguments if isinstance(arguments, dict) else dict(arguments)
        # Whatever parsed them (the SDK over MCP stdio, the Python API), arguments obey the
        # rules of the gateway's own parser: finite numbers, text, at most MAX_DEPTH levels.
        shape = json_value_problem(plain)
        return [shape] if shape is not None else self.validator_for(tool).problems(plain)

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        arguments = state.arguments
        if type(arguments) is not dict and not isinstance(arguments, Mapping):
            return error_outcome(
                state,
                ErrorCode.INVALID_ARGUMENTS,
                f"Arguments for tool {state.tool.id} must be a JSON object, "
                f"not {type(arguments).__name__}. Call it again with an object.",
            )
        problems = self.problems(state.tool, arguments)
        if problems:
            return error_outcome(
                state, ErrorCode.INVALID_ARGUMENTS, invalid_arguments_message(state.tool, problems)
            )
        return await proceed(state)
