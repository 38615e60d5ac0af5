"""Exporters through their public functions, checked against the provider SDKs' own types.

toolgate never imports the SDKs; these tests do, to prove that what it emits is what each SDK
(and so each API) accepts, and that what each SDK produces can be parsed back.
"""

from __future__ import annotations

import enum
import json
import re
import subprocess
import sys
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import anthropic.types as anthropic_types
import google.genai.types as gemini_types
import mcp.types as mcp_types
import openai.types.chat as openai_chat
import openai.types.responses as openai_responses
import pydantic
import pytest
import typing_extensions
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses.response_input_item_param import FunctionCallOutput
from pydantic import BaseModel, ConfigDict

from toolgate import (
    ApprovalRequest,
    CallOutcome,
    CallStatus,
    ErrorCode,
    Gateway,
    Tool,
    ToolCall,
    ToolCallParseError,
    tool,
)
from toolgate.exporters import (
    EXAMPLES_META_KEY,
    EXPORT_FORMATS,
    anthropic_tool_result,
    export_tool,
    export_tools,
    gemini_function_response,
    is_strict_compatible,
    mcp_call_tool_result,
    openai_tool,
    openai_tool_message,
    parse_anthropic_tool_calls,
    parse_gemini_function_calls,
    parse_mcp_tool_call,
    parse_openai_responses_tool_calls,
    parse_openai_tool_calls,
    parse_tool_calls,
    strict_schema_problems,
    tool_result,
)
from toolgate.model.names import from_provider_name, to_mcp_name, to_provider_name

# -- tools --------------------------------------------------------------------------------------


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    address: Address


class Registration(BaseModel):
    id: int
    status: str


@tool(namespace="demo", access="read", examples=["What's the weather in Paris?"])
def forecast(city: Annotated[str, "City name, e.g. Paris"], unit: Unit) -> str:
    """Get tomorrow's forecast for a city."""
    return f"sunny in {city}, 21 {unit.value}"


@tool(namespace="crm", title="Register a person", effect="external_write")
def register(
    person: Person,
    tags: Annotated[list[str], "Labels to attach"],
    note: str | None = None,
) -> Registration:
    """Register a person in the CRM.

    Args:
        person: Who to register.
        note: A free-text note.
    """
    return Registration(id=1, status="new")


@tool(namespace="demo", annotations={"readOnlyHint": True, "openWorldHint": False})
def ping() -> str:
    """Check that the service answers."""
    return "pong"


PANDORA = Tool(
    id="@scope/weather:weather",
    description="Current weather for a place.",
    input_schema={
        "type": "object",
        "properties": {"place": {"type": "string", "description": "A place name"}},
        "required": ["place"],
        "additionalProperties": False,
    },
)
LONG = Tool(
    id="an.extremely-long.namespace.for.a.plugin.vendor:" + "fetch_all_the_records" * 3,
    description="Fetch every record.",
    input_schema={"properties": {"limit": {"type": "integer", "minimum": 1}}},
    output_schema={"type": "array", "items": {"type": "object"}},
)


def _weather_now(place: str) -> str:
    return f"mild in {place}"


def _fetch_all(limit: int = 10) -> list[dict[str, int]]:
    return [{"n": n} for n in range(limit)]


TOOLS: list[Tool] = [forecast.tool, register.tool, ping.tool, PANDORA, LONG]
TOOL_IDS = [t.id for t in TOOLS]

# -- strict validation against the SDK types -----------------------------------------------------


class ShapeError(Exception):
    """A dict does not have the shape an SDK type describes."""


def _unknown_keys(tp: Any, value: Any, path: str) -> list[str]:
    """Keys of ``value`` that the (nested) TypedDict ``tp`` does not declare.

    Pydantic ignores extra keys of a TypedDict, so a misspelt or misplaced key would pass
    ``TypeAdapter`` validation; this walks the declared types to catch them.
    """
    origin = typing.get_origin(tp)
    if origin in (typing.Required, typing.NotRequired, typing.Annotated):
        return _unknown_keys(typing.get_args(tp)[0], value, path)
    # The SDKs build their TypedDicts with typing_extensions, which typing does not recognise.
    if typing_extensions.is_typeddict(tp) and isinstance(value, Mapping):
        hints = typing_extensions.get_type_hints(tp)
        unknown = [f"{path}.{key}" for key in value if key not in hints]
        for key, item in value.items():
            if key in hints:
                unknown += _unknown_keys(hints[key], item, f"{path}.{key}")
        return unknown
    if origin is typing.Union:
        options = [_unknown_keys(arg, value, path) for arg in typing.get_args(tp)]
        return min(options, key=len)
    if isinstance(value, list) and origin not in (None, dict) and len(typing.get_args(tp)) == 1:
        item_type = typing.get_args(tp)[0]
        return [k for i, v in enumerate(value) for k in _unknown_keys(item_type, v, f"{path}[{i}]")]
    return []


