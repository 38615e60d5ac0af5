"""Tool folders: ``tool.md`` or ``tool.json`` plus a script, into a :class:`Tool`.

A tool folder holds ``tool.md`` (YAML front matter between ``---`` lines, then a Markdown body
that is the description the model reads) or ``tool.json`` (the same fields as one JSON object,
the description in a ``description`` field), the script, and optionally a security script.

:func:`load_tool_folder` reads and checks the declaration only: it never runs the script, never
checks that the runtime is installed (that is the gateway's availability concern) and never
touches the registry. Every problem in the folder is a :class:`Diagnostic` naming the file and the
field; nothing the folder contains makes it raise.

Mapping onto :class:`~toolgate.model.Tool`:

* ``name`` → ``id = "{namespace}:{name}"`` (required; no white space, ``:`` or ``/``).
* the Markdown body (``tool.md``) or ``description`` (``tool.json``) → ``description``; empty is
  a warning and the name is used.
* ``script`` → ``entry=ScriptEntry(path=<absolute path>, runtime)`` (required; a file inside the
  folder, symlinks resolved); ``kind`` is ``script``.
* ``runtime`` → ``ScriptEntry.runtime``: one of :data:`~toolgate.runtimes.RUNTIMES` (required).
* ``inputSchema`` → ``input_schema`` (required; an ``object`` JSON Schema).
* ``outputSchema`` → ``output_schema`` (the format requires it; missing is a warning).
* ``timeout`` (milliseconds, default 30000) → ``timeout`` in seconds.
* ``requireApproval`` → ``approval=ApprovalSpec(required=...)``.
* ``dangerous`` → ``display.dangerous`` and ``side_effect=level_from_dangerous(...)``.
* ``hasSecurityCheck: true`` → ``security_check=SecurityCheckSpec(script, timeout)`` from
  ``securityScript`` (default ``security.ts``, inside the folder; a missing file is a warning:
  the call fails closed at run time) and ``securityTimeout`` (milliseconds, default 10000).
* ``env`` → ``env`` (variable names; absent or ``[]``: none).

JSON Schemas are checked against their meta-schema without any network access: a ``$schema``
other than a json-schema.org draft the gateway knows, or a ``$ref`` that does not point inside
the schema, is an error (checking or compiling it would fetch it). Each schema is then compiled
as the gateway will compile it, so one that cannot compile (a ``$ref`` to a missing definition,
a ``pattern`` that is not a regex) is an error here rather than on every call.

An optional field set to ``null`` counts as not given. Unknown fields are reported as warnings.
A file or folder the operating system refuses access to (permissions, symlink loops) is an error
naming the path and the reason. The fields themselves are checked and mapped in
:mod:`toolgate.formats.tool_folder.fields`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...model import Tool, split_tool_id
from .._common.diagnostics import Diagnostic, Report, Severity
from .._common.messages import got
from .._common.paths import PathKind, os_reason, path_kind
from .._common.safe_yaml import (
    YamlError,
    load_yaml,
)
from .._common.strict_json import JsonTextError, parse_json_document
from .fields import (
    DEFAULT_SECURITY_SCRIPT,
    DEFAULT_SECURITY_TIMEOUT_MS,
    DEFAULT_TIMEOUT_MS,
    TOOL_FOLDER_FIELDS,
    TOOL_JSON,
    TOOL_MD,
    build_tool,
)

__all__ = [
    "DEFAULT_SECURITY_SCRIPT",
    "DEFAULT_SECURITY_TIMEOUT_MS",
    "DEFAULT_TIMEOUT_MS",
    "MAX_DECLARATION_BYTES",
    "TOOL_FOLDER_FIELDS",
    "FolderLoad",
    "load_tool_folder",
]

#: ``tool.md`` / ``tool.json`` larger than this are refused unread.
MAX_DECLARATION_BYTES = 1_048_576


@dataclass(frozen=True, slots=True)
class FolderLoad:
    """The result of loading one tool folder: the tool (if it loaded) and every diagnostic."""

    folder: Path
    tool: Tool | None
    """``None`` when an error diagnostic prevents loading."""
    diagnostics: tuple[Diagnostic, ...]
    runtime: str | None
    """The declared runtime name; ``None`` when it is missing or not one of the known runtimes."""

    @property
    def ok(self) -> bool:
        """True when the tool loaded (warnings may still be present)."""
        return self.tool is not None

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        """The error diagnostics."""
        return tuple(d for d in self.diagnostics if d.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        """The warning diagnostics."""
        return tuple(d for d in self.diagnostics if d.severity is Severity.WARNING)


def load_tool_folder(folder: Path, *, namespace: str = "local") -> FolderLoad:
    """Load the tool declared in ``folder`` (``tool.md``, else ``tool.json``).

    Never raises for anything the folder contains: every problem is a diagnostic, and ``tool`` is
    ``None`` when one of them is an error. Raises ``ValueError`` only for an invalid
    ``namespace`` (a programming error).
    """
    split_tool_id(f"{namespace}:x")  # raises ValueError for a bad namespace
    folder = Path(folder)
    md, js = folder / TOOL_MD, folder / TOOL_JSON
    folder_report = Report(str(folder))

    def failed(report: Report) -> FolderLoad:
        return FolderLoad(folder, None, tuple(report.items), None)

    folder_kind = path_kind(folder)
    if isinstance(folder_kind, str):
        folder_report.error(None, f"cannot access the tool folder: {folder_kind}")
        return failed(folder_report)
    if folder_kind is not PathKind.FOLDER:
        what = "does not exist" if folder_kind is PathKind.MISSING else "is not a folder"
        folder_report.error(None, f"tool folder {what}")
        return failed(folder_report)

    # A declaration that cannot be checked is an error, not a missing file: falling back to
    # tool.json (or to "no declaration") would load something other than what was written.
    md_kind = path_kind(md)
    if isinstance(md_kind, str):
        folder_report.error(None, f"cannot access the file: {md_kind}", path=str(md))
        return failed(folder_report)
    js_kind = path_kind(js)
    has_md, has_js = md_kind is PathKind.FILE, js_kind is PathKind.FILE
    if isinstance(js_kind, str) and not has_md:
        folder_report.error(None, f"cannot access the file: {js_kind}", path=str(js))
        return failed(folder_report)
    if not has_md and not has_js:
        folder_report.error(
            None, f"no {TOOL_MD} or {TOOL_JSON} in the tool folder; one of them declares the tool"
        )
        return failed(folder_report)

    declaration = md if has_md else js
    report = Report(str(declaration))
    if has_md and has_js:
        report.warning(None, f"ignored: {TOOL_MD} takes precedence over {TOOL_JSON}", path=str(js))
    elif has_md and isinstance(js_kind, str):
        report.warning(
            None,
            f"ignored: {TOOL_MD} takes precedence over {TOOL_JSON}, which cannot be accessed: "
            f"{js_kind}",
            path=str(js),
        )

    text = _read_text(declaration, report)
    data: dict[Any, Any] | None = None
    body: str | None = None
    if text is not None:
        if has_md:
            parsed = _parse_markdown(text, report)
            if parsed is not None:
                data, body = parsed
        else:
            data = _parse_json(text, report)
    if data is None:
        return failed(report)

    tool, runtime = build_tool(folder, declaration, data, body, namespace, report)
    return FolderLoad(folder, None if report.failed else tool, tuple(report.items), runtime)


# --- reading and parsing ---------------------------------------------------------------------


def _read_text(path: Path, report: Report) -> str | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_DECLARATION_BYTES + 1)
    except OSError as exc:
        report.error(None, f"cannot read the file: {os_reason(exc)}")
        return None
    if len(raw) > MAX_DECLARATION_BYTES:
        report.error(None, f"the file is larger than {MAX_DECLARATION_BYTES} bytes (1 MiB)")
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        report.error(None, f"the file is not valid UTF-8 (byte {exc.start}: {exc.reason})")
        return None
    return text.removeprefix("\ufeff")


def _parse_markdown(text: str, report: Report) -> tuple[dict[Any, Any], str] | None:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip() != "---":
        report.error(
            None,
            f"{TOOL_MD} must start with YAML front matter: a line '---', the fields, "
            "then a closing line '---'",
        )
        return None
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
    if end is None:
        report.error(
            None, f"the front matter of {TOOL_MD} is not closed: add a line '---' after the fields"
        )
        return None
    try:
        front = load_yaml("".join(lines[1:end]), source=report.path, line_offset=1)
    except YamlError as exc:
        report.error(None, f"invalid YAML front matter: {exc.location}{exc.problem}")
        return None
    if front is None:
        report.error(None, "the front matter is empty; " + _required_hint())
        return None
    if not isinstance(front, dict):
        report.error(None, f"the front matter must be a YAML mapping of fields, {got(front)}")
        return None
    return front, "".join(lines[end + 1 :]).strip()


def _parse_json(text: str, report: Report) -> dict[Any, Any] | None:
    try:
        data = parse_json_document(text)
    except JsonTextError as exc:
        report.error(None, exc.message)
        return None
    if not isinstance(data, dict):
        start = len(text) - len(text.lstrip())
        line = text.count("\n", 0, start) + 1
        column = start - (text.rfind("\n", 0, start) + 1) + 1
        report.error(
            None,
            f"{TOOL_JSON} must hold one JSON object of fields; line {line}, column {column}: "
            f"{got(data)}",
        )
        return None
    return data


def _required_hint() -> str:
    return "required fields: name, script, runtime, inputSchema"
