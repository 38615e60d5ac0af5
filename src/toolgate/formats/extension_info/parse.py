"""Extension info manifests: ``{ns, title, tools: {id: {title, examples, schema, ui}}}``.

A manifest is one JSON or YAML file. It declares what people and models see of each tool — the
title, prompt examples that should select it, the input fields and the tile display — but not the
code: the implementation (a Python handler or a tool folder) is bound by
:mod:`toolgate.formats.extension_info.source`. This module only reads and checks the file; it never
imports or runs anything, and never touches the registry. Every problem is a
:class:`~toolgate.formats._common.diagnostics.Diagnostic` naming the file and the JSON pointer of
the field
(``/tools/showMapAtAddressAndZoom/ui/args/zoom``) and saying what was expected.

Mapping, per tool ``<id>`` of ``tools``:

* ``ns`` and the key → the tool id ``<ns>:<id>`` (``ns`` required: no white space or ``:``; the
  key: no white space, ``:`` or ``/``).
* ``title`` → ``Tool.title``; ``examples`` (strings) → ``display.examples``.
* ``schema.fields`` → ``input_schema``: ``{"type": "object", "properties": {<field>: ...},
  "additionalProperties": false}``. The format's fields are a subset of JSON Schema:
  ``type`` (required: string, integer, number, boolean, array or object), ``description``,
  ``title``, ``enum``, ``default``, ``examples``; for numbers ``minimum``, ``maximum``,
  ``exclusiveMinimum``, ``exclusiveMaximum``; for strings ``minLength``, ``maxLength``,
  ``pattern``, ``format``; for arrays ``items`` (a field) with ``minItems``, ``maxItems``; for
  objects ``properties`` (fields). Anything else is an error, not silently ignored.

  *Required.* A field is optional unless it says ``"required": true`` (JSON Schema draft 3's
  spelling, the only one a map of fields has room for). The format's own example needs that: "Show
  map of london" gives no zoom, and the tile skips arguments that were not given.
  *additionalProperties: false.* The fields are everything the model may map from a prompt; an
  argument the manifest does not declare is refused as ``invalid_arguments`` instead of reaching
  the implementation.
* ``ui`` → ``display.ui``: ``prefix``, ``suffix`` and ``args`` (field name → ``{prefix,
  suffix}``; the order of ``args`` is the display order). A ``ui.args`` key that is not a field
  is an error. See :mod:`toolgate.model.display` for how a call is rendered.

A tool with an error does not load; the others do. An error in ``ns`` or ``tools`` stops the
whole manifest. Unknown fields are warnings.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ToolDefinitionError
from ...model import TileArg, TileDisplay
from ...schema_check import compile_schema
from .._common.diagnostics import Diagnostic, Report, Severity
from .._common.messages import got
from .._common.paths import os_reason
from .._common.safe_yaml import (
    YamlError,
    load_yaml,
)
from .._common.strict_json import JsonTextError, parse_json_document

__all__ = [
    "FIELD_TYPES",
    "MAX_MANIFEST_BYTES",
    "OTHER_FORMAT_KEYS",
    "ExtensionManifest",
    "ExtensionTool",
    "ManifestLoad",
    "is_extension_info",
    "load_extension_info",
    "manifest_files",
    "parse_extension_info",
    "pointer",
]

#: Manifests larger than this are refused unread.
MAX_MANIFEST_BYTES = 1_048_576
#: The ``type`` values of the format's JSON Schema subset.
FIELD_TYPES = ("string", "integer", "number", "boolean", "array", "object")
#: Top-level keys of the other declaration formats (capability, plugin, resource manifests).
OTHER_FORMAT_KEYS = ("aiCapability", "provides", "apiVersion")

_TOP_KEYS = ("ns", "title", "tools")
_TOOL_KEYS = ("title", "examples", "schema", "ui")
_UI_KEYS = ("prefix", "args", "suffix")
_UI_ARG_KEYS = ("prefix", "suffix")
_COMMON = ("type", "description", "title", "enum", "default", "examples")
_BY_TYPE: dict[str, tuple[str, ...]] = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"),
    "boolean": (),
    "array": ("items", "minItems", "maxItems"),
    "object": ("properties",),
}
_COUNTS = frozenset({"minLength", "maxLength", "minItems", "maxItems"})
_BOUNDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_NS = re.compile(r"^[^\s:]+$")
#: Tool ids name tool folders too: no separators, and never "." or "..".
_TOOL_ID = re.compile(r"^(?!\.\.?$)[^\s:/\\]+$")


def pointer(*parts: str) -> str:
    """A JSON pointer (RFC 6901) from unescaped parts: ``pointer("tools", "a/b")`` →
    ``/tools/a~1b``."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