def typed_dict(tp: Any) -> Callable[[Any], None]:
    """Validate against an SDK TypedDict: strict types, and no undeclared keys anywhere."""
    adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(tp)

    def validate(value: Any) -> None:
        try:
            adapter.validate_python(value, strict=True)
        except pydantic.ValidationError as exc:
            raise ShapeError(str(exc)) from exc
        unknown = _unknown_keys(tp, value, "$")
        if unknown:
            raise ShapeError(f"keys {unknown} are not part of {tp.__name__}")

    return validate


def sdk_model(model: type[BaseModel]) -> Callable[[Any], None]:
    """Validate against an SDK pydantic model; dumping it again must give back the same dict."""

    def validate(value: Any) -> None:
        try:
            parsed = model.model_validate(value)
        except pydantic.ValidationError as exc:
            raise ShapeError(str(exc)) from exc
        dumped = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
        if dumped != value:
            raise ShapeError(f"{model.__name__} does not keep everything: {dumped} != {value}")

    return validate


DEFINITION_TYPES: dict[str, Callable[[Any], None]] = {
    "openai": typed_dict(openai_chat.ChatCompletionFunctionToolParam),
    "openai-responses": typed_dict(openai_responses.FunctionToolParam),
    "anthropic": typed_dict(anthropic_types.ToolParam),
    "gemini": sdk_model(gemini_types.FunctionDeclaration),
    "mcp": sdk_model(mcp_types.Tool),
}
RESULT_TYPES: dict[str, Callable[[Any], None]] = {
    "openai": typed_dict(openai_chat.ChatCompletionToolMessageParam),
    "openai-responses": typed_dict(FunctionCallOutput),
    "anthropic": typed_dict(anthropic_types.ToolResultBlockParam),
    "gemini": sdk_model(gemini_types.Part),
    "mcp": sdk_model(mcp_types.CallToolResult),
}


def name_of(definition: Mapping[str, Any], format: str) -> str:
    name = definition["function"]["name"] if format == "openai" else definition["name"]
    assert isinstance(name, str)
    return name


def schema_of(definition: Mapping[str, Any], format: str) -> dict[str, Any]:
    key = {
        "openai-responses": "parameters",
        "anthropic": "input_schema",
        "gemini": "parametersJsonSchema",
        "mcp": "inputSchema",
    }
    schema = definition["function"]["parameters"] if format == "openai" else definition[key[format]]
    assert isinstance(schema, dict)
    return schema


# -- definitions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("format", EXPORT_FORMATS)
@pytest.mark.parametrize("definition", TOOLS, ids=TOOL_IDS)
def test_every_definition_is_accepted_by_the_sdk_type(format: str, definition: Tool) -> None:
    exported = export_tool(definition, format)
    DEFINITION_TYPES[format](exported)
    json.dumps(exported)  # JSON-ready, no frozen mappings or tuples left


@pytest.mark.parametrize("format", EXPORT_FORMATS)
def test_export_tools_keeps_order_and_matches_export_tool(format: str) -> None:
    exported = export_tools(TOOLS, format)
    assert isinstance(exported, list)
    assert exported == [export_tool(t, format) for t in TOOLS]


def test_gemini_declarations_form_a_gemini_tool() -> None:
    declarations = export_tools(TOOLS, "gemini")
    gemini_tool = gemini_types.Tool.model_validate({"functionDeclarations": declarations})
    assert gemini_tool.function_declarations is not None
    assert len(gemini_tool.function_declarations) == len(TOOLS)


def test_unknown_format_is_a_value_error_naming_the_valid_ones() -> None:
    assert EXPORT_FORMATS == ("openai", "openai-responses", "anthropic", "gemini", "mcp")
    for call in (
        lambda: export_tools(TOOLS, "bedrock"),
        lambda: parse_tool_calls({}, "bedrock"),
        lambda: tool_result(_ok("demo:forecast", "x"), "bedrock"),
    ):
        with pytest.raises(ValueError, match="bedrock") as info:
            call()
        for valid in EXPORT_FORMATS:
            assert valid in str(info.value)


def test_openai_chat_and_responses_shapes() -> None:
    chat = openai_tool(forecast.tool)
    assert chat["type"] == "function" and set(chat) == {"type", "function"}
    assert set(chat["function"]) == {"name", "description", "parameters", "strict"}
    responses = export_tool(forecast.tool, "openai-responses")
    assert set(responses) == {"type", "name", "description", "parameters", "strict"}
    assert responses["type"] == "function"
    assert responses["name"] == chat["function"]["name"] == "demo__forecast"
    assert responses["description"] == "Get tomorrow's forecast for a city."


