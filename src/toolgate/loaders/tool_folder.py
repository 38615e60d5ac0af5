"""Jean2 tool folders (seed 002): ``tool.md`` or ``tool.json`` plus a script, into a :class:`Tool`.

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
* ``outputSchema`` → ``output_schema`` (the seed requires it; missing is a warning).
* ``timeout`` (milliseconds, default 30000) → ``timeout`` in seconds.
* ``requireApproval`` → ``approval=ApprovalSpec(required=...)``.
* ``dangerous`` → ``display.dangerous`` and ``side_effect=level_from_dangerous(...)``.
* ``hasSecurityCheck: true`` → ``security_check=SecurityCheckSpec(script, timeout)`` from
  ``securityScript`` (default ``security.ts``, inside the folder; a missing file is a warning:
  the call fails closed at run time) and ``securityTimeout`` (milliseconds, default 10000).
* ``env`` → ``env`` (variable names; absent or ``[]``: none).

JSON Schemas are checked against their meta-schema without any network access: a ``$schema``
other than a json-schema.org draft, or a ``$ref`` that does not point inside the schema, is an
error (checking or compiling it would fetch it).

An optional field set to ``null`` counts as not given. Unknown fields are reported as warnings.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs

from ..model import (
    ApprovalSpec,
    DisplaySpec,
    ImplementationKind,
    ScriptEntry,
    SecurityCheckSpec,
    SourceFormat,
    Tool,
    ToolSource,
    level_from_dangerous,
    split_tool_id,
)
from ..runtimes import RUNTIMES, runtime_for_extension
from .diagnostics import Diagnostic, Severity
from .safe_yaml import DEFAULT_MAX_DEPTH, DEFAULT_MAX_NODES, YamlError, load_yaml, shape_problem

__all__ = [
    "DEFAULT_SECURITY_SCRIPT",
    "DEFAULT_SECURITY_TIMEOUT_MS",
    "DEFAULT_TIMEOUT_MS",
    "MAX_DECLARATION_BYTES",
    "TOOL_FOLDER_FIELDS",
    "FolderLoad",
    "load_tool_folder",
]

TOOL_MD = "tool.md"
TOOL_JSON = "tool.json"

#: Jean2 defaults, in milliseconds as written in the file.
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_SECURITY_TIMEOUT_MS = 10_000
DEFAULT_SECURITY_SCRIPT = "security.ts"

#: ``tool.md`` / ``tool.json`` larger than this are refused unread.
MAX_DECLARATION_BYTES = 1_048_576

#: Every field a tool folder declaration may hold, in the seed's order. ``description`` is the
#: ``tool.json`` spelling of the ``tool.md`` body.
TOOL_FOLDER_FIELDS: tuple[str, ...] = (
    "name",
    "script",
    "runtime",
    "inputSchema",
    "outputSchema",
    "timeout",
    "requireApproval",
    "dangerous",
    "hasSecurityCheck",
    "securityScript",
    "securityTimeout",
    "env",
    "description",
)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The meta-schemas jsonschema-rs ships. Any other ``$schema`` would be fetched over the network
# while checking the schema, so it is refused instead.
_KNOWN_META_SCHEMA = re.compile(
    r"^https?://json-schema\.org/(?:draft-0[467]/|draft/2019-09/|draft/2020-12/)?schema#?$"
)


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


class _Report:
    """Collects the diagnostics of one declaration file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.items: list[Diagnostic] = []

    def error(self, field: str | None, message: str, *, path: str | None = None) -> None:
        self.items.append(Diagnostic(path or self.path, field, message, Severity.ERROR))

    def warning(self, field: str | None, message: str, *, path: str | None = None) -> None:
        self.items.append(Diagnostic(path or self.path, field, message, Severity.WARNING))

    @property
    def failed(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.items)


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _got(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return f"got {_kind(value)}"
    return f"got {_kind(value)} {_show(value)}"


def load_tool_folder(folder: Path, *, namespace: str = "local") -> FolderLoad:
    """Load the tool declared in ``folder`` (``tool.md``, else ``tool.json``).

    Never raises for anything the folder contains: every problem is a diagnostic, and ``tool`` is
    ``None`` when one of them is an error. Raises ``ValueError`` only for an invalid
    ``namespace`` (a programming error).
    """
    split_tool_id(f"{namespace}:x")  # raises ValueError for a bad namespace
    folder = Path(folder)
    md, js = folder / TOOL_MD, folder / TOOL_JSON
    folder_report = _Report(str(folder))

    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        folder_report.error(None, f"tool folder {what}")
        return FolderLoad(folder, None, tuple(folder_report.items), None)
    has_md, has_js = md.is_file(), js.is_file()
    if not has_md and not has_js:
        folder_report.error(
            None, f"no {TOOL_MD} or {TOOL_JSON} in the tool folder; one of them declares the tool"
        )
        return FolderLoad(folder, None, tuple(folder_report.items), None)

    declaration = md if has_md else js
    report = _Report(str(declaration))
    if has_md and has_js:
        report.warning(None, f"ignored: {TOOL_MD} takes precedence over {TOOL_JSON}", path=str(js))

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
        return FolderLoad(folder, None, tuple(report.items), None)

    tool, runtime = _build(folder, declaration, data, body, namespace, report)
    return FolderLoad(folder, None if report.failed else tool, tuple(report.items), runtime)


# --- reading and parsing ---------------------------------------------------------------------


def _read_text(path: Path, report: _Report) -> str | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_DECLARATION_BYTES + 1)
    except OSError as exc:
        report.error(None, f"cannot read the file: {exc.strerror or exc}")
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


