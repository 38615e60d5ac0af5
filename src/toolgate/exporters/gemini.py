"""Google Gemini: function declarations, ``functionCall`` parts and ``functionResponse`` parts.

``google.genai.types.FunctionDeclaration`` offers two ways to describe parameters:

* ``parameters``: a ``Schema``, a select subset of the OpenAPI 3.0 schema object. It has no
  ``$ref``/``$defs``, no ``additionalProperties`` and no ``const``, so a tool with a nested model
  or an enum (which pydantic puts in ``$defs``) would have to be rewritten, lossily;
* ``parametersJsonSchema``: the schema as JSON Schema, mutually exclusive with ``parameters``.
  It takes the tool's schema unchanged, ``$defs``/``$ref``, ``anyOf`` and
  ``additionalProperties`` included, and it is what the SDK itself prefers when it builds a
  declaration from a Python callable (``use_json_schema=True``).

So declarations use ``parametersJsonSchema``, and ``responseJsonSchema`` for a declared output
schema, each in the subset of JSON Schema Gemini's ``JSONSchema`` type accepts
(:func:`~toolgate.exporters.gemini_schema.gemini_json_schema`: ``$schema`` and other keywords it
forbids are left out, ``const`` becomes a one-value ``enum``). Keys are camelCase, as the REST
API spells them (the SDK's types accept both spellings); :func:`gemini_function_declaration`
returns one declaration, to be sent as ``{"functionDeclarations": [...]}`` in a ``Tool``.
Gemini has no place for prompt examples.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ToolCallParseError
from ..model.call import CallOutcome, CallStatus, ToolCall
from ..model.content import ContentResult
from ..model.names import to_provider_name
from ..model.tool import Tool
from . import content_parts
from ._common import (
    as_mapping,
    function_name_for,
    items_of,
    json_ready,
    object_schema,
    optional_str,
    parse_arguments,
    require_str,
    tool_id_for,
)
from .gemini_schema import gemini_json_schema

__all__ = ["gemini_function_declaration", "gemini_function_response", "parse_gemini_function_calls"]

_CALL_KEYS = ("functionCall", "function_call")


def gemini_function_declaration(tool: Tool) -> dict[str, Any]:
    """The ``FunctionDeclaration``: ``{"name", "description", "parametersJsonSchema",
    "responseJsonSchema"?}``."""
    declaration: dict[str, Any] = {
        "name": to_provider_name(tool.id),
        "description": tool.description,
        "parametersJsonSchema": gemini_json_schema(object_schema(tool.input_schema)),
    }
    output_schema = tool.output_schema_dict()
    if output_schema is not None:
        declaration["responseJsonSchema"] = gemini_json_schema(output_schema)
    return declaration


def _function_call(data: Mapping[str, Any], where: str) -> ToolCall:
    name = require_str(data, "name", where)
    if not isinstance(data.get("args", {}), (Mapping, type(None))):
        raise ToolCallParseError(f"{where}.args must be a JSON object")
    arguments = parse_arguments(data.get("args"), f"{where}.args")
    return ToolCall(tool_id_for(name), arguments, optional_str(data, "id", where))


def _part_call(part: Mapping[str, Any], where: str) -> ToolCall | None:
    for key in _CALL_KEYS:
        if part.get(key) is not None:
            return _function_call(as_mapping(part[key], f"{where}.{key}"), f"{where}.{key}")
    return None


def _parts(parts: Any, where: str) -> list[ToolCall]:
    calls = (_part_call(part, path) for path, part in items_of(parts, where))
    return [call for call in calls if call is not None]


def parse_gemini_function_calls(payload: Any) -> list[ToolCall]:
    """The function calls in a Gemini payload, in order.

    Accepts a ``GenerateContentResponse`` (every candidate's content), a ``Content``
    (``{"role": "model", "parts": [...]}``), a list of parts, one part
    (``{"functionCall": {"name", "args", "id"?}}``) or a bare ``FunctionCall``. Both the REST
    spelling (``functionCall``) and the Python SDK's ``model_dump()`` spelling
    (``function_call``) are read. Parts without a call (text, thoughts) are skipped. ``id`` is
    optional in Gemini; without it the call's ``call_id`` is ``None``.
    """
    if isinstance(payload, (list, tuple)):
        return _parts(payload, "payload")
    data = as_mapping(payload, "payload")
    if "candidates" in data:
        calls: list[ToolCall] = []
        for path, candidate in items_of(data["candidates"], "payload.candidates"):
            content = candidate.get("content")
            if content is not None:
                content = as_mapping(content, f"{path}.content")
                calls.extend(_parts(content.get("parts") or [], f"{path}.content.parts"))
        return calls
    if "parts" in data:
        return _parts(data["parts"] or [], "payload.parts")
    call = _part_call(data, "payload")
    if call is not None:
        return [call]
    if "name" in data:
        return [_function_call(data, "payload")]
    raise ToolCallParseError(
        "payload: expected a response, a content with 'parts', a part with 'functionCall' or a "
        "function call"
    )


def gemini_function_response(outcome: CallOutcome, call: ToolCall | None = None) -> dict[str, Any]:
    """The ``functionResponse`` part for an outcome.

    ``response`` is ``{"output": <content>}`` for a result (the JSON content itself, or the
    pending-approval text) and ``{"error": {"code", "message"}}`` for an error, the keys Gemini
    documents for the two cases. ``name`` is the function name the model called; ``id`` is set
    only when the parsed ``call`` carries one (Gemini call ids are optional, and the outcome's
    own id is the gateway's, which the model never saw).

    A result made of content blocks (an MCP upstream's image, resource link…) is answered with
    ``{"output": <structuredContent, else the blocks' text and notes>}`` and, for each PNG, JPEG
    or WebP image, an ``inlineData`` part in the ``functionResponse``'s ``parts`` (multimodal
    function responses), named by a ``displayName`` the text mentions
    (:mod:`toolgate.exporters.content_parts`).
    """
    parts: list[dict[str, Any]] = []
    if outcome.status is CallStatus.OK and isinstance(outcome.content, ContentResult):
        text, parts = content_parts.gemini_parts(outcome.content)
        structured = outcome.content.structured
        response: dict[str, Any] = {
            "output": text if structured is None else json_ready(structured)
        }
    elif outcome.status is CallStatus.ERROR:
        response = {
            "error": {
                "code": None if outcome.code is None else str(outcome.code),
                "message": outcome.message,
            }
        }
    elif outcome.status is CallStatus.OK:
        response = {"output": json_ready(outcome.content)}
    else:
        response = {"output": outcome.text}
    function_response: dict[str, Any] = {"name": function_name_for(outcome, call)}
    if call is not None and call.call_id:
        function_response["id"] = call.call_id
    function_response["response"] = response
    if parts:
        function_response["parts"] = parts
    return {"functionResponse": function_response}
