"""The Python tool definitions of a capability manifest's ``main`` module → tools.

The module a manifest's ``main`` names exports ``tools``, a list of definitions (dicts or simple
objects) with the format's fields: ``name``, ``description``, ``inputSchema``, ``access``
(``read`` / ``write`` / ``external``), optional ``approval`` (``required``,
``build_confirmation(input)`` returning ``title``, ``risk``/``riskLabel`` and ``facts``),
``handler(input, ctx)``, and optionally ``title``. Python spellings (``input_schema``,
``buildConfirmation``) are accepted too.

:func:`build_capability_tools` checks definitions the caller already imported (importing is the
source's job) and maps each onto a :class:`~toolgate.Tool`; every problem is a diagnostic naming
the module, the JSON pointer of the definition's field (``/tools/1/access``) and what was
expected.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..._json import thaw
from ...errors import ToolDefinitionError
from ...model import (
    ApprovalSpec,
    DisplaySpec,
    ImplementationKind,
    PythonEntry,
    SourceFormat,
    Tool,
    ToolSource,
    level_from_access,
)
from ...schema_check import compile_schema
from .._common.diagnostics import Diagnostic, Report, Severity
from .._common.examples import parse_examples
from .._common.messages import got, kind_of, pointer
from .manifest import MANIFEST_FIELD, TOOL_NAME, CapabilityManifest, unknown_field

__all__ = ["ACCESS_LEVELS", "TOOL_FIELDS", "CapabilityTool", "ToolsCheck", "build_capability_tools"]

#: The format's tool fields (plus ``title``, "Tool display title").
TOOL_FIELDS = (
    "name",
    "title",
    "description",
    "inputSchema",
    "access",
    "approval",
    "handler",
    "examples",
)
"""``examples`` is toolgate's extension (:mod:`toolgate.formats._common.examples`)."""
ACCESS_LEVELS = ("read", "write", "external")
_APPROVAL_FIELDS = ("required", "build_confirmation")
_ALIASES = {
    "inputSchema": ("inputSchema", "input_schema"),
    "build_confirmation": ("build_confirmation", "buildConfirmation"),
}


@dataclass(frozen=True, slots=True)
class CapabilityTool:
    """One checked tool definition: the tool and the code to bind to it."""

    tool: Tool
    handler: Callable[..., Any]
    """``handler(input, ctx)``, sync or async."""
    build_confirmation: Callable[[Mapping[str, Any]], Any] | None = None
    """``approval.build_confirmation(input)``, when declared."""


@dataclass
class ToolsCheck:
    """What :func:`build_capability_tools` found."""

    tools: list[CapabilityTool] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)


def _lookup(item: Any, name: str) -> tuple[str, Any]:
    """``(spelling used, value)`` of a field of a dict or an object; ``None`` when absent."""
    for spelling in _ALIASES.get(name, (name,)):
        value = item.get(spelling) if isinstance(item, Mapping) else getattr(item, spelling, None)
        if value is not None:
            return spelling, value
    return name, None


