"""The fields of a tool folder declaration: typed access, checks, and the mapping onto a Tool.

Internal to :mod:`toolgate.formats.tool_folder.parse`, which reads ``tool.md`` / ``tool.json`` and
documents the format and the mapping; :func:`build_tool` takes the parsed fields from there. Every
problem is recorded on a :class:`Report` as a diagnostic naming the file and the field; nothing
here raises for what a declaration contains, and no file system error escapes either (see
:func:`path_kind`).
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import jsonschema_rs

from ..._spelling import did_you_mean
from ...errors import ToolDefinitionError
from ...model import (
    ApprovalSpec,
    DisplaySpec,
    ImplementationKind,
    SandboxMode,
    ScriptEntry,
    SecurityCheckSpec,
    SourceFormat,
    Tool,
    ToolSource,
    level_from_dangerous,
)
from ...model.permission_rules import env_name_refusal
from ...runtimes import RUNTIMES, runtime_for_extension
from ...schema_check import KNOWN_DIALECTS, compile_schema
from .._common.diagnostics import Report
from .._common.examples import parse_examples
from .._common.messages import got, show
from .._common.paths import PathKind, os_reason, path_kind
from .._common.sandbox_fields import folder_sandbox

__all__ = [
    "DEFAULT_SECURITY_SCRIPT",
    "DEFAULT_SECURITY_TIMEOUT_MS",
    "DEFAULT_TIMEOUT_MS",
    "TOOL_FOLDER_FIELDS",
    "TOOL_JSON",
    "TOOL_MD",
    "PathKind",
    "Report",
    "build_tool",
    "got",
    "os_reason",
    "path_kind",
]

TOOL_MD = "tool.md"
TOOL_JSON = "tool.json"

#: The format's defaults, in milliseconds as written in the file.
DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_SECURITY_TIMEOUT_MS = 10_000
DEFAULT_SECURITY_SCRIPT = "security.ts"

#: Every field a tool folder declaration may hold, in the format's order. ``description`` is the
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
    "sandbox",
    "permissions",
    "examples",
    "prestart",
    "protocol",
)
"""``sandbox``/``permissions``: toolgate's extension
(:mod:`toolgate.formats._common.sandbox_fields`);
``examples``: toolgate's extension too (prompts that should select the tool, as in Extension Info;
:mod:`toolgate.formats._common.examples`); ``prestart``/``protocol``: toolgate's extension (how the
script's processes serve calls)."""

#: The values of ``protocol``: a process per call (the format's), or a long-lived worker.
PROTOCOLS = ("oneshot", "worker")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --- fields ----------------------------------------------------------------------------------


def _contents_digest(script: Path, security: SecurityCheckSpec | None) -> str | None:
    """SHA-256 over the script and the security script (``None`` when one cannot be read)."""
    hasher = hashlib.sha256()
    paths = [script]
    if security is not None and security.script is not None:
        paths.append(Path(security.script))
    for path in paths:
        try:
            hasher.update(path.read_bytes() if path.is_file() else b"")
        except OSError:
            return None
        hasher.update(b"\0")
    return hasher.hexdigest()