@pytest.mark.parametrize("format", EXPORT_FORMATS)
@pytest.mark.parametrize("definition", TOOLS, ids=TOOL_IDS)
def test_schemas_are_exported_unchanged(format: str, definition: Tool) -> None:
    expected = definition.input_schema_dict()
    expected.setdefault("type", "object")  # the only addition: spell out the implied type
    exported = export_tool(definition, format)
    assert schema_of(exported, format) == expected
    before = definition.input_schema_dict()
    schema_of(exported, format)["properties"]["injected"] = {"type": "string"}  # a plain copy
    assert definition.input_schema_dict() == before
    assert schema_of(export_tool(definition, format), format) == expected


def test_gemini_uses_the_json_schema_fields() -> None:
    declaration = export_tool(register.tool, "gemini")
    assert "parameters" not in declaration
    assert declaration["parametersJsonSchema"]["$defs"]["Person"]["title"] == "Person"
    assert declaration["responseJsonSchema"] == register.tool.output_schema_dict()
    assert "responseJsonSchema" not in export_tool(forecast.tool, "gemini")


# -- strict mode -----------------------------------------------------------------------------------


@pytest.mark.parametrize("format", ["openai", "openai-responses"])
def test_strict_only_where_the_schema_allows_it(format: str) -> None:
    def strict(definition: Tool) -> bool:
        exported = export_tool(definition, format)
        value = exported["function"]["strict"] if format == "openai" else exported["strict"]
        assert isinstance(value, bool)  # always explicit: Responses defaults a missing one to true
        return value

    assert strict(forecast.tool) is True  # all required, enum via a lone $ref
    assert strict(ping.tool) is True  # no parameters
    assert strict(PANDORA) is True
    assert strict(register.tool) is False  # optional `note`, $ref with a description, …
    assert strict(LONG) is False  # no additionalProperties, `limit` optional


def test_strict_problems_name_the_optional_parameter() -> None:
    problems = strict_schema_problems(register.tool.input_schema_dict())
    assert any("note" in p and "required" in p for p in problems)
    assert any("/properties/note/default" in p for p in problems)
    assert any("/properties/person" in p and "$ref" in p for p in problems)
    assert strict_schema_problems(forecast.tool.input_schema_dict()) == []


def _obj(properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
        **extra,
    }


def _nested(levels: int) -> dict[str, Any]:
    schema = _obj({})
    for _ in range(levels - 1):
        schema = _obj({"a": schema})
    return schema


