"""Plugin tool objects: checked and mapped onto a :class:`Tool`.

A plugin's entry module exports ``tools``, a list of tool objects, and optionally
``resolve_tools(ctx)`` returning more. A tool object is a ``dict`` (the format's plain object) or
any object with these attributes:

==============  ========  ====================================================================
field           required  meaning → mapping
==============  ========  ====================================================================
``id``          yes       unique within the plugin → ``Tool.id = "{pluginId}:{id}"``
``name``        yes       display name → ``title`` (unless ``annotations.title`` is set)
``description`` yes       what the model reads → ``description``
``parameters``  no        JSON Schema (``type: object``) → ``input_schema`` (default: no
                          arguments)
``execute``     yes       ``execute(input, ctx)``, sync or ``async`` → the implementation
``timeout``     no        milliseconds, default 60000 → ``timeout`` in seconds
``sandbox``     no        ``compartment`` / ``host``: overrides the manifest's mode
``permissions`` no        overrides the manifest's permissions (as a whole)
``annotations`` yes       ``readOnlyHint`` (required boolean), ``destructiveHint``,
                          ``idempotentHint``, ``openWorldHint``, ``title`` → ``hints`` and the
                          side-effect level (:func:`~toolgate.model.level_from_annotations`)
==============  ========  ====================================================================

The manifest's ``requireApproval`` becomes ``approval.required``; the permissions' ``env`` keys
become ``Tool.env`` (exactly what ``ctx.env`` will hold). Checking a tool object never calls it:
``execute`` is only inspected (its signature must accept ``(input, ctx)``). Every problem is a
:class:`Diagnostic` naming the entry module, a JSON-pointer-like field (``/tools/0/annotations``,
or ``resolve_tools()/tools/1/id`` for resolved tools) and, in the message, the plugin and the
tool.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ToolDefinitionError
from ...model import (
    ApprovalSpec,
    DisplaySpec,
    ImplementationKind,
    PythonEntry,
    SandboxMode,
    SandboxSpec,
    SourceFormat,
    Tool,
    ToolHints,
    ToolSource,
    level_from_annotations,
)
from ...schema_check import compile_schema
from .._common.diagnostics import Report, Severity
from .._common.examples import parse_examples
from .._common.messages import got
from .._common.permissions import exceeding, parse_permissions, parse_sandbox, suggest
from .manifest import PluginManifest, ToolsEntry
from .manifest import valid_local_id as _valid_id

__all__ = [
    "ANNOTATION_FIELDS",
    "DEFAULT_TIMEOUT_MS",
    "TOOL_FIELDS",
    "PluginTool",
    "build_plugin_tool",
    "listed_tools",
    "tool_label",
]

#: The plugin format's default execution timeout, in milliseconds.
DEFAULT_TIMEOUT_MS = 60_000
#: Every field of a tool object, in the format's order.
TOOL_FIELDS: tuple[str, ...] = (
    "id",
    "name",
    "description",
    "parameters",
    "execute",
    "timeout",
    "sandbox",
    "permissions",
    "annotations",
    "examples",
)
"""``examples`` is toolgate's extension (:mod:`toolgate.formats._common.examples`)."""

#: The MCP-compatible annotations the format lists, plus MCP's ``openWorldHint``.
ANNOTATION_FIELDS: tuple[str, ...] = (
    "title",
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
)
_NO_PARAMETERS: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class PluginTool:
    """A checked tool object: its :class:`Tool` (sandbox as declared) and its ``execute``."""

    tool: Tool
    local_id: str
    """The ``id`` within the plugin (``weather``)."""
    execute: Callable[..., Any]