def build_tool(
    folder: Path,
    declaration: Path,
    data: dict[Any, Any],
    body: str | None,
    namespace: str,
    report: Report,
) -> tuple[Tool | None, str | None]:
    """Check every field of ``data`` and map them onto a :class:`Tool` (``None`` on any error).

    ``body`` is the Markdown body of ``tool.md`` (``None`` for ``tool.json``). Also returns the
    declared runtime when it is a known one, even when the tool does not load.
    """
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
    except (OSError, RuntimeError, ValueError) as exc:
        report.error(None, f"cannot resolve the tool folder: {os_reason(exc)}", path=str(folder))
        return None, None

    script = fields.required_str("script")
    script_path: Path | None = None
    if script is not None:
        script_path, problem = _inside(root, script)
        kind = path_kind(script_path) if problem is None else None
        if problem is not None:
            report.error("script", problem)
            script_path = None
        elif isinstance(kind, str):
            report.error("script", f"cannot access the script {script!r} ({script_path}): {kind}")
            script_path = None
        elif kind is PathKind.MISSING:
            report.error("script", f"the script {script!r} does not exist in the tool folder")
            script_path = None
        elif kind is not PathKind.FILE:
            report.error("script", f"the script {script!r} is not a file")
            script_path = None

    runtime = _runtime(fields, script, report)
    input_schema = _schema(fields, "inputSchema", report, required=True)
    output_schema = _schema(fields, "outputSchema", report, required=False)
    timeout = fields.milliseconds("timeout", DEFAULT_TIMEOUT_MS)
    require_approval = fields.optional_bool("requireApproval")
    dangerous = fields.optional_bool("dangerous") or False
    examples, problem = parse_examples(data.get("examples"))
    if problem is not None:
        report.error("examples", problem)
    security = _security(fields, root, report)
    env = _env(fields, report)

    sandbox = folder_sandbox(data, root, report)
    prestart = fields.optional_bool("prestart") or False
    protocol = _protocol(fields, report)
    if protocol == "worker" and sandbox is not None and sandbox.mode is SandboxMode.COMPARTMENT:
        report.error(
            "protocol",
            "a worker runs on the host for many calls, so 'protocol: worker' cannot be combined "
            "with 'sandbox: compartment' (each compartment call gets a sandbox of its own)",
        )
    if prestart and protocol == "worker":
        report.warning("prestart", "'prestart' has no effect with 'protocol: worker'")

    if report.failed:
        return None, runtime
    assert name is not None and script_path is not None and runtime is not None
    assert input_schema is not None and timeout is not None and sandbox is not None
    # A key granted by ``permissions.env`` is a declared variable like those of ``env``.
    env = tuple(dict.fromkeys((*env, *sandbox.permissions.env)))
    try:
        tool = Tool(
            id=f"{namespace}:{name}",
            description=description or name,
            input_schema=input_schema,
            kind=ImplementationKind.SCRIPT,
            entry=ScriptEntry(
                path=str(script_path),
                runtime=runtime,
                digest=_contents_digest(script_path, security),
                prestart=prestart,
                protocol="worker" if protocol == "worker" else "oneshot",
            ),
            output_schema=output_schema,
            timeout=timeout,
            side_effect=level_from_dangerous(dangerous),
            approval=ApprovalSpec(required=require_approval),
            security_check=security,
            env=env,
            sandbox=sandbox,
            display=DisplaySpec(examples=examples, dangerous=dangerous),
            source=ToolSource(SourceFormat.TOOL_FOLDER, str(declaration)),
        )
    except ValueError as exc:  # every rule of Tool is checked above; this is a safety net
        report.error(None, f"the declaration does not make a valid tool: {exc}")
        return None, runtime
    return tool, runtime


class _Fields:
    """Typed access to the declared fields; each type problem becomes an error diagnostic."""

    def __init__(self, data: dict[Any, Any], report: Report) -> None:
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
            self.report.error(field, f"'{field}' must be a string, {got(value)}")
            return None
        if not value.strip():
            self.report.error(field, f"'{field}' must not be empty")
            return None
        return value

    def optional_str(self, field: str) -> str | None:
        value = self.data.get(field)
        if value is None or isinstance(value, str):
            return value
        self.report.error(field, f"'{field}' must be a string, {got(value)}")
        return None

    def optional_bool(self, field: str) -> bool | None:
        value = self.data.get(field)
        if value is None or isinstance(value, bool):
            return value
        self.report.error(field, f"'{field}' must be a boolean (true or false), {got(value)}")
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
                f"{got(value)}",
            )
            return None
        return value / 1000


def _protocol(fields: _Fields, report: Report) -> str | None:
    value = fields.optional_str("protocol")
    if value is not None and value not in PROTOCOLS:
        report.error(
            "protocol",
            f"'protocol' must be one of {', '.join(PROTOCOLS)} (default oneshot), got {value!r}",
        )
        return None
    return value


def _valid_name(name: str) -> bool:
    return (
        name.isprintable()
        and not any(ch.isspace() for ch in name)
        and ":" not in name
        and "/" not in name
    )


def _unknown_field(key: Any, report: Report) -> None:
    known = ", ".join(TOOL_FOLDER_FIELDS)
    field = key if isinstance(key, str) else repr(key)
    hint = did_you_mean(key, TOOL_FOLDER_FIELDS) if isinstance(key, str) else ""
    report.warning(field, f"unknown field {field!r} (ignored){hint}; known fields: {known}")


def _description(fields: _Fields, body: str | None, report: Report, *, is_md: bool) -> str:
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
        return root, f"{relative!r} ({root / relative}) cannot be resolved: {os_reason(exc)}"
    if resolved == root or not resolved.is_relative_to(root):
        return root, (
            f"{relative!r} resolves to {resolved}, outside the tool folder; "
            "scripts must live inside the tool folder"
        )
    return resolved, None


