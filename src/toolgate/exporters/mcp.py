"""Model Context Protocol: ``tools/list`` entries, ``tools/call`` params and ``CallToolResult``.

Names are MCP names (:func:`~toolgate.model.names.to_mcp_name`): the upstream's name kept as
written after the namespace (``everything__get-sum``, ``demo__file.diff``), with only what MCP
forbids escaped. ``title`` is exported only when the declaration has one. ``annotations`` carries
the four behaviour hints resolved from the side-effect level, so a client sees explicit booleans
— toolgate's own declaration. ``outputSchema`` is exported when the tool declares one whose root
is an object: up to protocol version 2025-11-25 MCP restricts ``outputSchema`` and
``structuredContent`` to objects.

A tool of an upstream MCP server is shown as the upstream shows it: its ``title``,
``annotations``, ``execution`` (``taskSupport``), ``icons`` and ``_meta`` as listed and only when
listed (:class:`~toolgate.model.McpToolMetadata`: without ``toolgate/`` keys in ``_meta`` and
icons that are not ``https:`` or ``data:image/``); nothing is invented. A tool toolgate holds
(:func:`~toolgate.formats.mcp_server.pinning.held_tool`) shows none of it. The operator's
declarations win where they say something: a declared level replaces the four hints, a ``Tool``
resource's title and description replace the upstream's.

MCP is the one target with a place for extra, non-model data, ``_meta`` (keys ``prefix/name``;
``toolgate/`` is not one of the prefixes MCP reserves). Two things go there:

* ``toolgate/examples``: the tool's prompt examples (``display.examples``, Extension Info
  ``examples``) — prompts that should select the tool, for clients that route or suggest;
* ``toolgate/ui``: its tile (Extension Info ``ui``) as ``{"prefix", "args": [{"name", "prefix",
  "suffix"}], "suffix"}`` — args as a list, because their order is the display order — so a
  client can show a call as toolgate does (:func:`toolgate.render_display`).

Neither goes into the description: that text is the tool author's, every model reads it on every
request, and prompts that *select* a tool are not a description of what it does. The model
providers' definitions have no field for them (OpenAI, Gemini), or only one for example
*arguments* (Anthropic ``input_examples``), so they are exported to MCP only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._json import thaw
from ..errors import ToolCallParseError
from ..model.call import CallOutcome, CallStatus, ToolCall
from ..model.mcp_metadata import McpToolMetadata
from ..model.names import to_mcp_name
from ..model.tool import McpEntry, Tool
from ._common import (
    as_mapping,
    json_ready,
    object_schema,
    parse_arguments,
    require_str,
    tool_id_for,
)
from .content_parts import mcp_content_result

__all__ = [
    "EXAMPLES_META_KEY",
    "UI_META_KEY",
    "mcp_call_tool_result",
    "mcp_tool",
    "parse_mcp_tool_call",
]

#: The ``_meta`` key holding a tool's prompt examples.
EXAMPLES_META_KEY = "toolgate/examples"
#: The ``_meta`` key holding a tool's tile display (Extension Info ``ui``).
UI_META_KEY = "toolgate/ui"


def mcp_tool(tool: Tool) -> dict[str, Any]:
    """The ``tools/list`` entry: ``name``, ``title`` (when declared), ``description``,
    ``inputSchema``, ``outputSchema`` (object output schemas only), ``annotations``,
    ``execution`` and ``icons`` (upstream tools that list them) and ``_meta`` (the upstream's,
    plus examples and tile when the tool has them)."""
    upstream = tool.entry.metadata if isinstance(tool.entry, McpEntry) else None
    entry: dict[str, Any] = {"name": to_mcp_name(tool.id)}
    # An upstream's title only while the tool has one: a held tool's title is blanked, and
    # nothing the upstream wrote may come back through its metadata.
    title = tool.title if upstream is None or tool.title is None else upstream.title
    if title is not None:
        entry["title"] = title
    entry["description"] = tool.description
    entry["inputSchema"] = object_schema(tool.input_schema)
    output_schema = tool.output_schema_dict()
    if output_schema is not None and output_schema.get("type") == "object":
        entry["outputSchema"] = output_schema
    annotations = _annotations(tool, upstream)
    if annotations is not None:
        entry["annotations"] = annotations
    if upstream is not None and upstream.execution is not None:
        entry["execution"] = thaw(upstream.execution)
    if upstream is not None and upstream.icons is not None:
        entry["icons"] = thaw(upstream.icons)
    meta: dict[str, Any] = {}
    if upstream is not None and upstream.meta is not None:
        meta.update(thaw(upstream.meta))
    if tool.display.examples:
        meta[EXAMPLES_META_KEY] = list(tool.display.examples)
    ui = tool.display.ui
    if ui is not None:
        meta[UI_META_KEY] = {
            "prefix": ui.prefix,
            "args": [{"name": a.name, "prefix": a.prefix, "suffix": a.suffix} for a in ui.args],
            "suffix": ui.suffix,
        }
    if meta:
        entry["_meta"] = meta
    return entry


def _annotations(tool: Tool, upstream: McpToolMetadata | None) -> dict[str, Any] | None:
    """The upstream's annotations as listed; toolgate's resolved hints where it declares the
    level (every tool of its own formats, an upstream tool whose level the operator set)."""
    annotations: dict[str, Any] | None = None
    if upstream is not None and upstream.annotations is not None:
        annotations = thaw(upstream.annotations)
    hints = tool.resolved_hints if upstream is None else upstream.hints
    if hints is not None:
        annotations = annotations or {}
        annotations["readOnlyHint"] = hints.read_only
        annotations["destructiveHint"] = hints.destructive
        annotations["idempotentHint"] = hints.idempotent
        annotations["openWorldHint"] = hints.open_world
    return annotations


def parse_mcp_tool_call(payload: Any) -> ToolCall:
    """The call in a ``tools/call`` request: its ``params`` (``{"name", "arguments"}``) or the
    whole JSON-RPC request, whose ``id`` then becomes the call id."""
    data = as_mapping(payload, "payload")
    call_id: str | None = None
    where = "payload"
    if "params" in data:
        method = data.get("method", "tools/call")
        if method != "tools/call":
            raise ToolCallParseError(f"payload.method is {method!r}; expected 'tools/call'")
        request_id = data.get("id")
        if request_id is not None:
            if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
                raise ToolCallParseError("payload.id must be a string or an integer")
            call_id = str(request_id)
        where = "payload.params"
        data = as_mapping(data["params"], where)
    name = require_str(data, "name", where)
    arguments = data.get("arguments")
    if not isinstance(arguments, (Mapping, type(None))):
        raise ToolCallParseError(f"{where}.arguments must be a JSON object")
    return ToolCall(tool_id_for(name), parse_arguments(arguments, f"{where}.arguments"), call_id)


def mcp_call_tool_result(outcome: CallOutcome) -> dict[str, Any]:
    """The ``CallToolResult`` for an outcome: one text block with ``outcome.text``,
    ``structuredContent`` when the call succeeded with a JSON object, and ``isError``.

    A result made of content blocks (:class:`~toolgate.model.content.ContentResult`) is sent as
    the same blocks, each with its ``annotations`` and ``_meta`` as the upstream gave them (after
    the pipeline's masking and overflow), and its ``structuredContent`` when it has one.

    Tool errors are reported inside the result with ``isError: true`` (not as JSON-RPC errors),
    as MCP asks, so the model can read them and correct itself.
    """
    rich = mcp_content_result(outcome)
    if rich is not None:
        return rich
    result: dict[str, Any] = {"content": [{"type": "text", "text": outcome.text}]}
    if outcome.status is CallStatus.OK and isinstance(outcome.content, Mapping):
        result["structuredContent"] = json_ready(outcome.content)
    result["isError"] = outcome.is_error
    return result
