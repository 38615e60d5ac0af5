"""Capability manifests: the ``aiCapability`` declaration of an extension.

An extension's manifest (JSON or YAML) declares its AI capability, as in the format's own
example::

    aiCapability:
      id: notion
      title: Notion
      description: Notion workspace pages, data sources, tasks, and docs.
      requiredPreferenceNames: [accessToken]     # secrets: the connection
      publicPreferenceNames: [apiBaseUrl]        # plain settings
      toolNames: [searchPages, getPage, addToPage]
      guide: Use this capability for Notion work only after the user connects Notion.
    main: tools.py                               # toolgate's extension of the format

``main`` (top level, next to ``aiCapability``; the format's "main definition") names the module
that defines the tools, relative to the manifest and inside its folder: a JavaScript or
TypeScript file (``.js``, ``.mjs``, ``.ts``, ``.mts``; run by the JavaScript host in an SES
compartment) or Python (a ``.py`` file or a package folder). Other top-level fields belong
to the extension and are ignored.

The tools themselves are checked by :mod:`toolgate.formats.capability.tools`.

:func:`read_manifest` parses and checks the manifest and never imports anything. Every problem is
a :class:`Diagnostic` naming the file, the JSON pointer of the field, and what was expected.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._common.diagnostics import Diagnostic, Report
from .._common.javascript import JS_SUFFIXES
from .._common.messages import got, kind_of, pointer
from .._common.safe_yaml import DEFAULT_MAX_BYTES, YamlError, load_yaml

__all__ = [
    "CAPABILITY_FIELDS",
    "MAIN_FIELD",
    "MANIFEST_FIELD",
    "TOOL_NAME",
    "CapabilityManifest",
    "ManifestCheck",
    "Report",
    "check_manifest",
    "got",
    "is_capability_document",
    "kind_of",
    "pointer",
    "read_manifest",
    "unknown_field",
]

MANIFEST_FIELD = "aiCapability"
#: toolgate's extension of the format: the module defining the tools.
MAIN_FIELD = "main"
#: The format's ``aiCapability`` fields, in its order.
CAPABILITY_FIELDS = (
    "id",
    "title",
    "description",
    "requiredPreferenceNames",
    "publicPreferenceNames",
    "toolNames",
    "guide",
)

# Capability ids become tool namespaces, secret scopes, keyring service names and CLI
# arguments: keep them to characters that are safe in all of those.
_CAPABILITY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_PREFERENCE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")
#: A tool name: no white space, no ':' (ids split at the last colon) and no '/'.
TOOL_NAME = re.compile(r"^[^\s:/]+$")


def unknown_field(report: Report, key: Any, known: Collection[str], *parents: str | int) -> None:
    """A warning for a field the format does not know (ignored), with a "did you mean"."""
    name = key if isinstance(key, str) else repr(key)
    close = difflib.get_close_matches(name, list(known), n=1) if isinstance(key, str) else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    report.warning(
        pointer(*parents, name),
        f"unknown field {name!r} (ignored){hint}; expected one of {', '.join(known)}",
    )


# --- the manifest ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CapabilityManifest:
    """A checked ``aiCapability`` declaration and where its tools are defined."""

    path: Path
    """The manifest file."""
    id: str
    """``aiCapability.id``: the tools' namespace and the scope of the connection's secrets."""
    title: str
    """The extension's name, as the user knows it ("connect Notion in Settings")."""
    description: str
    required_preferences: tuple[str, ...]
    """``requiredPreferenceNames``: the connection's secrets."""
    public_preferences: tuple[str, ...]
    """``publicPreferenceNames``: plain settings."""
    tool_names: tuple[str, ...]
    """``toolNames``: the tools the module must define, no more, no fewer."""
    guide: str | None
    """Text for agents while the capability is connected."""
    main: Path
    """The Python module defining the tools (a ``.py`` file or a package folder)."""


@dataclass
class ManifestCheck:
    """What :func:`read_manifest` found: the manifest (``None`` on any error) and problems."""

    manifest: CapabilityManifest | None
    diagnostics: list[Diagnostic] = field(default_factory=list)


def is_capability_document(document: Any) -> bool:
    """Whether a parsed file is a capability manifest: an object with an ``aiCapability``
    object."""
    return isinstance(document, Mapping) and isinstance(document.get(MANIFEST_FIELD), Mapping)


def read_manifest(path: Path) -> ManifestCheck:
    """Parse and check the manifest at ``path`` (JSON or YAML). Never imports anything."""
    report = Report(str(path))
    try:
        size = path.stat().st_size
        if size > DEFAULT_MAX_BYTES:
            report.error(None, f"the manifest is {size} bytes; at most {DEFAULT_MAX_BYTES}")
            return ManifestCheck(None, report.items)
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        report.error(None, f"cannot read the manifest: {reason}")
        return ManifestCheck(None, report.items)
    try:
        document = load_yaml(text, source=str(path))
    except YamlError as exc:
        report.error(None, f"not valid JSON or YAML: {exc.location}{exc.problem}")
        return ManifestCheck(None, report.items)
    return check_manifest(document, path)