STRICT_OK: dict[str, dict[str, Any]] = {
    "nullable union": _obj({"a": {"anyOf": [{"type": "string"}, {"type": "null"}]}}),
    "type list": _obj({"a": {"type": ["string", "null"], "description": "maybe"}}),
    "string constraints": _obj({"a": {"type": "string", "pattern": "^x", "format": "uuid"}}),
    "number constraints": _obj({"a": {"type": "number", "minimum": 0, "exclusiveMaximum": 9}}),
    "array": _obj({"a": {"type": "array", "items": {"type": "integer"}, "maxItems": 3}}),
    "recursive ref": _obj(
        {"a": {"$ref": "#/$defs/Node"}},
        **{
            "$defs": {
                "Node": _obj({"next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}})
            }
        },
    ),
    "const": _obj({"kind": {"type": "string", "const": "x"}}),
    "empty": {"type": "object", "properties": {}, "additionalProperties": False},
    "ten levels": _nested(10),
}
STRICT_NOT_OK: dict[str, dict[str, Any]] = {
    "optional property": {**_obj({"a": {"type": "string"}}), "required": []},
    "additionalProperties missing": {"type": "object", "properties": {}},
    "additionalProperties true": _obj({}, additionalProperties=True),
    "nested object open": _obj({"a": {"type": "object", "properties": {}}}),
    "default": _obj({"a": {"type": "string", "default": "x"}}),
    "minLength": _obj({"a": {"type": "string", "minLength": 1}}),
    "oneOf": _obj({"a": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}),
    "allOf": _obj({"a": {"allOf": [{"type": "string"}]}}),
    "unsupported format": _obj({"a": {"type": "string", "format": "uri"}}),
    "untyped": _obj({"a": {}}),
    "boolean schema": _obj({"a": True}),
    "ref with description": _obj(
        {"a": {"$ref": "#/$defs/A", "description": "x"}},
        **{"$defs": {"A": {"type": "string"}}},
    ),
    "dangling ref": _obj({"a": {"$ref": "#/$defs/Missing"}}),
    "remote ref": _obj({"a": {"$ref": "https://example.com/a.json"}}),
    "root anyOf": {"anyOf": [_obj({})]},
    "unknown type": _obj({"a": {"type": "decimal"}}),
    "too deep": _nested(11),
    "too many enum values": _obj({"a": {"type": "integer", "enum": list(range(1001))}}),
}


@pytest.mark.parametrize("schema", STRICT_OK.values(), ids=STRICT_OK.keys())
def test_strict_compatible_schemas(schema: dict[str, Any]) -> None:
    assert strict_schema_problems(schema) == []
    assert is_strict_compatible(schema)


@pytest.mark.parametrize("schema", STRICT_NOT_OK.values(), ids=STRICT_NOT_OK.keys())
def test_strict_incompatible_schemas(schema: dict[str, Any]) -> None:
    assert not is_strict_compatible(schema)
    problems = strict_schema_problems(schema)
    assert problems and all(p.startswith("/") for p in problems)


# -- names -----------------------------------------------------------------------------------------

PROVIDER_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")
MCP_NAME = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")


@pytest.mark.parametrize("format", EXPORT_FORMATS)
def test_every_exported_name_is_provider_safe_and_unique(format: str) -> None:
    names = [name_of(d, format) for d in export_tools(TOOLS, format)]
    if format == "mcp":  # MCP names keep "." and need no leading letter (up to 128 characters)
        assert all(MCP_NAME.match(name) for name in names), names
        assert names == [to_mcp_name(t.id) for t in TOOLS]
    else:
        for name in names:
            assert PROVIDER_NAME.match(name), name
            assert GEMINI_NAME.match(name), name
        assert names == [to_provider_name(t.id) for t in TOOLS]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("format", EXPORT_FORMATS)
def test_exported_names_map_back_to_the_tool(format: str) -> None:
    with Gateway() as gateway:
        gateway.add(forecast, register, ping)
        gateway.add(PANDORA, handler=_weather_now)
        gateway.add(LONG, handler=_fetch_all)
        for definition, exported in zip(TOOLS, export_tools(TOOLS, format), strict=True):
            name = name_of(exported, format)
            decoded = from_provider_name(name)
            if definition is LONG and format != "mcp":  # 128 characters fit MCP names
                assert decoded is None  # shortened: resolved by the registry's table instead
            else:
                assert decoded == definition.id
            assert gateway.get_tool(name).id == definition.id
    assert to_provider_name(PANDORA.id) == "_-40scope-2fweather__weather"


# -- MCP specifics ---------------------------------------------------------------------------------


def test_mcp_entry_has_title_annotations_output_schema_and_examples() -> None:
    entry = export_tool(forecast.tool, "mcp")
    assert "title" not in entry  # no title declared: none is made up from the name
    assert entry["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }
    assert entry["_meta"] == {EXAMPLES_META_KEY: ["What's the weather in Paris?"]}
    assert "outputSchema" not in entry

    crm = export_tool(register.tool, "mcp")
    assert crm["title"] == "Register a person"
    assert "title" not in crm["annotations"]  # the declaration's title is said once
    assert crm["outputSchema"] == register.tool.output_schema_dict()
    hints = register.tool.resolved_hints
    assert crm["annotations"]["readOnlyHint"] is hints.read_only is False
    assert crm["annotations"]["destructiveHint"] is hints.destructive is True
    assert "_meta" not in crm

    declared = export_tool(ping.tool, "mcp")["annotations"]
    assert declared["readOnlyHint"] is True and declared["openWorldHint"] is False
    # An array output schema has no place before MCP 2026-07-28 (object roots only).
    assert "outputSchema" not in export_tool(LONG, "mcp")


@pytest.mark.parametrize("format", [f for f in EXPORT_FORMATS if f != "mcp"])
def test_prompt_examples_are_not_sent_to_model_providers(format: str) -> None:
    assert "Paris?" not in json.dumps(export_tool(forecast.tool, format))


# -- parsing calls ---------------------------------------------------------------------------------

ARGS: dict[str, object] = {"city": "Paris", "unit": "celsius"}
NAME = to_provider_name(forecast.tool.id)
PANDORA_NAME = to_provider_name(PANDORA.id)


def test_parse_openai_chat_message_built_with_the_sdk() -> None:
    message = openai_chat.ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            openai_chat.ChatCompletionMessageFunctionToolCall(
                id="call_1",
                type="function",
                function=Function(name=NAME, arguments=json.dumps(ARGS)),
            ),
            openai_chat.ChatCompletionMessageFunctionToolCall(
                id="call_2",
                type="function",
                function=Function(name=PANDORA_NAME, arguments='{"place": "Oslo"}'),
            ),
        ],
    )
    calls = parse_openai_tool_calls(message.model_dump())
    assert calls == [
        ToolCall("demo:forecast", ARGS, "call_1"),
        ToolCall("@scope/weather:weather", {"place": "Oslo"}, "call_2"),
    ]
    assert parse_tool_calls(message.model_dump(), "openai") == calls
    # A single tool call, a list, and a whole ChatCompletion give the same calls.
    assert parse_openai_tool_calls(message.model_dump()["tool_calls"][0]) == calls[:1]
    assert parse_openai_tool_calls(message.model_dump()["tool_calls"]) == calls
    completion = openai_chat.ChatCompletion(
        id="c",
        created=0,
        model="gpt",
        object="chat.completion",
        choices=[Choice(index=0, finish_reason="tool_calls", message=message)],
    )
    assert parse_openai_tool_calls(completion.model_dump()) == calls


def test_parse_openai_message_without_tool_calls_is_empty() -> None:
    message = openai_chat.ChatCompletionMessage(role="assistant", content="Hello")
    assert parse_openai_tool_calls(message.model_dump()) == []


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('["a", "b"]', "must encode a JSON object, not list"),
        ("42", "must encode a JSON object, not int"),
        (42, "must be a JSON object or a string"),
    ],
)
def test_malformed_openai_arguments_name_the_field(arguments: Any, problem: str) -> None:
    function = {"name": NAME, "arguments": arguments}
    payload = {"tool_calls": [{"id": "c", "type": "function", "function": function}]}
    with pytest.raises(ToolCallParseError, match=re.escape(problem)) as info:
        parse_openai_tool_calls(payload)
    assert "tool_calls[0].function.arguments" in str(info.value)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}, "function.name"),
        ({"tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}, "tool_calls[0].type"),
        ({"tool_calls": "nope"}, "tool_calls"),
        ({"tool_calls": [{"id": 7, "function": {"name": "a__b"}}]}, "tool_calls[0].id"),
        ("a string", "payload"),
        ({"content": "hi"}, "payload"),
    ],
)
def test_malformed_openai_payloads_are_parse_errors(payload: Any, field: str) -> None:
    with pytest.raises(ToolCallParseError) as info:
        parse_openai_tool_calls(payload)
    assert field in str(info.value)


