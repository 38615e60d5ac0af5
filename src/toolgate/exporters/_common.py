"""Helpers shared by the exporters: names, schemas, JSON values and payload checks.

Everything here is pure: no I/O, no provider SDK imports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from .._json import StrictJsonError, loads_strict, thaw, to_text
from ..errors import ToolCallParseError
from ..model.call import CallOutcome, ToolCall
from ..model.names import from_provider_name, to_provider_name

__all__ = [
    "as_mapping",
    "call_id_for",
    "function_name_for",
    "items_of",
    "json_ready",
    "object_schema",
    "optional_str",
    "parse_arguments",
    "provider_name",
    "require_str",
    "tool_id_for",
]


def provider_name(tool_id: str) -> str:
    """The provider-safe name for an id; a string without ``:`` is already such a name."""
    return to_provider_name(tool_id) if ":" in tool_id else tool_id


def tool_id_for(name: str) -> str:
    """The tool id a provider name decodes to, or the name itself when it does not decode.

    Shortened names (over-long ids) do not decode; the gateway's registry resolves every name it
    exported, shortened or not, through its own table, so passing the name on is always safe.
    """
    return from_provider_name(name) or name


def object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A plain copy of an input schema with ``"type": "object"`` made explicit.

    :class:`~toolgate.Tool` already treats a schema without ``type`` as an object schema; every
    provider wants the keyword spelled out, so this adds it without changing what is accepted.
    """
    result: dict[str, Any] = thaw(schema)
    result.setdefault("type", "object")
    return result


def json_ready(value: Any) -> Any:
    """A plain JSON value (``dict``/``list``/scalars) for any model-facing content."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return json.loads(to_text(value))


def call_id_for(outcome: CallOutcome, call: ToolCall | None) -> str:
    """The provider's call id: the parsed call's id when known, else the outcome's own id."""
    if call is not None and call.call_id:
        return call.call_id
    return outcome.call_id


def function_name_for(outcome: CallOutcome, call: ToolCall | None) -> str:
    """The function name the model used: from the parsed call when given, else the outcome."""
    return provider_name(call.tool_id if call is not None else outcome.tool_id)


# -- payload checks -------------------------------------------------------------------------------


def _describe(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def as_mapping(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else a :class:`ToolCallParseError` naming ``where``."""
    if isinstance(value, Mapping):
        return value
    raise ToolCallParseError(f"{where}: expected a JSON object, got {_describe(value)}")


def items_of(value: Any, where: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Yield ``(path, object)`` for each element of a JSON array of objects at ``where``."""
    if not isinstance(value, (list, tuple)):
        raise ToolCallParseError(f"{where}: expected a JSON array, got {_describe(value)}")
    for index, item in enumerate(value):
        path = f"{where}[{index}]"
        yield path, as_mapping(item, path)


def require_str(data: Mapping[str, Any], key: str, where: str) -> str:
    """The non-empty string at ``data[key]``; otherwise a :class:`ToolCallParseError`."""
    value = data.get(key)
    if not isinstance(value, str) or not value:
        problem = "is missing" if value is None else f"must be a non-empty string, not {value!r}"
        raise ToolCallParseError(f"{where}.{key} {problem}")
    return value


def optional_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    """The string at ``data[key]``, ``None`` when absent or null; anything else is an error."""
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ToolCallParseError(f"{where}.{key} must be a string, not {_describe(value)}")


def parse_arguments(value: Any, where: str) -> dict[str, Any]:
    """Arguments given as a JSON object, or as a string holding one (OpenAI's encoding).

    ``None`` and an empty or blank string mean "no arguments". Anything else that is not a JSON
    object raises :class:`ToolCallParseError` naming ``where``.
    """
    if value is None:
        return {}
    if isinstance(value, Mapping):
        arguments: dict[str, Any] = thaw(value)
        return arguments
    if not isinstance(value, str):
        raise ToolCallParseError(
            f"{where} must be a JSON object or a string holding one, not {_describe(value)}"
        )
    if not value.strip():
        return {}
    try:
        decoded = loads_strict(value)
    except StrictJsonError as exc:
        raise ToolCallParseError(f"{where} is not valid JSON: {exc}") from None
    if not isinstance(decoded, dict):
        raise ToolCallParseError(f"{where} must encode a JSON object, not {_describe(decoded)}")
    return decoded