@dataclass(frozen=True, slots=True)
class ExtensionTool:
    """One entry of ``tools``, checked."""

    id: str
    """The key in ``tools`` (the tool's name; the tool id is ``<ns>:<id>``)."""
    title: str | None
    examples: tuple[str, ...]
    input_schema: Mapping[str, Any]
    """The JSON Schema built from ``schema.fields``."""
    ui: TileDisplay | None
    pointer: str
    """``/tools/<id>``: where diagnostics about this tool point."""


@dataclass(frozen=True, slots=True)
class ExtensionManifest:
    """A checked manifest: the tools that loaded (those with errors are left out)."""

    path: Path
    ns: str
    title: str | None
    tools: tuple[ExtensionTool, ...]


@dataclass(frozen=True, slots=True)
class ManifestLoad:
    """The result of reading one manifest."""

    path: Path
    manifest: ExtensionManifest | None
    """``None`` when ``ns`` or ``tools`` (or the file itself) is unusable."""
    diagnostics: tuple[Diagnostic, ...]


def is_extension_info(document: Any) -> bool:
    """Whether a parsed document is an Extension Info manifest: it has ``ns`` and ``tools`` and
    none of the other formats' keys. The values are not checked here, so a broken manifest is
    still recognised and gets precise diagnostics."""
    return (
        isinstance(document, dict)
        and "ns" in document
        and "tools" in document
        and not any(key in document for key in OTHER_FORMAT_KEYS)
    )


# -- reading -------------------------------------------------------------------------------------


def load_extension_info(path: Path) -> ManifestLoad:
    """Read and check the manifest at ``path`` (``.json`` parsed as strict JSON, anything else as
    YAML). Never raises for what the file contains."""
    report = Report(str(path))
    document = _read(path, report)
    if document is None:
        return ManifestLoad(path, None, tuple(report.items))
    return parse_extension_info(document, path, report)


def _read(path: Path, report: Report) -> Any:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        report.error(None, f"cannot read the file: {os_reason(exc)}")
        return None
    if len(raw) > MAX_MANIFEST_BYTES:
        report.error(None, f"the file is larger than {MAX_MANIFEST_BYTES} bytes (1 MiB)")
        return None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        report.error(None, f"the file is not valid UTF-8 (byte {exc.start}: {exc.reason})")
        return None
    try:
        document = _parse_json(text) if path.suffix == ".json" else load_yaml(text, source="")
    except YamlError as exc:
        report.error(None, f"invalid YAML: {exc.location}{exc.problem}")
        return None
    except ValueError as exc:
        report.error(None, f"invalid JSON: {exc}")
        return None
    if document is None:
        report.error(None, "the file is empty; expected an object with ns, title and tools")
    return document


def _parse_json(text: str) -> Any:
    try:
        return parse_json_document(text)
    except JsonTextError as exc:
        if exc.line is not None:
            raise ValueError(f"line {exc.line}, column {exc.column}: {exc.problem}") from None
        raise ValueError(
            f"the document is {exc.problem}" if exc.too_large else exc.problem
        ) from None