def _is_async(function: Any) -> bool:
    call = getattr(function, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def build_capability_tools(
    manifest: CapabilityManifest,
    definitions: Any,
    *,
    digest: str | None = None,
    reserved_properties: Collection[str] = (),
) -> ToolsCheck:
    """Check the ``tools`` a module exported against the manifest and map each onto a
    :class:`Tool` (``<capability id>:<name>``). A definition with a problem is left out; a name
    the manifest's ``toolNames`` does not list is left out too, and each mismatch between the two
    is an error naming both files.

    ``digest``: of the module's code, so approvals bound to the definition end when it changes.
    ``reserved_properties``: input property names the caller's binding cannot pass.
    """
    module = str(manifest.main)
    report = Report(module)
    result = ToolsCheck(diagnostics=report.items)
    if not isinstance(definitions, (list, tuple)):
        found = "no 'tools'" if definitions is None else f"'tools' as {kind_of(definitions)}"
        report.error(
            pointer("tools"),
            f"expected the module to export 'tools', a list of tool definitions; found {found}",
        )
        return result
    defined: dict[str, int] = {}
    checked: dict[str, CapabilityTool] = {}
    for index, item in enumerate(definitions):
        name, built = _one_tool(manifest, item, index, report, digest, reserved_properties)
        if name is None:
            continue
        if name in defined:
            report.error(
                pointer("tools", index, "name"),
                f"tool {name!r} is defined twice (first at {pointer('tools', defined[name])})",
            )
            checked.pop(name, None)
            continue
        defined[name] = index
        if built is not None:
            checked[name] = built
    listed = manifest.tool_names
    for index, name in enumerate(listed):
        if name not in defined:
            report.error(
                pointer(MANIFEST_FIELD, "toolNames", index),
                f"{name!r} is listed in toolNames but {module} defines no tool named {name!r} "
                f"(it defines: {', '.join(defined) or 'none'})",
                path=str(manifest.path),
            )
    for name, index in defined.items():
        if name not in listed:
            checked.pop(name, None)
            report.error(
                pointer("tools", index, "name"),
                f"tool {name!r} is not listed in toolNames of {manifest.path} "
                f"({pointer(MANIFEST_FIELD, 'toolNames')}: {', '.join(listed)}); it is not "
                "registered until the manifest lists it",
            )
    result.tools = [checked[name] for name in listed if name in checked]
    return result


def _one_tool(
    manifest: CapabilityManifest,
    item: Any,
    index: int,
    report: Report,
    digest: str | None,
    reserved: Collection[str],
) -> tuple[str | None, CapabilityTool | None]:
    """The tool's name (``None`` when unusable) and the checked tool (``None`` on any error)."""
    before = len([d for d in report.items if d.severity is Severity.ERROR])
    at = ("tools", index)
    if isinstance(item, Mapping):
        for key in item:
            if key not in TOOL_FIELDS and key not in _ALIASES["inputSchema"]:
                unknown_field(report, key, TOOL_FIELDS, *at)
    elif item is None or isinstance(item, (str, int, float, list, tuple)):
        report.error(pointer(*at), f"expected a tool definition (an object), {got(item)}")
        return None, None
    _, name = _lookup(item, "name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        shown = (
            "required"
            if name is None
            else f"{name!r} is not a valid name"
            if isinstance(name, str)
            else got(name)
        )
        report.error(
            pointer(*at, "name"), f"expected a tool name (no white space, ':' or '/'); {shown}"
        )
        name = None
    description = _tool_text(item, "description", at, report, required=True)
    title = _tool_text(item, "title", at, report, required=False)
    schema = _tool_schema(item, at, report, reserved)
    _, access = _lookup(item, "access")
    level = None
    if access not in ACCESS_LEVELS:
        report.error(
            pointer(*at, "access"),
            f"expected one of {', '.join(ACCESS_LEVELS)}; "
            + ("missing" if access is None else got(access)),
        )
    else:
        level = level_from_access(access)
    required, builder = _approval(item, at, report)
    examples, problem = parse_examples(_lookup(item, "examples")[1])
    if problem is not None:
        report.error(pointer(*at, "examples"), problem)
    _, handler = _lookup(item, "handler")
    if not callable(handler):
        report.error(
            pointer(*at, "handler"),
            "expected a function handler(input, ctx) (sync or async); "
            + ("missing" if handler is None else got(handler)),
        )
    errors = len([d for d in report.items if d.severity is Severity.ERROR])
    if errors > before or name is None:
        return name, None
    assert description is not None and schema is not None and level is not None
    assert handler is not None
    try:
        tool = Tool(
            id=f"{manifest.id}:{name}",
            title=title,
            description=description,
            input_schema=schema,
            kind=ImplementationKind.PYTHON,
            entry=PythonEntry(f"{manifest.main}:{name}", digest),
            side_effect=level,
            approval=ApprovalSpec(required=required),
            secrets=manifest.required_preferences,
            config=manifest.public_preferences,
            capability=manifest.id,
            display=DisplaySpec(examples=examples),
            source=ToolSource(SourceFormat.CAPABILITY, str(manifest.path)),
        )
    except ValueError as exc:  # every rule of Tool is checked above; this is a safety net
        report.error(pointer(*at), f"the definition does not make a valid tool: {exc}")
        return name, None
    return name, CapabilityTool(tool, handler, builder)


def _tool_text(
    item: Any, name: str, at: tuple[str, int], report: Report, *, required: bool
) -> str | None:
    _, value = _lookup(item, name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        found = "missing" if value is None else got(value)
        report.error(pointer(*at, name), f"expected a non-empty string; {found}")
        return None
    return value


def _tool_schema(
    item: Any, at: tuple[str, int], report: Report, reserved: Collection[str]
) -> dict[str, Any] | None:
    spelling, value = _lookup(item, "inputSchema")
    where = pointer(*at, spelling)
    if not isinstance(value, Mapping):
        found = "missing" if value is None else got(value)
        report.error(where, f"expected a JSON Schema object (type: object); {found}")
        return None
    try:
        schema: dict[str, Any] = thaw(value)
    except RecursionError:  # a Python dict that contains itself
        report.error(where, "expected a JSON Schema object; this one contains itself")
        return None
    if schema.get("type", "object") != "object":
        report.error(pointer(*at, spelling, "type"), f"expected 'object'; {got(schema['type'])}")
        return None
    try:
        compile_schema(schema, "the input schema")
    except ToolDefinitionError as exc:
        report.error(where, exc.message.splitlines()[0])
        return None
    properties = schema.get("properties")
    for key in reserved:
        if isinstance(properties, Mapping) and key in properties:
            report.error(pointer(*at, spelling, "properties", key), f"{key!r} is reserved")
            return None
    return schema


def _approval(
    item: Any, at: tuple[str, int], report: Report
) -> tuple[bool | None, Callable[[Mapping[str, Any]], Any] | None]:
    _, approval = _lookup(item, "approval")
    if approval is None:
        return None, None
    where = (*at, "approval")
    if isinstance(approval, (str, int, float, list, tuple)):
        report.error(
            pointer(*where),
            f"expected an object with required and build_confirmation; {got(approval)}",
        )
        return None, None
    if isinstance(approval, Mapping):
        for key in approval:
            if key not in _APPROVAL_FIELDS and key not in _ALIASES["build_confirmation"]:
                unknown_field(report, key, _APPROVAL_FIELDS, *where)
    _, required = _lookup(approval, "required")
    if required is not None and not isinstance(required, bool):
        report.error(pointer(*where, "required"), f"expected true or false; {got(required)}")
        required = None
    spelling, builder = _lookup(approval, "build_confirmation")
    if builder is None:
        return required, None
    if not callable(builder) or _is_async(builder):
        found = "an async function" if callable(builder) else got(builder)
        report.error(
            pointer(*where, spelling),
            "expected a plain function build_confirmation(input) returning title, risk and "
            f"facts; {found}",
        )
        return required, None
    return required, builder
