"""A JSON Schema as Gemini's ``parametersJsonSchema`` takes it.

Gemini reads ``parametersJsonSchema`` and ``responseJsonSchema`` as its ``JSONSchema`` type
(``google.genai.types.JSONSchema``), which forbids every keyword it does not list. Schemas of
upstream MCP servers routinely carry some (``"$schema": "…draft-07…"`` at the root above all),
and pydantic writes ``const`` and ``exclusiveMinimum``. So the Gemini declaration — and only
it: the gateway validates arguments against the tool's full schema on every call — gets a copy
in that subset:

* kept: ``type``, ``description``, ``title``, ``enum``, ``default``, ``format``, ``pattern``,
  ``minimum``/``maximum``, ``minLength``/``maxLength``, ``minItems``/``maxItems``,
  ``uniqueItems``, ``minProperties``/``maxProperties``, ``properties``, ``required``,
  ``additionalProperties``, ``items`` (one schema), ``anyOf``, ``oneOf``, ``$defs``, ``$ref``;
* converted: ``const: v`` → ``enum: [v]``; ``definitions`` → ``$defs`` (and ``#/definitions/``
  references with it); a one-element ``allOf`` is merged into its schema; a ``true`` subschema
  becomes ``{}``;
* left out: everything else (``$schema``, ``$id``, ``$comment``, ``examples``, ``readOnly``,
  ``exclusiveMinimum``, ``multipleOf``, ``not``, ``if``/``then``/``else``,
  ``patternProperties``, longer ``allOf``, tuple ``items``, ``false`` subschemas…).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._json import thaw

__all__ = ["GEMINI_SCHEMA_KEYWORDS", "gemini_json_schema"]

#: The keywords ``google.genai.types.JSONSchema`` accepts (its aliases).
GEMINI_SCHEMA_KEYWORDS = frozenset(
    {
        "type", "description", "title", "enum", "default", "format", "pattern",
        "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "uniqueItems",
        "minProperties", "maxProperties", "properties", "required", "additionalProperties",
        "items", "anyOf", "oneOf", "$defs", "$ref",
    }
)  # fmt: skip
_SCHEMA_MAPS = frozenset({"properties", "$defs"})
_SCHEMA_LISTS = frozenset({"anyOf", "oneOf"})
#: What :func:`_value` returns for a keyword to leave out (``None`` is a value: ``default: null``).
_LEAVE_OUT: Any = object()


def gemini_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in the subset Gemini's ``JSONSchema`` accepts (see the module doc)."""
    return _node(schema) or {}


def _node(schema: Any) -> dict[str, Any] | None:
    """One (sub)schema; ``None`` for one that cannot be said (``false``, not a schema)."""
    if schema is True:
        return {}
    if not isinstance(schema, Mapping):
        return None
    source = dict(schema)
    if "definitions" in source:
        definitions = source.pop("definitions")
        if isinstance(definitions, Mapping):
            source["$defs"] = {**definitions, **source.get("$defs", {})}
    all_of = source.pop("allOf", None)
    if isinstance(all_of, (list, tuple)) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        for key, value in all_of[0].items():
            source.setdefault(key, value)
    if "const" in source and "enum" not in source:
        source["enum"] = [source["const"]]
    out: dict[str, Any] = {}
    for key, value in source.items():
        if key not in GEMINI_SCHEMA_KEYWORDS:
            continue
        converted = _value(key, value)
        if converted is not _LEAVE_OUT:
            out[key] = converted
    return out


def _value(key: str, value: Any) -> Any:
    if key in _SCHEMA_MAPS:
        if not isinstance(value, Mapping):
            return _LEAVE_OUT
        members = {name: _node(sub) for name, sub in value.items()}
        return {name: sub for name, sub in members.items() if sub is not None}
    if key in _SCHEMA_LISTS:
        if not isinstance(value, (list, tuple)):
            return _LEAVE_OUT
        return [sub for sub in map(_node, value) if sub is not None]
    if key in ("items", "additionalProperties"):
        if key == "additionalProperties" and isinstance(value, bool):
            return value
        sub = _node(value)
        return _LEAVE_OUT if sub is None else sub
    if key == "$ref" and isinstance(value, str) and value.startswith("#/definitions/"):
        return "#/$defs/" + value.removeprefix("#/definitions/")
    return thaw(value)
