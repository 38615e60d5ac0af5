"""Plugin manifests: ``id`` plus ``provides.tools``, checked without importing.

A plugin is a folder holding a manifest and its modules: JavaScript or TypeScript as the format
writes them (run by the JavaScript host, :mod:`toolgate.backends.js_host`), or Python
(toolgate's extension). The manifest is the first of
:data:`MANIFEST_NAMES` found in the folder (``pandora.json``, ``pandora.yaml``, ``pandora.yml``,
``plugin.json``, ``plugin.yaml``, ``plugin.yml``); more than one is an error (which one counts
would be a guess)::

    {
      "id": "@pandorakit/weather",
      "name": "Weather",
      "provides": {
        "tools": {
          "entry": "index.py",
          "sandbox": "compartment",
          "permissions": {"network": ["api.openweathermap.org"], "env": ["OPENWEATHER_API_KEY"]},
          "requireApproval": false
        }
      }
    }

* ``id`` (required): the plugin id, the namespace of its tools (``@pandorakit/weather:weather``);
  no white space and no ``:``.
* ``name``, ``version``, ``description``: optional strings, shown by ``toolgate plugins``.
* ``provides.tools`` (required): one tools entry, or a list of them. Other ``provides`` keys
  are warnings (toolgate loads tools only); other top-level keys are plugin metadata, ignored.
* ``entry`` (required): a ``.ts``, ``.mts``, ``.js`` or ``.mjs`` file, or a Python module (a
  ``.py`` file or a package folder with ``__init__.py``), relative to the plugin folder. It
  must stay inside the plugin folder (symlinks resolved). For Python, every part must be an
  identifier, so it can be imported as a submodule of the plugin (relative imports between the
  plugin's modules work).
* ``sandbox``: ``compartment`` (the format's default) or ``host``.
* ``permissions`` (the format's ``ToolPermissions``): ``time`` and ``random`` booleans, ``network``
  host names (``api.example.com``, ``*.example.org``, optionally ``:port``; no scheme, path, bare
  ``*`` or wildcard top-level domain), ``env`` variable names, ``fs`` path prefixes (absolute,
  ``~/…``, or relative to the plugin folder; stored absolute).
* ``requireApproval``: boolean, the default approval requirement of the entry's tools.

Nothing here imports or runs the entry: :func:`load_plugin_manifest` reads and checks the
manifest only. Every problem is a :class:`Diagnostic` naming the manifest and the JSON pointer of
the field (``/provides/tools/sandbox``) with what was expected. The tool objects the entry exports
are checked by :mod:`toolgate.formats.plugin.tool` once a source has imported it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...model import Permissions, SandboxMode
from .._common.diagnostics import Diagnostic, Report
from .._common.javascript import JS_SUFFIXES
from .._common.messages import got
from .._common.paths import PathKind, os_reason, path_kind
from .._common.permissions import (
    PERMISSION_FIELDS,
    escape_pointer,
    parse_permissions,
    parse_sandbox,
    unknown_field,
)
from .._common.safe_yaml import (
    YamlError,
    load_yaml,
)
from .._common.strict_json import JsonTextError, parse_json_document

__all__ = [
    "MANIFEST_NAMES",
    "PERMISSION_FIELDS",
    "TOOLS_ENTRY_FIELDS",
    "ManifestLoad",
    "PluginManifest",
    "ToolsEntry",
    "find_manifest",
    "is_plugin_manifest",
    "load_plugin_manifest",
    "read_manifest_document",
    "valid_local_id",
]

#: Manifest file names looked for in a plugin folder, in this order.
MANIFEST_NAMES: tuple[str, ...] = (
    "pandora.json",
    "pandora.yaml",
    "pandora.yml",
    "plugin.json",
    "plugin.yaml",
    "plugin.yml",
)
#: Entry file endings run by the JavaScript host (TypeScript types are stripped on load).
#: The fields of one ``provides.tools`` entry (the format's "Manifest Fields").
TOOLS_ENTRY_FIELDS: tuple[str, ...] = ("entry", "sandbox", "permissions", "requireApproval")

MAX_MANIFEST_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class ToolsEntry:
    """One ``provides.tools`` entry: where the tools come from and how they may run."""

    pointer: str
    """JSON pointer of the entry in the manifest (``/provides/tools`` or ``/provides/tools/0``)."""
    entry: str
    """The ``entry`` path as written."""
    module_file: Path
    """The entry's file (``__init__.py`` for a package), resolved inside the plugin folder."""
    module_parts: tuple[str, ...]
    """The entry as a dotted module path below the plugin (``("src", "index")``)."""
    sandbox: SandboxMode = SandboxMode.COMPARTMENT
    permissions: Permissions = field(default_factory=Permissions)
    require_approval: bool | None = None

    @property
    def is_javascript(self) -> bool:
        """Whether the entry is JavaScript or TypeScript (run by the JavaScript host)."""
        return self.module_file.suffix in JS_SUFFIXES