def manifest_files(path: Path) -> tuple[list[Path], list[Diagnostic]]:
    """The manifests at ``path``: the file itself, or the ``.json``/``.yaml``/``.yml`` files
    directly in the folder that are Extension Info manifests (others are skipped); a folder with
    none is a diagnostic. Parses, never imports."""
    if not path.is_dir():
        return [path], []
    found: list[Path] = []
    try:
        candidates = sorted(
            p for p in path.iterdir() if p.suffix in (".json", ".yaml", ".yml") and p.is_file()
        )
    except OSError as exc:
        return [], [Diagnostic(str(path), None, f"cannot list the folder: {exc.strerror or exc}")]
    for candidate in candidates:
        try:
            document = load_yaml(candidate.read_text(encoding="utf-8"), source=str(candidate))
        except (OSError, UnicodeDecodeError, YamlError):
            continue  # not this format's business; a manifest named directly gets diagnostics
        if is_extension_info(document):
            found.append(candidate)
    if not found:
        return [], [
            Diagnostic(
                str(path),
                None,
                "no Extension Info manifest in this folder: expected a .json or .yaml file "
                "with ns, title and tools",
            )
        ]
    return found, []


# -- the document --------------------------------------------------------------------------------


def _unknown(key: Any, known: tuple[str, ...], where: str, report: Report) -> None:
    name = key if isinstance(key, str) else repr(key)
    close = difflib.get_close_matches(name, known, n=1) if isinstance(key, str) else []
    hint = f" Did you mean {close[0]!r}?" if close else ""
    report.warning(
        f"{where}{pointer(name)}",
        f"unknown field {name!r} (ignored); expected one of: {', '.join(known)}.{hint}",
    )


def parse_extension_info(document: Any, path: Path, report: Report | None = None) -> ManifestLoad:
    """Check a parsed manifest (``path`` names it in diagnostics)."""
    report = report or Report(str(path))
    if not isinstance(document, dict):
        report.error(None, f"expected an object with ns, title and tools, {got(document)}")
        return ManifestLoad(path, None, tuple(report.items))
    for key in document:
        if key not in _TOP_KEYS:
            _unknown(key, _TOP_KEYS, "", report)
    ns = _namespace(document.get("ns"), report)
    title = _title(document, "", report, what="the extension")
    tools = document.get("tools")
    if not isinstance(tools, dict):
        expected = "an object mapping each tool id to its tool"
        report.error(
            "/tools",
            f"'tools' is required: {expected}"
            if tools is None
            else f"'tools' must be {expected}, {got(tools)}",
        )
        return ManifestLoad(path, None, tuple(report.items))
    if not tools:
        report.warning("/tools", "no tools are declared; an extension should have at least one")
    checked = [_tool(key, value, report) for key, value in tools.items()]
    if ns is None:
        return ManifestLoad(path, None, tuple(report.items))
    manifest = ExtensionManifest(path, ns, title, tuple(t for t in checked if t is not None))
    return ManifestLoad(path, manifest, tuple(report.items))


def _namespace(value: Any, report: Report) -> str | None:
    if value is None:
        report.error("/ns", "'ns' is required: the extension's stable identifier, e.g. 'maps'")
        return None
    if not isinstance(value, str):
        report.error("/ns", f"'ns' must be a string, {got(value)}")
        return None
    if not _NS.match(value) or not value.isprintable():
        report.error(
            "/ns",
            f"{value!r} is not a valid namespace: use a non-empty identifier without white "
            "space or ':' (for example 'mynamespace')",
        )
        return None
    return value


def _title(data: dict[Any, Any], where: str, report: Report, *, what: str) -> str | None:
    value = data.get("title")
    if value is None:
        report.warning(f"{where}/title", f"{what} has no 'title'; people are shown its id")
        return None
    if not isinstance(value, str) or not value.strip():
        report.error(f"{where}/title", f"'title' must be a non-empty string, {got(value)}")
        return None
    return value.strip()


def _error_count(report: Report) -> int:
    return sum(1 for d in report.items if d.severity is Severity.ERROR)


def _tool(key: Any, value: Any, report: Report) -> ExtensionTool | None:
    name = key if isinstance(key, str) else repr(key)
    where = pointer("tools", name)
    errors_before = _error_count(report)
    if not isinstance(key, str) or not _TOOL_ID.match(key) or not key.isprintable():
        report.error(
            where,
            f"{name!r} is not a valid tool id: use a non-empty id without white space, ':', "
            "'/' or '\\' (for example 'helloWorld')",
        )
    if not isinstance(value, dict):
        report.error(where, f"a tool must be an object (title, examples, schema, ui), {got(value)}")
        return None
    for field in value:
        if field not in _TOOL_KEYS:
            _unknown(field, _TOOL_KEYS, where, report)
    title = _title(value, where, report, what=f"the tool {name!r}")
    examples = _examples(value.get("examples"), where, report)
    fields = _schema(value.get("schema"), where, report)
    ui = _ui(value.get("ui"), _field_names(value.get("schema")), where, report)
    if fields is None or _error_count(report) > errors_before:
        return None
    return ExtensionTool(name, title, examples, fields, ui, where)