def test_parse_openai_responses_items_built_with_the_sdk() -> None:
    call = openai_responses.ResponseFunctionToolCall(
        type="function_call", id="fc_1", call_id="call_9", name=NAME, arguments=json.dumps(ARGS)
    )
    text = openai_responses.ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[
            openai_responses.ResponseOutputText(type="output_text", text="hi", annotations=[])
        ],
    )
    expected = [ToolCall("demo:forecast", ARGS, "call_9")]
    assert parse_openai_responses_tool_calls(call.model_dump()) == expected
    items = [text.model_dump(), call.model_dump()]
    assert parse_openai_responses_tool_calls(items) == expected
    assert parse_tool_calls({"id": "resp_1", "output": items}, "openai-responses") == expected
    with pytest.raises(ToolCallParseError, match=r"payload\.arguments"):
        parse_openai_responses_tool_calls({**call.model_dump(), "arguments": "[1]"})
    with pytest.raises(ToolCallParseError, match="'message'"):
        parse_openai_responses_tool_calls(text.model_dump())


def test_parse_anthropic_message_built_with_the_sdk() -> None:
    message = anthropic_types.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude",
        content=[
            anthropic_types.TextBlock(type="text", text="Let me check."),
            anthropic_types.ToolUseBlock(type="tool_use", id="toolu_1", name=NAME, input=ARGS),
        ],
        stop_reason="tool_use",
        stop_sequence=None,
        usage=anthropic_types.Usage(input_tokens=1, output_tokens=1),
    )
    expected = [ToolCall("demo:forecast", ARGS, "toolu_1")]
    assert parse_anthropic_tool_calls(message.model_dump()) == expected
    assert parse_tool_calls(message.model_dump()["content"], "anthropic") == expected
    assert parse_anthropic_tool_calls(message.model_dump()["content"][1]) == expected
    with pytest.raises(ToolCallParseError, match=r"content\[0\]\.input"):
        parse_anthropic_tool_calls(
            {"content": [{"type": "tool_use", "id": "t", "name": NAME, "input": "{}"}]}
        )
    with pytest.raises(ToolCallParseError, match="'text'"):
        parse_anthropic_tool_calls({"type": "text", "text": "hi"})