def check_manifest(document: Any, path: Path) -> ManifestCheck:
    """Check a parsed manifest (see the module docstring for the fields)."""
    report = Report(str(path))
    if not isinstance(document, Mapping):
        report.error(
            None, f"expected a JSON object with an {MANIFEST_FIELD!r} object, {got(document)}"
        )
        return ManifestCheck(None, report.items)
    capability = document.get(MANIFEST_FIELD)
    if not isinstance(capability, Mapping):
        expected = f"an object with {', '.join(CAPABILITY_FIELDS)}"
        found = "missing" if capability is None else got(capability)
        report.error(pointer(MANIFEST_FIELD), f"expected {expected}; {found}")
        return ManifestCheck(None, report.items)
    for key in capability:
        if key not in CAPABILITY_FIELDS:
            unknown_field(report, key, CAPABILITY_FIELDS, MANIFEST_FIELD)
    fields = _Fields(capability, report, MANIFEST_FIELD)
    capability_id = fields.text("id", required=True)
    if capability_id is not None and not _CAPABILITY_ID.match(capability_id):
        report.error(
            pointer(MANIFEST_FIELD, "id"),
            f"{capability_id!r} is not a usable capability id: expected letters, digits, '.', "
            "'_' and '-', starting with a letter or digit (for example 'notion')",
        )
        capability_id = None
    title = fields.text("title", required=True)
    description = fields.text("description", required=True)
    required = fields.names("requiredPreferenceNames", _PREFERENCE_NAME, "preference name")
    public = fields.names("publicPreferenceNames", _PREFERENCE_NAME, "preference name")
    if required is not None and public is not None:
        for index, name in enumerate(public):
            if name in required:
                report.error(
                    pointer(MANIFEST_FIELD, "publicPreferenceNames", index),
                    f"{name!r} is also in requiredPreferenceNames "
                    f"({pointer(MANIFEST_FIELD, 'requiredPreferenceNames', required.index(name))})"
                    ": a preference is either a secret (required) or a public setting",
                )
    tool_names = fields.names("toolNames", TOOL_NAME, "tool name", required=True)
    if tool_names == ():
        report.error(
            pointer(MANIFEST_FIELD, "toolNames"), "expected at least one tool name; got []"
        )
    guide = fields.text("guide", required=False)
    main = _main(document, path, report)
    if report.failed:
        return ManifestCheck(None, report.items)
    assert capability_id is not None and title is not None and description is not None
    assert tool_names is not None and main is not None
    manifest = CapabilityManifest(
        path=path,
        id=capability_id,
        title=title,
        description=description,
        required_preferences=required or (),
        public_preferences=public or (),
        tool_names=tool_names,
        guide=guide.strip() if guide else None,
        main=main,
    )
    return ManifestCheck(manifest, report.items)


class _Fields:
    """Typed access to the fields of one object; each problem is an error diagnostic."""

    def __init__(self, data: Mapping[Any, Any], report: Report, *parents: str | int) -> None:
        self.data = data
        self.report = report
        self.parents = parents

    def where(self, *parts: str | int) -> str:
        return pointer(*self.parents, *parts)

    def text(self, name: str, *, required: bool) -> str | None:
        value = self.data.get(name)
        if value is None:
            if required:
                self.report.error(self.where(name), "required: expected a non-empty string")
            return None
        if not isinstance(value, str):
            self.report.error(self.where(name), f"expected a string, {got(value)}")
            return None
        if not value.strip():
            self.report.error(self.where(name), "expected a non-empty string; got ''")
            return None
        return value

    def names(
        self, name: str, pattern: re.Pattern[str], what: str, *, required: bool = False
    ) -> tuple[str, ...] | None:
        value = self.data.get(name)
        if value is None:
            if required:
                self.report.error(self.where(name), f"required: expected an array of {what}s")
                return None
            return ()
        if not isinstance(value, list):
            self.report.error(self.where(name), f"expected an array of {what}s, {got(value)}")
            return None
        found: list[str] = []
        ok = True
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.report.error(
                    self.where(name, index), f"expected a {what} (a string), {got(item)}"
                )
                ok = False
            elif not pattern.match(item):
                self.report.error(
                    self.where(name, index),
                    f"{item!r} is not a valid {what}: no white space, ':' or '/'"
                    + (", starting with a letter" if pattern is _PREFERENCE_NAME else ""),
                )
                ok = False
            elif item in found:
                self.report.error(
                    self.where(name, index),
                    f"{item!r} is listed twice (first at {self.where(name, found.index(item))})",
                )
                ok = False
            else:
                found.append(item)
        return tuple(found) if ok else None


def _main(document: Mapping[Any, Any], path: Path, report: Report) -> Path | None:
    where = pointer(MAIN_FIELD)
    value = document.get(MAIN_FIELD)
    expected = (
        "the module defining the tools, relative to the manifest: JavaScript/TypeScript (run "
        "by the JavaScript host) or Python (for example 'main: tools.js')"
    )
    if value is None:
        report.error(where, f"required: {expected}")
        return None
    if not isinstance(value, str) or not value.strip():
        report.error(where, f"expected {expected}; {got(value)}")
        return None
    if Path(value).is_absolute():
        report.error(where, f"{value!r} must be relative to the manifest's folder, not absolute")
        return None
    try:
        root = path.parent.resolve()
        target = (root / value).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        report.error(where, f"{value!r} cannot be resolved: {exc}")
        return None
    if target == root or not target.is_relative_to(root):
        report.error(where, f"{value!r} resolves to {target}, outside the manifest's folder {root}")
        return None
    if target.is_dir():
        if not (target / "__init__.py").is_file():
            report.error(where, f"{value!r} is a folder without __init__.py; expected {expected}")
            return None
    elif not target.is_file():
        report.error(where, f"{value!r} does not exist ({target}); expected {expected}")
        return None
    elif target.suffix != ".py" and target.suffix not in JS_SUFFIXES:
        report.error(
            where,
            f"{value!r} is neither a JavaScript/TypeScript file ({', '.join(JS_SUFFIXES)}) nor "
            f"a Python file (.py); expected {expected}",
        )
        return None
    return target