@dataclass(frozen=True, slots=True)
class PluginManifest:
    """A checked plugin manifest."""

    id: str
    path: Path
    """The manifest file."""
    folder: Path
    """The plugin folder (resolved)."""
    tools: tuple[ToolsEntry, ...]
    name: str | None = None
    version: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class ManifestLoad:
    """What reading a manifest produced: the manifest (``None`` on any error) and diagnostics."""

    path: Path
    """The manifest file, or the path given when no manifest was found."""
    manifest: PluginManifest | None
    diagnostics: tuple[Diagnostic, ...]
    plugin_id: str | None = None
    """The declared id when it could be read, even if the manifest has other errors."""


# --- finding and reading ---------------------------------------------------------------------


def find_manifest(path: Path) -> tuple[Path | None, Diagnostic | None]:
    """The manifest file for ``path`` (a manifest file, or a plugin folder), or why there is none.

    Never raises for file system problems: they are the diagnostic.
    """
    kind = path_kind(path)
    if kind is PathKind.FILE:
        return path, None
    if isinstance(kind, str):
        return None, Diagnostic(str(path), None, f"cannot be accessed: {kind}")
    if kind is not PathKind.FOLDER:
        return None, Diagnostic(str(path), None, "no such file or folder")
    found = [path / name for name in MANIFEST_NAMES if path_kind(path / name) is PathKind.FILE]
    if not found:
        return None, Diagnostic(
            str(path),
            None,
            f"no plugin manifest in this folder: expected one of {', '.join(MANIFEST_NAMES)}",
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        return None, Diagnostic(
            str(path), None, f"more than one plugin manifest ({names}); keep exactly one"
        )
    return found[0], None


def _parse_json(text: str) -> Any:
    try:
        return parse_json_document(text)
    except JsonTextError as exc:
        raise ValueError(exc.message) from None


def read_manifest_document(path: Path) -> tuple[Any, str | None]:
    """The parsed manifest (JSON for ``.json``, safe YAML otherwise) or why it cannot be read.

    JSON files are parsed as JSON (tab indentation, which YAML refuses, is fine), with duplicate
    keys, ``NaN`` and oversized documents refused like the YAML loader refuses them.
    """
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        return None, f"cannot read the file: {os_reason(exc)}"
    if len(raw) > MAX_MANIFEST_BYTES:
        return None, f"the file is larger than {MAX_MANIFEST_BYTES} bytes (1 MiB)"
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        return None, f"the file is not valid UTF-8 (byte {exc.start}: {exc.reason})"
    try:
        if path.suffix == ".json":
            return _parse_json(text), None
        return load_yaml(text, source=str(path)), None
    except YamlError as exc:
        return None, f"invalid YAML: {exc.location}{exc.problem}"
    except ValueError as exc:
        return None, str(exc)


def is_plugin_manifest(document: Any) -> bool:
    """Whether a parsed document looks like a plugin manifest: ``id`` and ``provides.tools``."""
    if not isinstance(document, Mapping) or "id" not in document:
        return False
    provides = document.get("provides")
    return isinstance(provides, Mapping) and "tools" in provides


# --- the manifest ----------------------------------------------------------------------------


def load_plugin_manifest(path: Path) -> ManifestLoad:
    """Read and check the manifest at ``path`` (the file, or the plugin folder holding it).

    Never imports the entry and never raises for what the files contain.
    """
    manifest_path, problem = find_manifest(path)
    if manifest_path is None:
        assert problem is not None
        return ManifestLoad(path, None, (problem,))
    report = Report(str(manifest_path))
    data, reason = read_manifest_document(manifest_path)
    if reason is not None:
        report.error(None, reason)
        return ManifestLoad(manifest_path, None, tuple(report.items))
    if not isinstance(data, dict):
        report.error(
            None, f"a plugin manifest must be an object with 'id' and 'provides', {got(data)}"
        )
        return ManifestLoad(manifest_path, None, tuple(report.items))
    try:
        folder = manifest_path.parent.resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        report.error(None, f"cannot resolve the plugin folder: {os_reason(exc)}")
        return ManifestLoad(manifest_path, None, tuple(report.items))

    plugin_id = _plugin_id(data.get("id"), report)
    texts = {key: _optional_text(data, key, report) for key in ("name", "version", "description")}
    entries = _tools_entries(data.get("provides"), folder, report)
    if report.failed or plugin_id is None:
        return ManifestLoad(manifest_path, None, tuple(report.items), plugin_id)
    manifest = PluginManifest(
        id=plugin_id,
        path=manifest_path,
        folder=folder,
        tools=tuple(entries),
        name=texts["name"],
        version=texts["version"],
        description=texts["description"],
    )
    return ManifestLoad(manifest_path, manifest, tuple(report.items), plugin_id)


def valid_local_id(value: str) -> bool:
    """A plugin or tool id toolgate can namespace: printable, no white space, no ``:``."""
    return bool(value) and value.isprintable() and not any(c.isspace() or c == ":" for c in value)


def _plugin_id(value: Any, report: Report) -> str | None:
    if value is None:
        report.error("/id", "'id' is required: the plugin id, e.g. '@scope/weather'")
        return None
    if not isinstance(value, str):
        report.error("/id", f"'id' must be a string such as '@scope/weather', {got(value)}")
        return None
    if not valid_local_id(value):
        report.error(
            "/id",
            f"{value!r} is not a valid plugin id: use a non-empty id without white space or ':' "
            "(e.g. '@scope/weather'); tools are named 'pluginId:toolId'",
        )
        return None
    return value


def _optional_text(data: dict[Any, Any], key: str, report: Report) -> str | None:
    value = data.get(key)
    if value is None or isinstance(value, str):
        return value
    report.error(f"/{key}", f"'{key}' must be a string, {got(value)}")
    return None


def _tools_entries(provides: Any, folder: Path, report: Report) -> list[ToolsEntry]:
    if provides is None:
        report.error("/provides", "'provides' is required: an object with a 'tools' entry")
        return []
    if not isinstance(provides, dict):
        report.error(
            "/provides", f"'provides' must be an object with a 'tools' entry, {got(provides)}"
        )
        return []
    for key in provides:
        if key != "tools":
            name = key if isinstance(key, str) else repr(key)
            report.warning(
                f"/provides/{escape_pointer(name)}",
                f"'provides.{name}' is not loaded by toolgate (only 'provides.tools' is); ignored",
            )
    value = provides.get("tools")
    if value is None:
        report.error(
            "/provides/tools",
            "'provides.tools' is required: an object with 'entry' (the entry module), "
            "optional 'sandbox', 'permissions' and 'requireApproval'",
        )
        return []
    if isinstance(value, dict):
        entry = _tools_entry(value, "/provides/tools", folder, report)
        return [] if entry is None else [entry]
    if not isinstance(value, list) or not value:
        report.error(
            "/provides/tools",
            f"'provides.tools' must be an object (or a non-empty list of objects), {got(value)}",
        )
        return []
    entries: list[ToolsEntry] = []
    for index, item in enumerate(value):
        pointer = f"/provides/tools/{index}"
        if not isinstance(item, dict):
            report.error(pointer, f"each tools entry must be an object with 'entry', {got(item)}")
            continue
        entry = _tools_entry(item, pointer, folder, report)
        if entry is not None:
            entries.append(entry)
    return entries


def _tools_entry(
    data: dict[Any, Any], pointer: str, folder: Path, report: Report
) -> ToolsEntry | None:
    for key in data:
        if key not in TOOLS_ENTRY_FIELDS:
            unknown_field(report, pointer, key, TOOLS_ENTRY_FIELDS, "tools entry")
    located = _entry_module(data.get("entry"), f"{pointer}/entry", folder, report)
    sandbox = parse_sandbox(data.get("sandbox"), f"{pointer}/sandbox", report)
    permissions = Permissions()
    if data.get("permissions") is not None:
        parsed = parse_permissions(data["permissions"], f"{pointer}/permissions", folder, report)
        permissions = parsed if parsed is not None else permissions
    approval = data.get("requireApproval")
    if approval is not None and not isinstance(approval, bool):
        report.error(
            f"{pointer}/requireApproval",
            f"'requireApproval' must be a boolean (true or false), {got(approval)}",
        )
        approval = None
    if sandbox is SandboxMode.HOST:
        _host_permissions_note(permissions, f"{pointer}/permissions", report)
    if located is None or sandbox is None:
        return None
    module_file, parts = located
    return ToolsEntry(pointer, data["entry"], module_file, parts, sandbox, permissions, approval)


def _host_permissions_note(permissions: Permissions, pointer: str, report: Report) -> None:
    # The format: permissions are "capabilities to grant in compartment mode"; a host tool has full
    # process access, so only ``env`` (what ctx.env holds) still means something.
    moot = [
        name
        for name, given in (
            ("time", permissions.time),
            ("network", bool(permissions.network)),
            ("fs", bool(permissions.fs)),
            ("random", permissions.random),
        )
        if given
    ]
    if moot:
        report.warning(
            pointer,
            f"sandbox 'host' gives the tools full process access: {', '.join(moot)} "
            "restrict nothing there (only 'env' still limits what ctx.env holds)",
        )


def _entry_module(
    value: Any, pointer: str, folder: Path, report: Report
) -> tuple[Path, tuple[str, ...]] | None:
    example = (
        "a module path relative to the plugin folder: JavaScript or TypeScript (e.g. "
        "'index.ts') or Python (e.g. 'index.py')"
    )
    if value is None:
        report.error(pointer, f"'entry' is required: {example}")
        return None
    if not isinstance(value, str) or not value.strip():
        report.error(pointer, f"'entry' must be {example}, {got(value)}")
        return None
    if Path(value).is_absolute():
        report.error(pointer, f"'entry' must be relative to the plugin folder, not {value!r}")
        return None
    try:
        resolved = (folder / value).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        report.error(pointer, f"'entry' {value!r} cannot be resolved: {os_reason(exc)}")
        return None
    if resolved == folder or not resolved.is_relative_to(folder):
        report.error(
            pointer,
            f"'entry' {value!r} resolves to {resolved}, outside the plugin folder {folder}; "
            "the entry must live inside the plugin",
        )
        return None
    kind = path_kind(resolved)
    if isinstance(kind, str):
        report.error(pointer, f"cannot access the entry {value!r} ({resolved}): {kind}")
        return None
    relative = resolved.relative_to(folder)
    if kind is PathKind.FOLDER:
        module_file = resolved / "__init__.py"
        if path_kind(module_file) is not PathKind.FILE:
            report.error(
                pointer, f"the entry folder {value!r} is not a package: it has no __init__.py"
            )
            return None
        parts = relative.parts
    elif kind is PathKind.FILE and resolved.suffix == ".py":
        module_file = resolved
        parts = (*relative.parts[:-1], resolved.stem)
    elif kind is PathKind.FILE and resolved.suffix in JS_SUFFIXES:
        # Run by the JavaScript host (toolgate.backends.js_host), never imported by Python:
        # the parts only name the entry.
        return resolved, (*relative.parts[:-1], resolved.stem)
    elif kind is PathKind.FILE:
        report.error(
            pointer,
            f"the entry {value!r} must be a JavaScript/TypeScript file "
            f"({', '.join(JS_SUFFIXES)}) or a Python file ending in .py",
        )
        return None
    else:
        hint = (
            f"; did you mean '{value}.py'?"
            if path_kind(folder / f"{value}.py") is PathKind.FILE
            else ""
        )
        report.error(pointer, f"the entry {value!r} does not exist in the plugin folder{hint}")
        return None
    bad = next((part for part in parts if not part.isidentifier()), None)
    if bad is not None:
        report.error(
            pointer,
            f"the entry {value!r} cannot be imported: {bad!r} is not a Python identifier "
            "(use letters, digits and '_' in module and folder names, e.g. 'src/weather_tools.py')",
        )
        return None
    return module_file, parts