def test_parse_gemini_parts_built_with_the_sdk() -> None:
    with_id = gemini_types.Part(
        function_call=gemini_types.FunctionCall(name=NAME, args=ARGS, id="f1")
    )
    without_id = gemini_types.Part(
        function_call=gemini_types.FunctionCall(name=PANDORA_NAME, args={"place": "Oslo"})
    )
    content = gemini_types.Content(
        role="model", parts=[gemini_types.Part(text="Checking."), with_id, without_id]
    )
    expected = [
        ToolCall("demo:forecast", ARGS, "f1"),
        ToolCall("@scope/weather:weather", {"place": "Oslo"}, None),
    ]
    # The REST spelling (camelCase) and the Python SDK's model_dump() spelling (snake_case).
    rest = content.model_dump(by_alias=True, exclude_none=True, mode="json")
    assert "functionCall" in rest["parts"][1]
    assert parse_gemini_function_calls(rest) == expected
    assert parse_gemini_function_calls(content.model_dump()) == expected
    response = gemini_types.GenerateContentResponse(
        candidates=[gemini_types.Candidate(content=content)]
    )
    assert parse_tool_calls(response.model_dump(by_alias=True, exclude_none=True), "gemini") == (
        expected
    )
    assert parse_gemini_function_calls(rest["parts"][1]) == expected[:1]
    assert parse_gemini_function_calls({"name": NAME}) == [ToolCall("demo:forecast", {}, None)]
    with pytest.raises(ToolCallParseError, match=r"parts\[0\]\.functionCall\.args"):
        parse_gemini_function_calls({"parts": [{"functionCall": {"name": NAME, "args": [1]}}]})


def test_parse_mcp_params_built_with_the_sdk() -> None:
    params = mcp_types.CallToolRequestParams(name=NAME, arguments=ARGS)
    dumped = params.model_dump(by_alias=True, exclude_none=True)
    assert parse_mcp_tool_call(dumped) == ToolCall("demo:forecast", ARGS, None)
    request = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": dumped}
    assert parse_tool_calls(request, "mcp") == [ToolCall("demo:forecast", ARGS, "7")]
    assert parse_mcp_tool_call({"name": NAME}).arguments == {}
    with pytest.raises(ToolCallParseError, match=r"payload\.params\.arguments"):
        parse_mcp_tool_call({"method": "tools/call", "params": {"name": NAME, "arguments": "{}"}})
    with pytest.raises(ToolCallParseError, match="tools/list"):
        parse_mcp_tool_call({"method": "tools/list", "params": {}})


def test_names_that_do_not_decode_are_kept_as_given() -> None:
    long_name = to_provider_name(LONG.id)
    call = parse_openai_tool_calls({"function": {"name": long_name, "arguments": "{}"}, "id": "c"})
    assert call == [ToolCall(long_name, {}, "c")]
    assert parse_mcp_tool_call({"name": "plain"}).tool_id == "plain"


def test_shortened_names_are_resolved_by_the_gateway_not_decoded() -> None:
    # A shortened name ("-30" + hash) does not decode; the parsers pass it on unchanged and the
    # gateway's registry resolves it through its own table. (MCP names, up to 128 characters,
    # need no shortening here.)
    long_tool = Tool(
        id="vendor.plugin-suite.enterprise:" + "synchronise_every_calendar_entry" * 2 + "x",
        description="Synchronise calendars.",
        input_schema={"type": "object", "properties": {"place": {"type": "string"}}},
    )
    name = to_provider_name(long_tool.id)
    assert name.endswith("-307f6c1788") and from_provider_name(name) is None
    for format in (f for f in EXPORT_FORMATS if f != "mcp"):
        [exported] = export_tools([long_tool], format)
        assert name_of(exported, format) == name
    payload = {"type": "tool_use", "id": "t1", "name": name, "input": {"place": "Oslo"}}
    [call] = parse_anthropic_tool_calls(payload)
    assert call.tool_id == name
    with Gateway() as gateway:
        gateway.add(long_tool, handler=_weather_now)
        outcome = gateway.call_sync(call.tool_id, call.arguments)
    assert outcome.ok and outcome.tool_id == long_tool.id
    assert anthropic_tool_result(outcome, call)["content"] == "mild in Oslo"


# -- results ---------------------------------------------------------------------------------------

SECRET_VIZ = {"type": "markdown", "content": "SECRET-VISUALIZATION"}


def _ok(tool_id: str, content: Any) -> CallOutcome:
    return CallOutcome(
        CallStatus.OK,
        tool_id,
        "call_gateway",
        content=content,
        visualization=SECRET_VIZ,
        detail="SECRET-DETAIL",
        metadata={"note": "SECRET-METADATA"},
    )


def _error(tool_id: str) -> CallOutcome:
    return CallOutcome(
        CallStatus.ERROR,
        tool_id,
        "call_gateway",
        code=ErrorCode.TOOL_ERROR,
        message="The city is unknown.",
        visualization=SECRET_VIZ,
        detail="SECRET-DETAIL",
    )


def _pending(tool_id: str) -> CallOutcome:
    approval = ApprovalRequest(
        id="req_1",
        tool_id=tool_id,
        title="Register?",
        risk="high",
        facts=(),
        arguments={},
        arguments_digest="digest",
        definition_hash="hash",
        created_at=0.0,
        expires_at=60.0,
    )
    return CallOutcome(
        CallStatus.PENDING_APPROVAL,
        tool_id,
        "call_gateway",
        message="Waiting for approval.",
        approval=approval,
    )


