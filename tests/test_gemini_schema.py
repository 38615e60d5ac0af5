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