def _get(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(key)
    return getattr(value, key, None)


def tool_label(value: Any, index: int) -> str:
    """How messages name a tool object: its id when it has a usable one, else its position."""
    local_id = _get(value, "id")
    return repr(local_id) if isinstance(local_id, str) and local_id else f"at index {index}"


class _Checker:
    """Field checks for one tool object, every message naming the plugin and the tool."""

    def __init__(self, report: Report, pointer: str, who: str) -> None:
        self.report = report
        self.pointer = pointer
        self.who = who

    def error(self, field: str, message: str) -> None:
        self.report.error(f"{self.pointer}/{field}", f"{self.who}: {message}")

    def warning(self, field: str, message: str) -> None:
        self.report.warning(f"{self.pointer}/{field}", f"{self.who}: {message}")

    def text(self, value: Any, field: str, what: str) -> str | None:
        if value is None:
            self.error(field, f"'{field}' is required: {what}")
        elif not isinstance(value, str) or not value.strip():
            self.error(field, f"'{field}' must be a non-empty string ({what}), {got(value)}")
        else:
            return value
        return None

    def flag(self, value: Any, field: str) -> bool | None:
        if value is None or isinstance(value, bool):
            return value
        self.error(field, f"'{field}' must be a boolean (true or false), {got(value)}")
        return None


def build_plugin_tool(
    value: Any,
    *,
    manifest: PluginManifest,
    entry: ToolsEntry,
    index: int,
    pointer: str,
    report: Report,
    digest: Callable[[Callable[..., Any]], str | None] = lambda fn: None,
    reference: Callable[[Callable[..., Any]], str] | None = None,
) -> PluginTool | None:
    """Check one tool object and map it onto a :class:`Tool`; ``None`` after any error.

    ``pointer`` is where the object is (``/tools/0``), ``report`` collects diagnostics for the
    entry module, and ``digest`` fingerprints ``execute``'s code so approvals bound to the
    definition end when it changes.
    """
    who = f"plugin {manifest.id}, tool {tool_label(value, index)}"
    check = _Checker(report, pointer, who)
    start = len(report.items)
    if value is None or isinstance(value, (str, bytes, int, float, list, tuple)):
        report.error(
            pointer,
            f"{who}: a tool must be an object (a dict, or an object with attributes) with "
            f"{', '.join(TOOL_FIELDS)}; {got(value)}",
        )
        return None
    if isinstance(value, Mapping):
        for key in value:
            if key not in TOOL_FIELDS:
                label = key if isinstance(key, str) else repr(key)
                check.warning(
                    label,
                    f"unknown tool field {label!r} (ignored)"
                    f"{suggest(label, TOOL_FIELDS) if isinstance(key, str) else ''}; "
                    f"known fields: {', '.join(TOOL_FIELDS)}",
                )

    local_id = check.text(_get(value, "id"), "id", "the tool's id within the plugin")
    if local_id is not None and not _valid_id(local_id):
        check.error("id", f"{local_id!r} is not a valid tool id: no white space and no ':'")
        local_id = None
    name = check.text(_get(value, "name"), "name", "the human-readable display name")
    description = check.text(_get(value, "description"), "description", "what the tool does")
    execute = _execute(_get(value, "execute"), check)
    parameters = _parameters(_get(value, "parameters"), check)
    timeout = _timeout(_get(value, "timeout"), check)
    hints, title = _annotations(_get(value, "annotations"), check)
    examples, problem = parse_examples(_get(value, "examples"))
    if problem is not None:
        check.error("examples", problem)

    # The shared sandbox and permission checks do not know which tool they are about: their
    # diagnostics go through a scratch report and get the plugin and tool prepended.
    scratch = Report(report.path)
    sandbox = entry.sandbox
    if _get(value, "sandbox") is not None:
        sandbox = parse_sandbox(_get(value, "sandbox"), f"{pointer}/sandbox", scratch) or sandbox
    permissions = entry.permissions
    if _get(value, "permissions") is not None:
        override = parse_permissions(
            _get(value, "permissions"), f"{pointer}/permissions", manifest.folder, scratch
        )
        if override is not None and entry.sandbox is SandboxMode.COMPARTMENT:
            beyond = exceeding(override, entry.permissions)
            if beyond:
                # The manifest is the grant (the specification: "each capability is granted
                # via permissions in the manifest"); a tool's code cannot widen it.
                check.error(
                    "permissions",
                    f"asks for more than its entry grants ({beyond}); add them to "
                    "provides.tools.permissions in the manifest, where the operator sees them",
                )
        permissions = override or permissions
    report.items.extend(replace(item, message=f"{who}: {item.message}") for item in scratch.items)

    failed = any(item.severity is Severity.ERROR for item in report.items[start:])
    if failed or hints is None or execute is None:
        return None
    assert local_id is not None and name is not None and description is not None
    assert parameters is not None and timeout is not None
    if reference is None:
        ref = f"{entry.entry}:{getattr(execute, '__qualname__', type(execute).__name__)}"
    else:
        ref = reference(execute)
    try:
        tool = Tool(
            id=f"{manifest.id}:{local_id}",
            description=description,
            input_schema=parameters,
            kind=ImplementationKind.PYTHON,
            entry=PythonEntry(ref, digest(execute)),
            title=title or name,
            timeout=timeout,
            side_effect=level_from_annotations(
                read_only=hints.read_only, open_world=hints.open_world
            ),
            hints=hints,
            approval=ApprovalSpec(required=entry.require_approval),
            sandbox=SandboxSpec(mode=sandbox, permissions=permissions),
            env=permissions.env,
            display=DisplaySpec(examples=examples),
            source=ToolSource(SourceFormat.PLUGIN, str(manifest.path)),
        )
    except ValueError as exc:  # every rule of Tool is checked above; this is a safety net
        report.error(pointer, f"{who}: does not make a valid tool: {exc}")
        return None
    return PluginTool(tool, local_id, execute)


def _execute(value: Any, check: _Checker) -> Callable[..., Any] | None:
    if value is None:
        check.error("execute", "'execute' is required: a function execute(input, ctx)")
        return None
    if not callable(value):
        check.error("execute", f"'execute' must be a function execute(input, ctx), {got(value)}")
        return None
    func: Callable[..., Any] = value
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return func  # builtins and some C callables have no signature to check
    try:
        signature.bind(None, None)
    except TypeError:
        check.error(
            "execute",
            f"'execute' must accept two positional arguments (input, ctx); its signature is "
            f"{getattr(func, '__name__', 'execute')}{signature}",
        )
        return None
    return func


def _parameters(value: Any, check: _Checker) -> dict[str, Any] | None:
    if value is None:
        return dict(_NO_PARAMETERS)
    try:
        # A plain JSON copy: tuples become lists, and anything JSON cannot hold is refused.
        plain = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        check.error("parameters", f"'parameters' must be a JSON Schema made of JSON values: {exc}")
        return None
    if not isinstance(plain, dict):
        check.error("parameters", f"'parameters' must be a JSON Schema object, {got(plain)}")
        return None
    if plain.get("type", "object") != "object":
        check.error(
            "parameters/type",
            f"'parameters' must describe an object (type: object), not {plain.get('type')!r}",
        )
        return None
    try:
        compile_schema(plain, "'parameters'")
    except ToolDefinitionError as exc:
        check.error("parameters", exc.message.splitlines()[0])
        return None
    return plain


def _timeout(value: Any, check: _Checker) -> float | None:
    if value is None:
        return DEFAULT_TIMEOUT_MS / 1000
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        check.error(
            "timeout",
            f"'timeout' must be a positive number of milliseconds (default {DEFAULT_TIMEOUT_MS}), "
            f"{got(value)}",
        )
        return None
    return float(value) / 1000


def _annotations(value: Any, check: _Checker) -> tuple[ToolHints | None, str | None]:
    if value is None:
        check.error(
            "annotations",
            "'annotations' is required: an object with at least readOnlyHint (true if the tool "
            "only reads data)",
        )
        return None, None
    if isinstance(value, (str, bytes, int, float, list, tuple)):
        check.error("annotations", f"'annotations' must be an object, {got(value)}")
        return None, None
    if isinstance(value, Mapping):
        for key in value:
            if key not in ANNOTATION_FIELDS:
                name = key if isinstance(key, str) else repr(key)
                hint = suggest(name, ANNOTATION_FIELDS) if isinstance(key, str) else ""
                check.warning(
                    f"annotations/{name}",
                    f"unknown annotation {name!r} (ignored){hint}; known: "
                    f"{', '.join(ANNOTATION_FIELDS)}",
                )
    read_only = _get(value, "readOnlyHint")
    if read_only is None:
        check.error(
            "annotations/readOnlyHint",
            "'readOnlyHint' is required: a boolean, true if the tool only reads data",
        )
    else:
        read_only = check.flag(read_only, "annotations/readOnlyHint")
    destructive = check.flag(_get(value, "destructiveHint"), "annotations/destructiveHint")
    idempotent = check.flag(_get(value, "idempotentHint"), "annotations/idempotentHint")
    open_world = check.flag(_get(value, "openWorldHint"), "annotations/openWorldHint")
    title = _get(value, "title")
    if title is not None and not isinstance(title, str):
        check.error("annotations/title", f"'title' must be a string, {got(title)}")
        title = None
    if read_only is None:
        return None, None
    if read_only and destructive:
        check.warning(
            "annotations/destructiveHint",
            "destructiveHint is meaningless for a read-only tool (readOnlyHint: true); the tool "
            "is treated as read-only",
        )
    hints = ToolHints(
        read_only=read_only, destructive=destructive, idempotent=idempotent, open_world=open_world
    )
    return hints, title or None


def listed_tools(
    listed: Any,
    *,
    manifest: PluginManifest,
    entry: ToolsEntry,
    report: Report,
    stand_in: Callable[..., Any],
    digest: str | None,
    reference: str,
) -> list[PluginTool]:
    """The tools of an entry whose code runs in another process (the sandboxed worker, the
    JavaScript host), from the plain tool objects it listed: each checked like a tool object,
    problems on ``report``. ``execute`` is marked there by ``true``; ``stand_in`` takes its
    place here. ``digest`` fingerprints the entry's code and ``reference`` names ``execute``."""
    tools: list[PluginTool] = []
    for index, fields in enumerate(listed if isinstance(listed, list) else []):
        value = dict(fields) if isinstance(fields, Mapping) else fields
        if isinstance(value, dict) and value.pop("execute", False):
            value["execute"] = stand_in
        tool = build_plugin_tool(
            value,
            manifest=manifest,
            entry=entry,
            index=index,
            pointer=f"/tools/{index}",
            report=report,
            digest=lambda fn: digest,
            reference=lambda fn: reference,
        )
        if tool is not None:
            tools.append(tool)
    return tools