OUTCOMES: dict[str, Callable[[str], CallOutcome]] = {
    "ok-object": lambda t: _ok(t, {"temperature": 21, "sky": "clear"}),
    "ok-text": lambda t: _ok(t, "sunny"),
    "ok-list": lambda t: _ok(t, [1, 2, 3]),
    "error": _error,
    "pending": _pending,
}


def _is_error(result: Mapping[str, Any], format: str) -> bool | None:
    if format == "anthropic":
        return bool(result["is_error"])
    if format == "mcp":
        return bool(result["isError"])
    if format == "gemini":
        response = result["functionResponse"]["response"]
        assert ("error" in response) != ("output" in response)
        return "error" in response
    return None  # OpenAI has no error flag; the text says it


@pytest.mark.parametrize("format", EXPORT_FORMATS)
@pytest.mark.parametrize("kind", OUTCOMES, ids=list(OUTCOMES))
def test_results_are_accepted_by_the_sdk_type_and_flag_errors(format: str, kind: str) -> None:
    outcome = OUTCOMES[kind]("demo:forecast")
    call = ToolCall("demo:forecast", ARGS, "provider_call_1")
    result = tool_result(outcome, format, call=call)
    RESULT_TYPES[format](result)
    text = json.dumps(result)
    assert "SECRET" not in text  # visualization, detail and metadata never reach a model
    flagged = _is_error(result, format)
    assert flagged in (None, kind == "error")
    if kind == "error":
        assert "tool_error" in text and "The city is unknown." in text


@pytest.mark.parametrize("format", ["openai", "openai-responses", "anthropic"])
def test_results_carry_the_providers_call_id(format: str) -> None:
    key = {"openai": "tool_call_id", "openai-responses": "call_id", "anthropic": "tool_use_id"}
    outcome = _ok("demo:forecast", "sunny")
    result = tool_result(outcome, format, call=ToolCall("demo:forecast", ARGS, "toolu_42"))
    assert result[key[format]] == "toolu_42"
    assert tool_result(outcome, format)[key[format]] == "call_gateway"


def test_openai_tool_message_is_the_outcome_text() -> None:
    outcome = _ok("demo:forecast", {"temperature": 21})
    message = openai_tool_message(outcome, ToolCall("demo:forecast", {}, "call_1"))
    assert message == {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}
    error = openai_tool_message(_error("demo:forecast"), ToolCall("demo:forecast", {}, "c"))
    assert error["content"] == "Error [tool_error]: The city is unknown."


def test_anthropic_error_flag() -> None:
    assert anthropic_tool_result(_error("demo:forecast"))["is_error"] is True
    assert anthropic_tool_result(_ok("demo:forecast", "x"))["is_error"] is False
    assert anthropic_tool_result(_pending("demo:forecast"))["is_error"] is False


def test_gemini_function_response() -> None:
    call = ToolCall("@scope/weather:weather", {}, None)
    ok = gemini_function_response(_ok(PANDORA.id, {"t": 1}), call)
    assert ok == {"functionResponse": {"name": PANDORA_NAME, "response": {"output": {"t": 1}}}}
    with_id = gemini_function_response(_error(PANDORA.id), ToolCall(PANDORA.id, {}, "f1"))
    assert with_id["functionResponse"]["id"] == "f1"
    assert with_id["functionResponse"]["response"] == {
        "error": {"code": "tool_error", "message": "The city is unknown."}
    }
    # An unresolved provider name (no colon) is used as the function name unchanged.
    long_name = to_provider_name(LONG.id)
    unresolved = gemini_function_response(_ok(long_name, "x"))
    assert unresolved["functionResponse"]["name"] == long_name
    gemini_types.FunctionResponse.model_validate(ok["functionResponse"])


def test_mcp_call_tool_result() -> None:
    ok = mcp_call_tool_result(_ok("crm:register", {"id": 1, "status": "new"}))
    assert ok == {
        "content": [{"type": "text", "text": '{"id": 1, "status": "new"}'}],
        "structuredContent": {"id": 1, "status": "new"},
        "isError": False,
    }
    assert "structuredContent" not in mcp_call_tool_result(_ok("demo:forecast", "sunny"))
    assert "structuredContent" not in mcp_call_tool_result(_ok("demo:forecast", [1]))
    error = mcp_call_tool_result(_error("demo:forecast"))
    assert error["isError"] is True and "structuredContent" not in error
    assert mcp_types.CallToolResult.model_validate(error).is_error is True


# -- the SDK validation itself rejects wrong shapes -----------------------------------------------