def _runtime(fields: _Fields, script: str | None, report: Report) -> str | None:
    allowed = ", ".join(RUNTIMES)
    value = fields.data.get("runtime")
    if value is None:
        suggested = runtime_for_extension(script) if script else None
        hint = f" ({script} suggests '{suggested}')" if suggested else ""
        report.error("runtime", f"'runtime' is required: one of {allowed}{hint}")
        return None
    if not isinstance(value, str):
        report.error("runtime", f"'runtime' must be a string, one of {allowed}; {got(value)}")
        return None
    if value not in RUNTIMES:
        report.error("runtime", f"unknown runtime {value!r}; use one of {allowed}")
        return None
    return value


def _schema(
    fields: _Fields, field: str, report: Report, *, required: bool
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
                f"'{field}' is missing; the tool folder format requires it, so results cannot "
                "be checked against a declared shape",
            )
        return None
    if not isinstance(value, dict):
        report.error(field, f"'{field}' must be a JSON Schema object, {got(value)}")
        return None
    if required and value.get("type", "object") != "object":
        report.error(
            f"{field}/type",
            f"'{field}' must describe an object (type: object), not {show(value.get('type'))}",
        )
        return None
    meta = value.get("$schema")
    # The dialects the gateway compiles (the meta-schema check alone accepts a few more).
    if meta is not None and not (isinstance(meta, str) and meta.rstrip("#") in KNOWN_DIALECTS):
        report.error(
            f"{field}/$schema",
            f"unsupported $schema {show(meta)}; use a json-schema.org draft "
            "(draft-04, -06, -07, 2019-09 or 2020-12) or leave it out",
        )
        return None
    remote = _remote_reference(value)
    if remote is not None:
        pointer, ref = remote
        report.error(
            f"{field}{pointer}",
            f"'{field}' refers to {show(ref)}: only references inside the schema ('#/…') are "
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
    # A valid schema may still not compile (a "$ref" to a missing definition, a pattern that is
    # not a regex): compile it as the gateway will, so the problem is reported here rather than
    # on every call.
    try:
        compile_schema(value, f"'{field}'", checked=True)  # dialect and meta-schema: above
    except ToolDefinitionError as exc:
        report.error(field, _one_line(str(exc)))
        return None
    return value


def _one_line(message: str) -> str:
    """A validator's multi-line message as one line: the problem, and where in the schema.

    ``jsonschema_rs`` appends "Failed validating "pattern" in schema["properties"]["x"]" and the
    offending instance on further lines; the location is kept, the rest dropped.
    """
    first, *rest = [line.strip() for line in message.splitlines() if line.strip()]
    where = next((line for line in rest if line.startswith("Failed validating")), None)
    if where is not None and "schema[" in where:
        return f"{first} ({where[0].lower()}{where[1:]})"
    return first


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


def _security(fields: _Fields, root: Path, report: Report) -> SecurityCheckSpec | None:
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
    kind = path_kind(path)
    if isinstance(kind, str):
        report.error(
            "securityScript", f"cannot access the security script {script!r} ({path}): {kind}"
        )
        return None
    if kind is not PathKind.FILE:
        report.warning(
            "securityScript",
            f"the security script {script!r} is not a file in the tool folder; every call of "
            "this tool will fail until it exists (the security check fails closed)",
        )
    return SecurityCheckSpec(script=str(path), timeout=timeout)


def _env(fields: _Fields, report: Report) -> tuple[str, ...]:
    value = fields.data.get("env")
    if value is None:
        return ()
    if not isinstance(value, list):
        report.error("env", f"'env' must be a list of variable names, {got(value)}")
        return ()
    names: list[str] = []
    for index, item in enumerate(value):
        where = f"env[{index}]"
        if not isinstance(item, str):
            report.error(where, f"environment variable names must be strings, {got(item)}")
        elif not _ENV_NAME.match(item):
            report.error(
                where,
                f"{show(item)} is not a valid environment variable name "
                "(letters, digits and '_', not starting with a digit)",
            )
        elif (refusal := env_name_refusal(item)) is not None:
            report.error(where, refusal)
        elif item in names:
            report.warning(where, f"{item!r} is listed twice")
        else:
            names.append(item)
    return tuple(names)