def _parse_markdown(text: str, report: _Report) -> tuple[dict[Any, Any], str] | None:
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
        report.error(None, f"the front matter must be a YAML mapping of fields, {_got(front)}")
        return None
    return front, "".join(lines[end + 1 :]).strip()


def _parse_json(text: str, report: _Report) -> dict[Any, Any] | None:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in items:
            if key in result:
                raise _DuplicateKey(key)
            result[key] = value
        return result

    def constant(name: str) -> Any:
        raise _NotJson(name)

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as exc:
        report.error(None, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}")
        return None
    except _DuplicateKey as exc:
        report.error(None, f"invalid JSON: duplicate key {exc.args[0]!r}")
        return None
    except _NotJson as exc:
        report.error(None, f"invalid JSON: {exc.args[0]} is not a JSON value")
        return None
    except RecursionError:
        report.error(None, "invalid JSON: nested too deeply")
        return None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        report.error(None, f"invalid JSON: {exc}")
        return None
    problem = shape_problem(data, max_nodes=DEFAULT_MAX_NODES, max_depth=DEFAULT_MAX_DEPTH)
    if problem is not None:
        report.error(None, f"the JSON document is {problem}")
        return None
    if not isinstance(data, dict):
        start = len(text) - len(text.lstrip())
        line = text.count("\n", 0, start) + 1
        column = start - (text.rfind("\n", 0, start) + 1) + 1
        report.error(
            None,
            f"{TOOL_JSON} must hold one JSON object of fields; line {line}, column {column}: "
            f"{_got(data)}",
        )
        return None
    return data


class _DuplicateKey(Exception):
    pass


class _NotJson(Exception):
    pass


def _required_hint() -> str:
    return "required fields: name, script, runtime, inputSchema"


# --- fields ----------------------------------------------------------------------------------


def _build(
    folder: Path,
    declaration: Path,
    data: dict[Any, Any],
    body: str | None,
    namespace: str,
    report: _Report,
) -> tuple[Tool | None, str | None]:
    fields = _Fields(data, report)
    is_md = body is not None

    for key in data:
        if key not in TOOL_FOLDER_FIELDS:
            _unknown_field(key, report)

    name = fields.required_str("name")
    if name is not None and not _valid_name(name):
        report.error(
            "name",
            f"{name!r} is not a valid tool name: use a non-empty name without white space, "
            "':' or '/' (for example 'word-count')",
        )
        name = None

    description = _description(fields, body, report, is_md=is_md)

    try:
        root = folder.resolve()
    except (OSError, RuntimeError) as exc:
        report.error(None, f"cannot resolve the tool folder: {exc}", path=str(folder))
        return None, None

    script = fields.required_str("script")
    script_path: Path | None = None
    if script is not None:
        script_path, problem = _inside(root, script)
        if problem is not None:
            report.error("script", problem)
            script_path = None
        elif not script_path.exists():
            report.error("script", f"the script {script!r} does not exist in the tool folder")
            script_path = None
        elif not script_path.is_file():
            report.error("script", f"the script {script!r} is not a file")
            script_path = None

    runtime = _runtime(fields, script, report)
    input_schema = _schema(fields, "inputSchema", report, required=True)
    output_schema = _schema(fields, "outputSchema", report, required=False)
    timeout = fields.milliseconds("timeout", DEFAULT_TIMEOUT_MS)
    require_approval = fields.optional_bool("requireApproval")
    dangerous = fields.optional_bool("dangerous") or False
    security = _security(fields, root, report)
    env = _env(fields, report)

    if report.failed:
        return None, runtime
    assert name is not None and script_path is not None and runtime is not None
    assert input_schema is not None and timeout is not None
    try:
        tool = Tool(
            id=f"{namespace}:{name}",
            description=description or name,
            input_schema=input_schema,
            kind=ImplementationKind.SCRIPT,
            entry=ScriptEntry(path=str(script_path), runtime=runtime),
            output_schema=output_schema,
            timeout=timeout,
            side_effect=level_from_dangerous(dangerous),
            approval=ApprovalSpec(required=require_approval),
            security_check=security,
            env=env,
            display=DisplaySpec(dangerous=dangerous),
            source=ToolSource(SourceFormat.TOOL_FOLDER, str(declaration)),
        )
    except ValueError as exc:  # every rule of Tool is checked above; this is a safety net
        report.error(None, f"the declaration does not make a valid tool: {exc}")
        return None, runtime
    return tool, runtime