def _field_names(schema: Any) -> list[str]:
    """The names declared in ``schema.fields``, even when some field is broken (``ui.args`` is
    checked against what was written)."""
    fields = schema.get("fields") if isinstance(schema, dict) else None
    return [name for name in fields if isinstance(name, str)] if isinstance(fields, dict) else []


def _examples(value: Any, where: str, report: Report) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        report.error(f"{where}/examples", f"'examples' must be a list of prompts, {got(value)}")
        return ()
    examples: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            report.error(
                f"{where}/examples/{index}", f"an example must be a non-empty string, {got(item)}"
            )
        else:
            examples.append(item.strip())
    return tuple(examples)


# -- schema.fields -------------------------------------------------------------------------------


def _schema(value: Any, where: str, report: Report) -> dict[str, Any] | None:
    """The input schema built from ``schema.fields`` (``None`` when it has an error)."""
    empty: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    if value is None:
        return empty
    here = f"{where}/schema"
    if not isinstance(value, dict):
        report.error(here, f"'schema' must be an object with 'fields', {got(value)}")
        return None
    for key in value:
        if key != "fields":
            _unknown(key, ("fields",), here, report)
    fields = value.get("fields")
    if fields is None:
        return empty
    failed = _error_count(report)
    schema = _object(fields, f"{here}/fields", report)
    if schema is None or _error_count(report) > failed:
        return None
    try:
        compile_schema(schema, "the schema built from schema.fields")
    except ToolDefinitionError as exc:
        report.error(f"{here}/fields", str(exc).splitlines()[0])
        return None
    return schema


def _object(fields: Any, where: str, report: Report) -> dict[str, Any] | None:
    """An object schema from a map of fields (``schema.fields`` or a field's ``properties``)."""
    if not isinstance(fields, dict):
        report.error(
            where, f"expected an object mapping each field name to its field, {got(fields)}"
        )
        return None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, spec in fields.items():
        here = f"{where}{pointer(str(name))}"
        if not isinstance(name, str) or not name:
            report.error(here, f"a field name must be a non-empty string, {got(name)}")
            continue
        built = _field(spec, here, report, nested=False)
        if built is None:
            continue
        schema, is_required = built
        properties[name] = schema
        if is_required:
            required.append(name)
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    result["additionalProperties"] = False
    return result


def _field(
    spec: Any, where: str, report: Report, *, nested: bool
) -> tuple[dict[str, Any], bool] | None:
    """One field as JSON Schema, and whether it is required. ``nested``: an ``items`` schema,
    where ``required`` has no meaning."""
    if not isinstance(spec, dict):
        report.error(where, f"a field must be an object with at least a 'type', {got(spec)}")
        return None
    kind = spec.get("type")
    if kind not in FIELD_TYPES:
        problem = (
            "is required" if kind is None else f"must be one of the supported types, {got(kind)}"
        )
        report.error(f"{where}/type", f"'type' {problem}; use one of: {', '.join(FIELD_TYPES)}")
        return None
    allowed = (*_COMMON, *_BY_TYPE[kind], *(() if nested else ("required",)))
    schema: dict[str, Any] = {}
    is_required = False
    for key, value in spec.items():
        here = f"{where}{pointer(str(key))}"
        if key not in allowed:
            report.error(
                here,
                f"{str(key)!r} is not part of the supported JSON Schema subset for "
                f"{_article(kind)} field; expected one of: {', '.join(allowed)}",
            )
        elif key == "required":
            if not isinstance(value, bool):
                report.error(here, f"'required' must be true or false, {got(value)}")
            is_required = value is True
        elif key in ("description", "title", "pattern", "format"):
            if not isinstance(value, str):
                report.error(here, f"{key!r} must be a string, {got(value)}")
            elif key == "pattern":
                _pattern(value, here, report)
            schema[key] = value
        elif key in _COUNTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                report.error(here, f"{key!r} must be a non-negative integer, {got(value)}")
            schema[key] = value
        elif key in _BOUNDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                report.error(here, f"{key!r} must be a number, {got(value)}")
            schema[key] = value
        elif key == "enum":
            schema[key] = _enum(value, kind, here, report)
        elif key == "examples" and not isinstance(value, list):
            report.error(here, f"'examples' must be a list of values, {got(value)}")
        elif key == "items":
            item = _field(value, here, report, nested=True)
            if item is not None:
                schema[key] = item[0]
        elif key == "properties":
            nested_object = _object(value, here, report)
            if nested_object is not None:
                schema.update({k: v for k, v in nested_object.items() if k != "type"})
        else:  # type, default, examples
            schema[key] = value
    if "default" in spec and not _fits(spec["default"], kind):
        report.error(
            f"{where}/default",
            f"'default' must be {_article(kind)} like the field, {got(spec['default'])}",
        )
    return schema, is_required