MALFORMED: list[tuple[str, Callable[[Any], None], Any]] = [
    # A Responses-shaped tool is not a Chat Completions tool, and vice versa.
    ("openai", DEFINITION_TYPES["openai"], export_tool(PANDORA, "openai-responses")),
    ("openai-responses", DEFINITION_TYPES["openai-responses"], export_tool(PANDORA, "openai")),
    # A misplaced key next to the right ones.
    (
        "openai-extra",
        DEFINITION_TYPES["openai"],
        {**export_tool(PANDORA, "openai"), "strict": True},
    ),
    (
        "openai-nested-extra",
        DEFINITION_TYPES["openai"],
        {"type": "function", "function": {"name": "a", "input_schema": {}}},
    ),
    ("anthropic", DEFINITION_TYPES["anthropic"], export_tool(PANDORA, "openai-responses")),
    ("gemini", DEFINITION_TYPES["gemini"], export_tool(PANDORA, "anthropic")),
    ("mcp", DEFINITION_TYPES["mcp"], export_tool(PANDORA, "anthropic")),
    ("mcp-extra", DEFINITION_TYPES["mcp"], {**export_tool(PANDORA, "mcp"), "parameters": {}}),
    ("anthropic-result", RESULT_TYPES["anthropic"], {"type": "tool_result", "is_error": True}),
    (
        "anthropic-result-flag",
        RESULT_TYPES["anthropic"],
        {"type": "tool_result", "tool_use_id": "t", "content": "x", "is_error": "yes"},
    ),
    ("openai-result", RESULT_TYPES["openai"], {"role": "tool", "content": "x"}),
    ("responses-result", RESULT_TYPES["openai-responses"], {"type": "function_call", "output": ""}),
    ("gemini-result", RESULT_TYPES["gemini"], {"function_response_": {"name": "a"}}),
    ("mcp-result", RESULT_TYPES["mcp"], {"isError": True}),
]


@pytest.mark.parametrize(
    ("validate", "malformed"), [(v, m) for _, v, m in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_sdk_validation_rejects_malformed_dicts(
    validate: Callable[[Any], None], malformed: Any
) -> None:
    with pytest.raises(ShapeError):
        validate(malformed)


# -- end to end and purity ----------------------------------------------------------------------


@pytest.mark.parametrize("format", EXPORT_FORMATS)
def test_round_trip_through_the_gateway(format: str) -> None:
    """Export, let a "model" call by name, parse, run, answer: every step in the SDK's shapes."""
    with Gateway() as gateway:
        gateway.add(forecast)
        [definition] = export_tools(gateway.list_tools(), format)
        name = name_of(definition, format)
        payloads = {
            "openai": {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(ARGS)},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": name, "arguments": '{"city": "Oslo"}'},
                    },
                ],
            },
            "openai-responses": [
                {
                    "type": "function_call",
                    "call_id": "c1",
                    "name": name,
                    "arguments": json.dumps(ARGS),
                },
                {
                    "type": "function_call",
                    "call_id": "c2",
                    "name": name,
                    "arguments": '{"city": "Oslo"}',
                },
            ],
            "anthropic": {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "c1", "name": name, "input": ARGS},
                    {"type": "tool_use", "id": "c2", "name": name, "input": {"city": "Oslo"}},
                ],
            },
            "gemini": {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": "c1", "name": name, "args": ARGS}},
                    {"functionCall": {"id": "c2", "name": name, "args": {"city": "Oslo"}}},
                ],
            },
        }
        if format == "mcp":
            calls = [
                parse_mcp_tool_call({"name": name, "arguments": ARGS}),
                parse_mcp_tool_call({"name": name, "arguments": {"city": "Oslo"}}),
            ]
        else:
            calls = parse_tool_calls(payloads[format], format)
        outcomes = [gateway.call_sync(c.tool_id, c.arguments) for c in calls]
        assert [o.status for o in outcomes] == [CallStatus.OK, CallStatus.ERROR]
        assert outcomes[1].code is ErrorCode.INVALID_ARGUMENTS
        results = [tool_result(o, format, call=c) for o, c in zip(outcomes, calls, strict=True)]
        for result in results:
            RESULT_TYPES[format](result)
        assert "sunny in Paris, 21 celsius" in json.dumps(results[0])
        assert _is_error(results[0], format) in (None, False)
        assert _is_error(results[1], format) in (None, True)


@pytest.mark.slow
def test_exporters_do_not_import_provider_sdks() -> None:
    code = (
        "import json, sys, toolgate.exporters\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(result.stdout))
    assert "toolgate" in loaded
    assert loaded & {"openai", "anthropic", "google", "mcp", "mcp_types"} == set()


def test_field_descriptions_reach_every_format() -> None:
    """Annotated and docstring descriptions survive into every provider's schema."""
    for format in EXPORT_FORMATS:
        schema = schema_of(export_tool(register.tool, format), format)
        assert schema["properties"]["tags"]["description"] == "Labels to attach"
        assert schema["properties"]["note"]["description"] == "A free-text note."
