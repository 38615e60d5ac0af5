"""Gemini declarations carry schemas its own ``JSONSchema`` type accepts.

Checked with google-genai's types (``extra="forbid"``): an upstream MCP server's schema with
``$schema: draft-07`` and other keywords the type does not list was refused before.
"""

from __future__ import annotations

from typing import Any

import google.genai.types as gemini_types
import pytest

from toolgate import Tool
from toolgate.exporters import export_tool
from toolgate.exporters.gemini_schema import gemini_json_schema

DRAFT_07 = "http://json-schema.org/draft-07/schema#"

#: Much like what the reference MCP server and zod-to-json-schema servers list.
UPSTREAM: dict[str, Any] = {
    "$schema": DRAFT_07,
    "$id": "urn:example:args",
    "$comment": "generated",
    "type": "object",
    "properties": {
        "a": {"type": "number", "description": "First", "exclusiveMinimum": 0, "examples": [1]},
        "mode": {"const": "fast"},
        "$schema": {"type": "string", "description": "a property may be named like a keyword"},
        "person": {"allOf": [{"$ref": "#/definitions/Person"}], "description": "Who"},
        "pair": {"type": "array", "items": [{"type": "string"}, {"type": "number"}]},
        "any": True,
        "tags": {"type": "array", "items": {"type": "string", "readOnly": True}},
    },
    "required": ["a"],
    "additionalProperties": False,
    "definitions": {"Person": {"type": "object", "properties": {"name": {"type": "string"}}}},
}


def test_the_upstream_schema_is_refused_as_it_is() -> None:
    """The reason for the conversion: without it google-genai refuses the schema."""
    with pytest.raises(Exception, match=r"extra_forbidden"):
        gemini_types.JSONSchema.model_validate(UPSTREAM)


def test_the_converted_schema_is_a_gemini_json_schema() -> None:
    converted = gemini_json_schema(UPSTREAM)
    gemini_types.JSONSchema.model_validate(converted)
    assert "$schema" not in converted and "$id" not in converted and "$comment" not in converted
    properties = converted["properties"]
    assert properties["a"] == {"type": "number", "description": "First"}
    assert properties["mode"] == {"enum": ["fast"]}
    assert properties["$schema"] == {
        "type": "string",
        "description": "a property may be named like a keyword",
    }
    assert properties["person"] == {"$ref": "#/$defs/Person", "description": "Who"}
    assert properties["pair"] == {"type": "array"}  # tuple items have no Gemini form
    assert properties["any"] == {}
    assert properties["tags"] == {"type": "array", "items": {"type": "string"}}
    assert converted["$defs"] == UPSTREAM["definitions"]
    assert converted["required"] == ["a"] and converted["additionalProperties"] is False
    assert "$schema" in UPSTREAM  # the tool's own schema is left as it is


def test_the_gemini_declaration_of_an_upstream_tool_validates() -> None:
    tool = Tool(
        "everything:get-sum",
        "Returns the sum of two numbers",
        UPSTREAM,
        output_schema={"$schema": DRAFT_07, "type": "object", "properties": {"sum": {"const": 3}}},
    )
    declaration = export_tool(tool, "gemini")
    gemini_types.FunctionDeclaration.model_validate(declaration)
    gemini_types.JSONSchema.model_validate(declaration["parametersJsonSchema"])
    gemini_types.JSONSchema.model_validate(declaration["responseJsonSchema"])
    assert declaration["name"] == "everything__get-sum"
    assert declaration["responseJsonSchema"]["properties"]["sum"] == {"enum": [3]}
    # The other exports keep the schema whole; the gateway validates against all of it.
    assert export_tool(tool, "mcp")["inputSchema"]["$schema"] == DRAFT_07
    assert export_tool(tool, "anthropic")["input_schema"]["$schema"] == DRAFT_07


# Conversions that must not change what the model is told (an adversarial review found each).


def _converted(schema: dict[str, Any]) -> dict[str, Any]:
    from toolgate.schema_check import compile_schema

    compile_schema(schema, "t")  # a schema toolgate accepts
    out = gemini_json_schema(schema)
    gemini_types.JSONSchema.model_validate(out)  # and google-genai accepts the copy
    return out


@pytest.mark.parametrize("never", [{"not": {}}, {"not": True}, False])
def test_no_extra_properties_stays_no_extra_properties(never: Any) -> None:
    """``additionalProperties: {"not": {}}`` (how zod and pydantic spell ``false``)."""
    out = _converted(
        {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": never}
    )
    assert out["additionalProperties"] is False


def test_a_one_element_allof_keeps_its_required_and_properties() -> None:
    out = _converted(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "required": ["a"],
            "allOf": [{"properties": {"b": {"type": "string"}}, "required": ["b"]}],
        }
    )
    assert out["required"] == ["a", "b"]
    assert out["properties"] == {"a": {"type": "string"}, "b": {"type": "string"}}


def test_a_one_element_allof_that_disagrees_is_left_out() -> None:
    out = _converted(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "allOf": [{"properties": {"a": {"maxLength": 3}}}],
        }
    )
    assert out["properties"] == {"a": {"type": "string"}}  # says less, never something else


def test_definitions_and_defs_with_one_name_keep_each_ref_on_its_schema() -> None:
    out = _converted(
        {
            "type": "object",
            "properties": {
                "x": {"$ref": "#/definitions/A"},
                "y": {"$ref": "#/$defs/A"},
                "z": {"$ref": "#/definitions/B"},
            },
            "definitions": {"A": {"type": "string"}, "B": {"type": "boolean"}},
            "$defs": {"A": {"type": "integer"}},
        }
    )
    for prop, expected in (("x", "string"), ("y", "integer"), ("z", "boolean")):
        target = out["properties"][prop]["$ref"].removeprefix("#/$defs/")
        assert out["$defs"][target] == {"type": expected}, (prop, out)


def test_false_branches_are_dropped_and_an_empty_one_of_left_out() -> None:
    out = _converted(
        {
            "type": "object",
            "properties": {
                "x": {"oneOf": [False]},
                "y": {"anyOf": [{"not": {}}, {"type": "string"}]},
                "z": {"type": "array", "items": False},
            },
        }
    )
    assert "oneOf" not in out["properties"]["x"]
    assert out["properties"]["y"] == {"anyOf": [{"type": "string"}]}
    assert out["properties"]["z"] == {"type": "array", "maxItems": 0}