def _pattern(value: str, where: str, report: Report) -> None:
    try:
        compile_schema({"type": "string", "pattern": value}, "'pattern'")
    except ToolDefinitionError as exc:
        reason = str(exc).splitlines()[0].split(": ", 1)[-1]
        report.error(where, f"'pattern' is not a regular expression the gateway can use: {reason}")


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _enum(value: Any, kind: str, where: str, report: Report) -> Any:
    if not isinstance(value, list) or not value:
        report.error(where, f"'enum' must be a non-empty list of {kind} values, {got(value)}")
        return value
    for index, item in enumerate(value):
        if not _fits(item, kind):
            report.error(f"{where}/{index}", f"'enum' values must be {kind}s, {got(item)}")
    return value


def _fits(value: Any, kind: str) -> bool:
    """Whether a JSON value has the JSON Schema ``type`` ``kind``."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float))
    if kind == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


# -- ui ------------------------------------------------------------------------------------------


def _line(value: Any, where: str, report: Report) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        report.error(where, f"expected a string, {got(value)}")
        return None
    if not value.isprintable():
        report.error(where, "must be one line of printable text (no control characters)")
        return None
    return value


def _ui(value: Any, fields: list[str], where: str, report: Report) -> TileDisplay | None:
    if value is None:
        return None
    here = f"{where}/ui"
    if not isinstance(value, dict):
        report.error(here, f"'ui' must be an object (prefix, args, suffix), {got(value)}")
        return None
    for key in value:
        if key not in _UI_KEYS:
            _unknown(key, _UI_KEYS, here, report)
    prefix = _line(value.get("prefix"), f"{here}/prefix", report)
    suffix = _line(value.get("suffix"), f"{here}/suffix", report)
    args = value.get("args")
    tile_args: list[TileArg] = []
    if args is not None and not isinstance(args, dict):
        report.error(
            f"{here}/args", f"'ui.args' must map field names to {{prefix, suffix}}, {got(args)}"
        )
    elif args:
        for name, spec in args.items():
            arg_where = f"{here}/args{pointer(str(name))}"
            if name not in fields:
                known = ", ".join(fields) or "none are declared"
                report.error(
                    arg_where,
                    f"{str(name)!r} is not a field of schema.fields; ui.args keys must name "
                    f"fields (fields: {known})",
                )
                continue
            if spec is None:
                spec = {}
            if not isinstance(spec, dict):
                report.error(
                    arg_where, f"expected an object with prefix and/or suffix, {got(spec)}"
                )
                continue
            for key in spec:
                if key not in _UI_ARG_KEYS:
                    _unknown(key, _UI_ARG_KEYS, arg_where, report)
            tile_args.append(
                TileArg(
                    name=name,
                    prefix=_line(spec.get("prefix"), f"{arg_where}/prefix", report),
                    suffix=_line(spec.get("suffix"), f"{arg_where}/suffix", report),
                )
            )
    return TileDisplay(prefix=prefix, args=tuple(tile_args), suffix=suffix)
