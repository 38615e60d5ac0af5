"""The tools an MCP server lists → toolgate :class:`Tool` values, treating the server as untrusted.

An MCP server describes its own tools (``tools/list``): name, title, description, input and output
schemas and annotations. None of it is the operator's word, so:

* **Level.** The operator's level wins: a ``Tool`` resource's ``sideEffects.level`` for that tool,
  else the ``MCPServer``'s ``spec.sideEffects.level``. Without one, every tool is
  ``external_write`` — MCP's own assumption for a tool that says nothing (not read-only,
  destructive, open world), and a level that asks a person by default — whatever the server's
  annotations claim: the MCP specification says clients must treat annotations as untrusted
  unless the server is trusted, and a server must not be able to talk its way out of an approval
  with ``readOnlyHint: true``. ``spec.trustAnnotations: true`` is how an operator says the
  server is trusted; then ``readOnlyHint`` / ``openWorldHint`` map to a level as for
  plugins (:func:`~toolgate.model.effects.level_from_annotations`).
* **Hints.** The annotations are kept on the tool as :class:`~toolgate.model.ToolHints` (shown
  to agents and people); hints never relax a rule.
* **Passed on.** ``title``, ``annotations``, ``execution``, ``icons`` and ``_meta`` are kept as
  listed (each bounded in size) in :class:`~toolgate.model.McpToolMetadata`, for the MCP export
  alone: a client of toolgate sees what a client of the server sees. Where the operator
  declared something — a level (then the four behaviour hints are toolgate's), a ``Tool``
  resource's title or description — that wins. Two things are never passed on: ``_meta`` keys
  under ``toolgate/`` (toolgate's own, set only by its declarations) and icons whose ``src`` is
  not an ``https:`` URL or a ``data:image/…`` URI of at most
  :data:`~toolgate.model.mcp_metadata.MAX_ICON_DATA_URI` characters
  (:func:`~toolgate.model.mcp_metadata.safe_icons`). Every passed-on string is also read for
  hidden text, and a change of it is a change the pinning review holds
  (:mod:`.pinning`).
* **Sizes and schemas.** Names must make valid toolgate ids; descriptions and titles are bounded;
  schemas are bounded in size and depth and must compile offline (no remote ``$ref``). A tool
  that fails a check is skipped with a warning naming it; the server's other tools load.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from ...errors import ToolDefinitionError
from ...model import ImplementationKind, McpEntry, McpToolMetadata, SourceFormat, Tool, ToolSource
from ...model.effects import SideEffect, ToolHints, level_from_annotations
from ...model.hidden_text import hidden_characters
from ...model.mcp_metadata import bounded_json, safe_icons, upstream_meta
from ...schema_check import compile_schema
from .._common.diagnostics import Diagnostic, Severity
from .._common.safe_yaml import shape_problem
from .spec import McpServerSpec

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_SCHEMA_CHARS",
    "MAX_TITLE",
    "hints_from_annotations",
    "level_for",
    "merge_ref",
    "metadata_of",
    "tool_from_listing",
]

#: Characters of a server's tool description kept (the rest is cut with a note).
MAX_DESCRIPTION = 8_000
MAX_TITLE = 200
#: A schema's size as JSON, and its nesting, beyond which the tool is refused.
MAX_SCHEMA_CHARS = 100_000
MAX_SCHEMA_DEPTH = 32
_MAX_SCHEMA_NODES = 10_000
# MCP's recommended tool names (SEP-986) plus anything else that makes a valid toolgate id part.
_NAME = re.compile(r"^[^\s:]{1,128}$")
_TRIVIAL_SCHEMA: Mapping[str, Any] = {"type": "object"}


def level_for(spec: McpServerSpec, annotations: Mapping[str, Any]) -> SideEffect:
    """The level of a server's tool that no ``Tool`` resource describes (see the module doc)."""
    if spec.level is not None:
        return spec.level
    if spec.trust_annotations:
        read_only = annotations.get("readOnlyHint")
        open_world = annotations.get("openWorldHint")
        return level_from_annotations(
            read_only=read_only if isinstance(read_only, bool) else None,
            open_world=open_world if isinstance(open_world, bool) else None,
        )
    return SideEffect.EXTERNAL_WRITE


def hints_from_annotations(annotations: Mapping[str, Any]) -> ToolHints:
    """The server's annotations as hints (non-boolean values are dropped)."""

    def flag(key: str) -> bool | None:
        value = annotations.get(key)
        return value if isinstance(value, bool) else None

    return ToolHints(
        read_only=flag("readOnlyHint"),
        destructive=flag("destructiveHint"),
        idempotent=flag("idempotentHint"),
        open_world=flag("openWorldHint"),
    )


def metadata_of(listed: Mapping[str, Any], *, level: SideEffect | None) -> McpToolMetadata:
    """What a ``tools/list`` entry declares to be passed on (see the module doc): each field as
    given, or ``None`` when absent, of the wrong JSON type or too large; with the operator's
    ``level``, the behaviour hints shown are that level's."""
    title = listed.get("title")
    return McpToolMetadata(
        title=title if isinstance(title, str) and len(title) <= MAX_TITLE else None,
        annotations=bounded_json(listed.get("annotations"), dict),
        execution=bounded_json(listed.get("execution"), dict),
        icons=bounded_json(safe_icons(listed.get("icons")), list),
        meta=bounded_json(upstream_meta(listed.get("_meta")), dict),
        hints=None if level is None else ToolHints().resolved(level),
    )


