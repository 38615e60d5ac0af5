"""Whether a JSON Schema can be sent to OpenAI with ``strict: true`` exactly as it is.

OpenAI's strict mode (Structured Outputs, also used for function calling) accepts only a subset
of JSON Schema. This module checks a schema against that subset, as documented in OpenAI's
"Structured Outputs → Supported schemas" guide and enforced by the ``openai`` SDK's own
``to_strict_json_schema`` helper:

* the root is an ``object`` schema, never ``anyOf``;
* every object sets ``additionalProperties: false`` and lists **all** its properties in
  ``required`` (optional values are spelled as a union with ``null``, never by omission);
* every subschema has a ``type`` (or ``enum``, ``const``, ``anyOf``, ``$ref``); types are
  ``string``, ``number``, ``integer``, ``boolean``, ``object``, ``array``, ``null`` or a list of
  them;
* the only other keywords are ``title`` and ``description``; for strings ``pattern`` and
  ``format`` (date-time, time, date, duration, email, hostname, ipv4, ipv6, uuid); for numbers
  ``multipleOf``, ``maximum``, ``exclusiveMaximum``, ``minimum``, ``exclusiveMinimum``; for arrays
  ``items``, ``minItems``, ``maxItems``; ``$defs``/``definitions`` at the root and local ``$ref``
  (recursion included). ``default``, ``allOf``, ``oneOf``, ``not``, ``if``/``then``/``else``,
  ``dependent*``, ``patternProperties``, ``minLength`` and everything else are rejected;
* a ``$ref`` stands alone (no sibling ``description``): the API refuses siblings, which is why the
  SDK inlines such references;
* the documented size limits: at most 5000 object properties, 10 levels of object nesting,
  1000 enum values and 120,000 characters of property names, definition names, enum and const
  values.

The check is deliberately conservative: a schema it does not recognise gets ``strict: false``,
which the API always accepts, rather than a request the API would refuse. Nothing is rewritten;
making a schema strict-compatible (e.g. turning optional parameters into required nullable ones)
would change what the tool accepts, so it is left to the tool's author.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "STRICT_STRING_FORMATS",
    "is_strict_compatible",
    "strict_schema_problems",
]

#: ``format`` values OpenAI's strict mode supports.
STRICT_STRING_FORMATS = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)

_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
_TYPED_BY = ("type", "enum", "const", "anyOf", "$ref")
_KEYWORDS = frozenset(
    {
        *_TYPED_BY,
        "title",
        "description",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "minItems",
        "maxItems",
        "pattern",
        "format",
        "multipleOf",
        "maximum",
        "exclusiveMaximum",
        "minimum",
        "exclusiveMinimum",
    }
)
_DEFINITIONS = ("$defs", "definitions")

MAX_PROPERTIES = 5000
MAX_OBJECT_DEPTH = 10
MAX_ENUM_VALUES = 1000
MAX_STRING_BUDGET = 120_000


class _Checker:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.problems: list[str] = []
        self.properties = 0
        self.enum_values = 0
        self.string_budget = 0

    def problem(self, path: str, text: str) -> None:
        self.problems.append(f"{path or '/'}: {text}")

    def check_root(self) -> None:
        root = self.root
        if root.get("type") != "object":
            self.problem("", "the root must be a schema of type 'object'")
        if "anyOf" in root:
            self.problem("", "the root must not be 'anyOf'")
        for key in _DEFINITIONS:
            if key not in root:
                continue
            definitions = root[key]
            if not isinstance(definitions, Mapping):
                self.problem(f"/{key}", "must be an object of schemas")
                continue
            for name, definition in definitions.items():
                self.string_budget += len(name)
                self.check(definition, f"/{key}/{name}", depth=1)
        self.check({k: v for k, v in root.items() if k not in _DEFINITIONS}, "", depth=0)
        if self.properties > MAX_PROPERTIES:
            self.problem("", f"{self.properties} properties exceed the limit of {MAX_PROPERTIES}")
        if self.enum_values > MAX_ENUM_VALUES:
            self.problem(
                "", f"{self.enum_values} enum values exceed the limit of {MAX_ENUM_VALUES}"
            )
        if self.string_budget > MAX_STRING_BUDGET:
            self.problem(
                "",
                f"names and enum values total {self.string_budget} characters, over the "
                f"limit of {MAX_STRING_BUDGET}",
            )

    def check(self, node: Any, path: str, *, depth: int) -> None:
        if not isinstance(node, Mapping):
            self.problem(path, "must be a schema object (boolean schemas are not supported)")
            return
        for key in node:
            if key in _DEFINITIONS:
                self.problem(f"{path}/{key}", "definitions are only supported at the root")
            elif key not in _KEYWORDS:
                self.problem(f"{path}/{key}", f"keyword {key!r} is not supported in strict mode")
        if "$ref" in node:
            self.check_ref(node, path)
            return
        if not any(key in node for key in _TYPED_BY):
            self.problem(path, "every schema needs a 'type' (or enum, const, anyOf, $ref)")
        types = self.check_type(node.get("type"), path)
        if "object" in types or "properties" in node:
            self.check_object(node, path, depth)
        if "items" in node:
            self.check(node["items"], f"{path}/items", depth=depth)
        if "anyOf" in node:
            variants = node["anyOf"]
            if not isinstance(variants, Sequence) or isinstance(variants, str) or not variants:
                self.problem(f"{path}/anyOf", "must be a non-empty array of schemas")
            else:
                for index, variant in enumerate(variants):
                    self.check(variant, f"{path}/anyOf/{index}", depth=depth)
        self.check_values(node, path)

    def check_type(self, value: Any, path: str) -> frozenset[str]:
        if value is None:
            return frozenset()
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, Sequence) or not all(isinstance(n, str) for n in names):
            self.problem(f"{path}/type", "must be a type name or a list of type names")
            return frozenset()
        unknown = [n for n in names if n not in _TYPES]
        if unknown:
            self.problem(f"{path}/type", f"unsupported type(s) {unknown}")
        return frozenset(names)

    def check_object(self, node: Mapping[str, Any], path: str, depth: int) -> None:
        depth += 1
        if depth > MAX_OBJECT_DEPTH:
            self.problem(path, f"objects are nested deeper than {MAX_OBJECT_DEPTH} levels")
        if node.get("additionalProperties") is not False:
            self.problem(path, "objects must set 'additionalProperties': false")
        properties = node.get("properties", {})
        if not isinstance(properties, Mapping):
            self.problem(f"{path}/properties", "must be an object of schemas")
            return
        required = node.get("required", [])
        if not isinstance(required, Sequence) or isinstance(required, str):
            self.problem(f"{path}/required", "must be an array of property names")
            required = []
        missing = [name for name in properties if name not in required]
        if missing:
            self.problem(
                f"{path}/required",
                f"every property must be required in strict mode; not required: {missing}",
            )
        unknown = [name for name in required if name not in properties]
        if unknown:
            self.problem(f"{path}/required", f"names properties that do not exist: {unknown}")
        self.properties += len(properties)
        for name, schema in properties.items():
            self.string_budget += len(name)
            self.check(schema, f"{path}/properties/{name}", depth=depth)

    def check_ref(self, node: Mapping[str, Any], path: str) -> None:
        ref = node["$ref"]
        siblings = sorted(key for key in node if key != "$ref")
        if siblings:
            self.problem(path, f"'$ref' must stand alone in strict mode; siblings: {siblings}")
        if not isinstance(ref, str) or not self.resolves(ref):
            self.problem(f"{path}/$ref", f"{ref!r} is not a local reference to a definition")

    def resolves(self, ref: str) -> bool:
        if ref == "#":
            return True
        parts = ref.split("/")
        if len(parts) != 3 or parts[0] != "#" or parts[1] not in _DEFINITIONS:
            return False
        definitions = self.root.get(parts[1])
        return isinstance(definitions, Mapping) and parts[2] in definitions

    def check_values(self, node: Mapping[str, Any], path: str) -> None:
        if "enum" in node:
            values = node["enum"]
            if not isinstance(values, Sequence) or isinstance(values, str) or not values:
                self.problem(f"{path}/enum", "must be a non-empty array")
            else:
                self.enum_values += len(values)
                self.string_budget += sum(len(v) for v in values if isinstance(v, str))
        if isinstance(node.get("const"), str):
            self.string_budget += len(node["const"])
        if "format" in node and node["format"] not in STRICT_STRING_FORMATS:
            self.problem(f"{path}/format", f"format {node['format']!r} is not supported")


def strict_schema_problems(schema: Mapping[str, Any]) -> list[str]:
    """Every reason ``schema`` cannot be used with OpenAI ``strict: true`` as is (empty if none).

    Each entry starts with the JSON pointer of the offending subschema, e.g.
    ``/properties/note/default: keyword 'default' is not supported in strict mode``.
    """
    if not isinstance(schema, Mapping):
        return ["/: the schema must be a JSON object"]
    checker = _Checker(schema)
    checker.check_root()
    return checker.problems


def is_strict_compatible(schema: Mapping[str, Any]) -> bool:
    """True when OpenAI's strict mode accepts ``schema`` unchanged (see the module docstring)."""
    return not strict_schema_problems(schema)