class _Fields:
    """Typed access to the declared fields; each type problem becomes an error diagnostic."""

    def __init__(self, data: dict[Any, Any], report: _Report) -> None:
        self.data = data
        self.report = report

    def given(self, field: str) -> bool:
        return self.data.get(field) is not None

    def required_str(self, field: str) -> str | None:
        value = self.data.get(field)
        if value is None:
            self.report.error(field, f"'{field}' is required (a string)")
            return None
        if not isinstance(value, str):
            self.report.error(field, f"'{field}' must be a string, {_got(value)}")
            return None
        if not value.strip():
            self.report.error(field, f"'{field}' must not be empty")
            return None
        return value

    def optional_str(self, field: str) -> str | None:
        value = self.data.get(field)
        if value is None or isinstance(value, str):
            return value
        self.report.error(field, f"'{field}' must be a string, {_got(value)}")
        return None

    def optional_bool(self, field: str) -> bool | None:
        value = self.data.get(field)
        if value is None or isinstance(value, bool):
            return value
        self.report.error(field, f"'{field}' must be a boolean (true or false), {_got(value)}")
        return None

    def milliseconds(self, field: str, default: int) -> float | None:
        """The field in seconds (it is written in milliseconds)."""
        value = self.data.get(field)
        if value is None:
            return default / 1000
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            self.report.error(
                field,
                f"'{field}' must be a positive number of milliseconds (default {default}), "
                f"{_got(value)}",
            )
            return None
        return value / 1000


def _valid_name(name: str) -> bool:
    return (
        name.isprintable()
        and not any(ch.isspace() for ch in name)
        and ":" not in name
        and "/" not in name
    )


def _unknown_field(key: Any, report: _Report) -> None:
    known = ", ".join(TOOL_FOLDER_FIELDS)
    field = key if isinstance(key, str) else repr(key)
    hint = ""
    if isinstance(key, str):
        close = difflib.get_close_matches(key, TOOL_FOLDER_FIELDS, n=1)
        if not close:
            lowered = {f.lower(): f for f in TOOL_FOLDER_FIELDS}
            close = [lowered[key.lower()]] if key.lower() in lowered else []
        if close:
            hint = f"; did you mean '{close[0]}'?"
    report.warning(field, f"unknown field {field!r} (ignored){hint}; known fields: {known}")


def _description(fields: _Fields, body: str | None, report: _Report, *, is_md: bool) -> str:
    declared = fields.optional_str("description")
    declared = declared.strip() if declared else ""
    if is_md:
        if body and declared:
            report.warning(
                "description",
                f"ignored: the Markdown body of {TOOL_MD} is the description the model reads",
            )
        text = body or declared
        if not text:
            report.warning(
                "description",
                f"the Markdown body of {TOOL_MD} is empty, so the model only sees the tool's "
                "name; describe what the tool does and when to use it",
            )
        return text
    if not declared:
        report.warning(
            "description",
            "'description' is missing or empty, so the model only sees the tool's name; "
            "describe what the tool does and when to use it",
        )
    return declared


def _inside(root: Path, relative: str) -> tuple[Path, str | None]:
    """``relative`` resolved under ``root``, and why it is refused (``None`` when it is not)."""
    if Path(relative).is_absolute():
        return root, f"{relative!r} must be a path relative to the tool folder, not absolute"
    try:
        resolved = (root / relative).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        return root, f"{relative!r} cannot be resolved: {exc}"
    if resolved == root or not resolved.is_relative_to(root):
        return root, (
            f"{relative!r} resolves to {resolved}, outside the tool folder; "
            "scripts must live inside the tool folder"
        )
    return resolved, None


def _runtime(fields: _Fields, script: str | None, report: _Report) -> str | None:
    allowed = ", ".join(RUNTIMES)
    value = fields.data.get("runtime")
    if value is None:
        suggested = runtime_for_extension(script) if script else None
        hint = f" ({script} suggests '{suggested}')" if suggested else ""
        report.error("runtime", f"'runtime' is required: one of {allowed}{hint}")
        return None
    if not isinstance(value, str):
        report.error("runtime", f"'runtime' must be a string, one of {allowed}; {_got(value)}")
        return None
    if value not in RUNTIMES:
        report.error("runtime", f"unknown runtime {value!r}; use one of {allowed}")
        return None
    return value


