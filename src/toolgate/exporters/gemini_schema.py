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
* converted, keeping the meaning: ``const: v`` → ``enum: [v]``; ``definitions`` → ``$defs``
  (and ``#/definitions/`` references with it; a name both define differently is renamed, so a
  reference keeps pointing at its own schema); a one-element ``allOf`` is merged into its
  schema when the two agree (``required`` lists united, ``properties`` and ``$defs`` joined;
  otherwise it is left out like a longer one); a ``true`` subschema becomes ``{}``; a schema
  nothing matches (``false``, ``{"not": {}}``) becomes ``additionalProperties: false``,
  ``maxItems: 0`` for ``items``, and is dropped from ``anyOf``/``oneOf`` (the keyword is left
  out when no branch is left) and from ``properties``;
* left out: everything else (``$schema``, ``$id``, ``$comment``, ``examples``, ``readOnly``,
  ``exclusiveMinimum``, ``multipleOf``, ``not``, ``if``/``then``/``else``,
  ``patternProperties``, longer ``allOf``, tuple ``items``…). Leaving a keyword out only makes
  the copy say less: the model may be told a looser schema, never a different one.
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
    source = dict(schema) if isinstance(schema, Mapping) else schema
    renames: dict[str, str] = {}
    if isinstance(source, dict):
        source, renames = _root_definitions(source)
    return _node(source, renames) or {}


def _root_definitions(source: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The root with ``definitions`` moved into ``$defs``, and the renames that took (a name
    both define differently): ``#/definitions/`` references follow them."""
    definitions = source.get("definitions")
    defs = source.get("$defs")
    if not isinstance(definitions, Mapping):
        return source, {}
    defs = dict(defs) if isinstance(defs, Mapping) else {}
    renames: dict[str, str] = {}
    for name, sub in definitions.items():
        if name in defs and defs[name] != sub:
            new, n = f"{name}_definitions", 1
            while new in defs or new in definitions:
                n += 1
                new = f"{name}_definitions{n}"
            renames[name] = new
            name = new
        defs[name] = sub
    out = {key: value for key, value in source.items() if key != "definitions"}
    out["$defs"] = defs
    return out, renames


def _never(schema: Any) -> bool:
    """Whether nothing matches ``schema`` (``false``, ``{"not": {}}``, ``{"not": true}``)."""
    if schema is False:
        return True
    return (
        isinstance(schema, Mapping)
        and set(schema) == {"not"}
        and (schema["not"] is True or schema["not"] == {})
    )


def _node(schema: Any, renames: Mapping[str, str]) -> dict[str, Any] | None:
    """One (sub)schema; ``None`` for one nothing matches or that is not a schema."""
    if schema is True:
        return {}
    if not isinstance(schema, Mapping) or _never(schema):
        return None
    source = dict(schema)
    all_of = source.pop("allOf", None)
    if isinstance(all_of, (list, tuple)) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
        source = _merged(source, all_of[0])
    if "definitions" in source:
        # Below the root no '#/definitions/' reference reaches them; the root's are renamed.
        definitions = source.pop("definitions")
        if isinstance(definitions, Mapping):
            source["$defs"] = {**definitions, **source.get("$defs", {})}
    if "const" in source and "enum" not in source:
        source["enum"] = [source["const"]]
    out: dict[str, Any] = {}
    for key, value in source.items():
        if key not in GEMINI_SCHEMA_KEYWORDS:
            continue
        converted = _value(key, value, renames)
        if converted is not _LEAVE_OUT:
            out[key] = converted
    if source.get("items") is not None and _never(source["items"]):
        out["maxItems"] = 0  # no item matches: the array must be empty
    return out


#: Keywords that only describe: where a schema and its one ``allOf`` differ, the schema's wins.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})


def _merged(source: dict[str, Any], inner: Mapping[str, Any]) -> dict[str, Any]:
    """``source`` with its one ``allOf`` member ``inner`` merged in, when both can be said as
    one schema; else ``source`` without it (a left-out ``allOf`` only says less)."""
    out = dict(source)
    for key, value in inner.items():
        if key not in out or out[key] == value or key in _ANNOTATIONS:
            out.setdefault(key, value)
        elif key == "required" and isinstance(value, list) and isinstance(out[key], list):
            out[key] = list(dict.fromkeys([*out[key], *value]))
        elif key in ("properties", "$defs", "definitions") and (
            isinstance(value, Mapping) and isinstance(out[key], Mapping)
        ):
            clash = [n for n in value if n in out[key] and out[key][n] != value[n]]
            if clash:
                return dict(source)
            out[key] = {**out[key], **value}
        else:
            return dict(source)  # two constraints on one keyword: no one-schema form
    return out


def _ref(value: str, renames: Mapping[str, str]) -> str:
    path = value.removeprefix("#/definitions/")
    head, slash, tail = path.partition("/")
    return "#/$defs/" + renames.get(head, head) + slash + tail


def _value(key: str, value: Any, renames: Mapping[str, str]) -> Any:
    if key in _SCHEMA_MAPS:
        if not isinstance(value, Mapping):
            return _LEAVE_OUT
        members = {name: _node(sub, renames) for name, sub in value.items()}
        return {name: sub for name, sub in members.items() if sub is not None}
    if key in _SCHEMA_LISTS:
        if not isinstance(value, (list, tuple)):
            return _LEAVE_OUT
        # A branch nothing matches changes neither anyOf nor oneOf; with none left the keyword
        # has no Gemini form (an empty list is not a schema).
        branches = [sub for sub in (_node(v, renames) for v in value) if sub is not None]
        return branches or _LEAVE_OUT
    if key in ("items", "additionalProperties"):
        if key == "additionalProperties" and (isinstance(value, bool) or _never(value)):
            return bool(value) if isinstance(value, bool) else False
        sub = _node(value, renames)
        return _LEAVE_OUT if sub is None else sub
    if key == "$ref" and isinstance(value, str) and value.startswith("#/definitions/"):
        return _ref(value, renames)
    return thaw(value)