def _bounded(value: Any, limit: int) -> str | None:
    """The server's text as written (white space included: a client compares it with what the
    server lists), cut at ``limit``; ``None`` when it says nothing."""
    if not isinstance(value, str) or not value.strip():
        return None
    text: str = value
    if len(text) <= limit:
        return text
    return text[:limit] + f"… [cut: the server's text was {len(text)} characters]"


def _schema(value: Any, what: str, where: str) -> tuple[Mapping[str, Any] | None, str | None]:
    """(schema, problem): a problem when the server's schema cannot be used."""
    if value is None:
        return None, None
    if not isinstance(value, Mapping):
        return None, f"its {what} is not a JSON object"
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError) as exc:
        return None, f"its {what} is not JSON ({exc})"
    if size > MAX_SCHEMA_CHARS:
        return None, f"its {what} is {size} characters of JSON (at most {MAX_SCHEMA_CHARS})"
    too_big = shape_problem(value, max_nodes=_MAX_SCHEMA_NODES, max_depth=MAX_SCHEMA_DEPTH)
    if too_big is not None:
        return None, f"its {what} is {too_big}"
    if value.get("type", "object") != "object":
        return None, f"its {what} is not an object schema (type {value.get('type')!r})"
    try:
        compile_schema(value, where)
    except ToolDefinitionError as exc:
        return None, exc.message
    return value, None


def tool_from_listing(
    spec: McpServerSpec, listed: Mapping[str, Any]
) -> tuple[Tool | None, Diagnostic | None]:
    """One tool of the server's ``tools/list`` (a JSON object) as a toolgate tool, or a warning
    saying why it is skipped."""
    name = listed.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or hidden_characters(name):
        shown = repr(name)[:80]
        return None, _warning(
            spec,
            spec.where,
            f"MCP server {spec.name} lists a tool named {shown}, which cannot be a toolgate tool "
            "name (1 to 128 characters, no white space, ':' or invisible characters); it is "
            "skipped",
        )
    tool_id = f"{spec.namespace}:{name}"
    input_schema, problem = _schema(
        listed.get("inputSchema"), "input schema", f"{tool_id}: input schema"
    )
    if problem is None and input_schema is None:
        problem = "it has no input schema"
    output_schema, output_problem = _schema(
        listed.get("outputSchema"), "output schema", f"{tool_id}: output schema"
    )
    problem = problem or output_problem
    if problem is not None:
        return None, _warning(spec, tool_id, f"skipped: {problem}")
    assert input_schema is not None
    raw_annotations = listed.get("annotations")
    annotations: Mapping[str, Any] = raw_annotations if isinstance(raw_annotations, Mapping) else {}
    title = _bounded(listed.get("title"), MAX_TITLE) or _bounded(
        annotations.get("title"), MAX_TITLE
    )
    description = _bounded(listed.get("description"), MAX_DESCRIPTION) or (
        f"{title or name} (a tool of the MCP server {spec.name}, which gave no description)"
    )
    try:
        tool = Tool(
            id=tool_id,
            description=description,
            input_schema=input_schema,
            kind=ImplementationKind.MCP,
            entry=McpEntry(
                server=spec.name,
                remote_name=name,
                metadata=metadata_of(listed, level=spec.level),
            ),
            title=title,
            output_schema=output_schema,
            timeout=spec.timeout,
            side_effect=level_for(spec, annotations),
            hints=hints_from_annotations(annotations),
            source=ToolSource(SourceFormat.RESOURCE, spec.location),
        )
    except ValueError as exc:
        return None, _warning(spec, tool_id, f"skipped: {exc}")
    return tool, None


def merge_ref(ref: Tool, remote: Tool | None) -> Tool:
    """A ``Tool`` resource naming a server's tool, completed from what the server lists.

    The resource is the operator's word and wins: its id, level, approval, safety, timeout…
    Where it leaves something out — an empty description, no title, the bare ``{type: object}``
    input schema, no output schema, no hints — the server's value is used.
    """
    if remote is None:
        return ref
    changes: dict[str, Any] = {}
    if not ref.description.strip():
        changes["description"] = remote.description
    if ref.title is None and remote.title is not None:
        changes["title"] = remote.title
    if dict(ref.input_schema) == _TRIVIAL_SCHEMA:
        changes["input_schema"] = remote.input_schema
    if ref.output_schema is None and remote.output_schema is not None:
        changes["output_schema"] = remote.output_schema
    if ref.hints == ToolHints():
        changes["hints"] = remote.hints
    remote_entry = remote.entry
    if isinstance(ref.entry, McpEntry) and isinstance(remote_entry, McpEntry):
        passed_on = remote_entry.metadata or McpToolMetadata()
        # The resource is the operator's declaration of this tool: its level gives the hints,
        # and its title (when it has one) is the title clients see.
        passed_on = dataclasses.replace(
            passed_on,
            hints=ref.hints.resolved(ref.side_effect),
            title=ref.title or passed_on.title,
        )
        changes["entry"] = dataclasses.replace(ref.entry, metadata=passed_on)
    return dataclasses.replace(ref, **changes) if changes else ref


def _warning(spec: McpServerSpec, field: str, message: str) -> Diagnostic:
    return Diagnostic(spec.location, field, message, Severity.WARNING)