def _schema(
    fields: _Fields, field: str, report: _Report, *, required: bool
) -> dict[str, Any] | None:
    value = fields.data.get(field)
    if value is None:
        if required:
            report.error(
                field, f"'{field}' is required: a JSON Schema object (type: object) for the input"
            )
        else:
            report.warning(
                field,
                f"'{field}' is missing; the seed requires it, so results cannot be checked "
                "against a declared shape",
            )
        return None
    if not isinstance(value, dict):
        report.error(field, f"'{field}' must be a JSON Schema object, {_got(value)}")
        return None
    if required and value.get("type", "object") != "object":
        report.error(
            f"{field}/type",
            f"'{field}' must describe an object (type: object), not {_show(value.get('type'))}",
        )
        return None
    meta = value.get("$schema")
    if meta is not None and not (isinstance(meta, str) and _KNOWN_META_SCHEMA.match(meta)):
        report.error(
            f"{field}/$schema",
            f"unsupported $schema {_show(meta)}; use a json-schema.org draft "
            "(draft-04, -06, -07, 2019-09 or 2020-12) or leave it out",
        )
        return None
    remote = _remote_reference(value)
    if remote is not None:
        pointer, ref = remote
        report.error(
            f"{field}{pointer}",
            f"'{field}' refers to {_show(ref)}: only references inside the schema ('#/…') are "
            "supported; toolgate never fetches schemas",
        )
        return None
    try:
        jsonschema_rs.meta.validate(value)
    except jsonschema_rs.ValidationError as exc:
        pointer = "/" + "/".join(_escape(str(p)) for p in exc.instance_path)
        report.error(
            field if pointer == "/" else f"{field}{pointer}",
            f"'{field}' is not a valid JSON Schema at {pointer}: {exc.message}",
        )
        return None
    except Exception as exc:  # noqa: BLE001 - non-JSON values, unsupported drafts…
        report.error(field, f"'{field}' is not a usable JSON Schema: {exc}")
        return None
    return value


_REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Keywords whose values are data, not schemas: a "$ref" key there is just data.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _remote_reference(schema: dict[str, Any]) -> tuple[str, str] | None:
    """The first reference that does not point inside the schema, as (JSON pointer, value).

    Compiling such a schema would make the validator fetch it over the network.
    """
    stack: list[tuple[Any, str]] = [(schema, "")]
    while stack:
        item, pointer = stack.pop()
        if isinstance(item, dict):
            for key in _REFERENCE_KEYWORDS:
                ref = item.get(key)
                if isinstance(ref, str) and not ref.startswith("#"):
                    return f"{pointer}/{key}", ref
            for key, child in item.items():
                if key not in _DATA_KEYWORDS:
                    stack.append((child, f"{pointer}/{_escape(str(key))}"))
        elif isinstance(item, list):
            stack.extend((child, f"{pointer}/{index}") for index, child in enumerate(item))
    return None


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def _security(fields: _Fields, root: Path, report: _Report) -> SecurityCheckSpec | None:
    enabled = fields.optional_bool("hasSecurityCheck")
    if not enabled:
        for field in ("securityScript", "securityTimeout"):
            if fields.given(field):
                report.warning(field, f"'{field}' is ignored because hasSecurityCheck is not true")
        return None
    script = fields.optional_str("securityScript")
    if script is not None and not script.strip():
        report.error("securityScript", "'securityScript' must not be empty")
        script = None
    elif script is None and not fields.given("securityScript"):
        script = DEFAULT_SECURITY_SCRIPT
    timeout = fields.milliseconds("securityTimeout", DEFAULT_SECURITY_TIMEOUT_MS)
    if script is None or timeout is None:
        return None
    path, problem = _inside(root, script)
    if problem is not None:
        report.error("securityScript", problem)
        return None
    if not path.is_file():
        report.warning(
            "securityScript",
            f"the security script {script!r} is not a file in the tool folder; every call of "
            "this tool will fail until it exists (the security check fails closed)",
        )
    return SecurityCheckSpec(script=str(path), timeout=timeout)


def _env(fields: _Fields, report: _Report) -> tuple[str, ...]:
    value = fields.data.get("env")
    if value is None:
        return ()
    if not isinstance(value, list):
        report.error("env", f"'env' must be a list of variable names, {_got(value)}")
        return ()
    names: list[str] = []
    for index, item in enumerate(value):
        where = f"env[{index}]"
        if not isinstance(item, str):
            report.error(where, f"environment variable names must be strings, {_got(item)}")
        elif not _ENV_NAME.match(item):
            report.error(
                where,
                f"{_show(item)} is not a valid environment variable name "
                "(letters, digits and '_', not starting with a digit)",
            )
        elif item in names:
            report.warning(where, f"{item!r} is listed twice")
        else:
            names.append(item)
    return tuple(names)
