"""A ``kind: Tool`` resource → a :class:`~toolgate.model.Tool`.

Internal to :mod:`toolgate.formats.resource.parse`, which documents the whole mapping. This module
checks every field of ``spec`` and builds the tool; it never imports or runs the implementation
(``type: function`` keeps the import path for the source to bind, ``type: os`` the argv).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...errors import ToolDefinitionError
from ...model import (
    ApprovalSpec,
    DisplaySpec,
    IdempotencySpec,
    ImplementationKind,
    McpEntry,
    ObservabilitySpec,
    OsCommandEntry,
    PythonEntry,
    RateLimit,
    RestEndpoint,
    SafetySpec,
    SandboxMode,
    SandboxSpec,
    SideEffect,
    SourceFormat,
    Tool,
    ToolHints,
    ToolSource,
)
from ...model.tool import DEFAULT_IDEMPOTENCY_WINDOW
from ...schema_check import compile_schema
from .._common.document_fields import Checker, DocumentRef
from .._common.examples import parse_examples
from .._common.messages import got, pointer
from .._common.sandbox_fields import os_sandbox

__all__ = [
    "DEFAULT_LEVELS",
    "DEFAULT_TIMEOUTS",
    "HTTP_METHODS",
    "SPEC_FIELDS",
    "TOOL_TYPES",
    "ToolResource",
    "build_tool_resource",
    "url_placeholders",
]

#: The ``spec.type`` values and the implementation kind each becomes.
TOOL_TYPES: Mapping[str, ImplementationKind] = {
    "function": ImplementationKind.PYTHON,
    "rest": ImplementationKind.REST,
    "mcp": ImplementationKind.MCP,
    "os": ImplementationKind.OS,
}

#: Every field ``spec`` may hold: the specification's, plus ``function``, ``command`` and
#: ``timeout`` (the specification names the types but not where their implementation is
#: written).
SPEC_FIELDS = (
    "type",
    "description",
    "endpoint",
    "mcpServerRef",
    "function",
    "command",
    "timeout",
    "inputSchema",
    "outputSchema",
    "sideEffects",
    "safety",
    "observability",
    "sandbox",
    "permissions",
    "examples",
)
"""``examples`` (prompts that should select the tool, :mod:`toolgate.formats._common.examples`), and
``sandbox`` and ``permissions`` (type ``os`` only) are toolgate's extension of the resource
format, in the plugin format's vocabulary: an ``os`` tool runs in a ``compartment`` unless it
says ``host``."""
_TYPE_FIELDS = {"rest": "endpoint", "mcp": "mcpServerRef", "function": "function", "os": "command"}
_ENDPOINT_FIELDS = ("method", "url", "auth", "timeout")
_AUTH_FIELDS = ("type", "secretRef")
_SIDE_EFFECT_FIELDS = (
    "level",
    "idempotent",
    "requiresApproval",
    "idempotencyKeyTemplate",
    "idempotencyWindow",
)
_SAFETY_FIELDS = ("allowedAgents", "deniedNamespaces", "rateLimit")
_OBSERVABILITY_FIELDS = ("logArgs", "logResult", "redactFields")

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

#: The level of a tool that declares none: what the type can do at worst, so that an
#: undeclared REST or MCP tool asks for approval rather than writing to the world unasked.
DEFAULT_LEVELS: Mapping[str, SideEffect] = {
    "function": SideEffect.LOCAL_WRITE,
    "rest": SideEffect.EXTERNAL_WRITE,
    "mcp": SideEffect.EXTERNAL_WRITE,
    "os": SideEffect.CODE_EXECUTION,
}
#: Seconds: functions keep the Python default, requests and commands the script default.
DEFAULT_TIMEOUTS: Mapping[str, float] = {"function": 60.0, "rest": 30.0, "mcp": 60.0, "os": 30.0}

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_IDENTIFIERS = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1", "[::1]")


@dataclass(frozen=True, slots=True)
class ToolResource:
    """One loaded ``kind: Tool`` resource."""

    tool: Tool
    """The normalized tool (for ``function`` tools, before the function is bound)."""
    type: str
    """``function``, ``rest``, ``mcp`` or ``os``."""
    where: DocumentRef
    function: str | None = None
    """``type: function``: the import path as written (``module:attr`` or ``./file.py:attr``)."""
    declared_input_schema: bool = True
    """False when ``inputSchema`` was left out (``function``: taken from the signature;
    ``mcp``: the server's)."""


def url_placeholders(url: str) -> list[str]:
    """The ``{name}`` placeholders of a URL template, in order."""
    return _PLACEHOLDER.findall(url)


def build_tool_resource(
    data: Mapping[str, Any], name: str, namespace: str, check: Checker
) -> ToolResource | None:
    """Check ``spec`` of a Tool document (``data`` is the whole document) and build the tool;
    ``None`` when any error was recorded on ``check``."""
    spec = check.mapping(data, "spec", "", required=True)
    if spec is None:
        return None
    check.only(spec, "/spec", SPEC_FIELDS)
    kind = check.string(spec, "type", "/spec", required=True, choices=TOOL_TYPES)
    # An MCP tool may leave its description (and inputSchema) to the server that lists it.
    description = check.string(spec, "description", "/spec", required=kind != "mcp")
    if kind == "mcp" and description is None and "description" not in spec:
        description = ""
    if kind is not None:
        for other, field in _TYPE_FIELDS.items():
            if other != kind and field in spec:
                check.error(
                    pointer("spec", field), f"is only for type: {other} (this tool is type: {kind})"
                )
    input_schema = _schema(spec, "inputSchema", check, required=kind in ("rest", "os"))
    output_schema = _schema(spec, "outputSchema", check, required=False)
    properties, required = _inputs(input_schema)

    entry: Any = None
    secret: str | None = None
    timeout = check.duration(spec, "timeout", "/spec")
    if kind == "rest":
        endpoint, secret, endpoint_timeout = _endpoint(spec, properties, required, check)
        entry = endpoint
        if endpoint_timeout is not None:
            if timeout is not None:
                check.error("/spec/timeout", "give the timeout once: here or in endpoint.timeout")
            timeout = endpoint_timeout
    elif kind == "mcp":
        entry = _mcp_ref(spec, name, check)
    elif kind == "function":
        entry = _function_ref(spec, check)
    elif kind == "os":
        entry = _command(spec, Path(check.where.path).parent, check)
    sandbox = _sandbox(spec, kind, Path(check.where.path).parent, check)

    level, idempotency, approval = _side_effects(spec, kind, check)
    safety = _safety(spec, check)
    observability = _observability(spec, check)
    examples, problem = parse_examples(spec.get("examples"))
    if problem is not None:
        check.error("/spec/examples", problem)
    if check.failed or kind is None or description is None or sandbox is None:
        return None
    try:
        tool = Tool(
            id=f"{namespace}:{name}",
            description=description,
            input_schema=input_schema or {"type": "object"},
            kind=TOOL_TYPES[kind],
            entry=entry,
            output_schema=output_schema,
            timeout=timeout or DEFAULT_TIMEOUTS[kind],
            side_effect=level,
            hints=ToolHints(idempotent=idempotency.idempotent),
            approval=approval,
            # The specification: an os tool is "a sandboxed command"; the source lowers this to
            # host mode only when the operator opts in.
            sandbox=sandbox,
            # The keys ``permissions.env`` grants are the command's declared variables.
            env=sandbox.permissions.env,
            secrets=() if secret is None else (secret,),
            safety=safety,
            idempotency=idempotency,
            observability=observability,
            display=DisplaySpec(examples=examples),
            source=ToolSource(SourceFormat.RESOURCE, check.where.path),
        )
    except ValueError as exc:  # every rule of Tool is checked above; this is a safety net
        check.error("", f"the resource does not make a valid tool: {exc}")
        return None
    return ToolResource(
        tool=tool,
        type=kind,
        where=check.where,
        function=entry.ref if isinstance(entry, PythonEntry) else None,
        declared_input_schema=input_schema is not None,
    )


# -- schemas -----------------------------------------------------------------------------------


def _schema(
    spec: Mapping[str, Any], key: str, check: Checker, *, required: bool
) -> dict[str, Any] | None:
    schema = check.mapping(spec, key, "/spec", required=required)
    if schema is None:
        return None
    here = pointer("spec", key)
    if key == "inputSchema" and schema.get("type", "object") != "object":
        check.error(pointer("spec", key, "type"), f"expected 'object', {got(schema.get('type'))}")
        return None
    try:
        compile_schema(schema, "the schema")
    except ToolDefinitionError as exc:
        check.error(here, f"expected a valid JSON Schema: {exc.message}")
        return None
    return schema


def _inputs(schema: Mapping[str, Any] | None) -> tuple[Mapping[str, Any], set[str]]:
    if schema is None:
        return {}, set()
    properties = schema.get("properties")
    required = schema.get("required")
    return (
        properties if isinstance(properties, dict) else {},
        {r for r in required if isinstance(r, str)} if isinstance(required, list) else set(),
    )


# -- implementations -------------------------------------------------------------------------


def _endpoint(
    spec: Mapping[str, Any], properties: Mapping[str, Any], required: set[str], check: Checker
) -> tuple[RestEndpoint | None, str | None, float | None]:
    endpoint = check.mapping(spec, "endpoint", "/spec", required=True)
    if endpoint is None:
        return None, None, None
    check.only(endpoint, "/spec/endpoint", _ENDPOINT_FIELDS)
    method = check.string(endpoint, "method", "/spec/endpoint", required=True)
    if method is not None and method.upper() not in HTTP_METHODS:
        check.error(
            "/spec/endpoint/method", f"expected one of {', '.join(HTTP_METHODS)}, {got(method)}"
        )
        method = None
    url = check.string(endpoint, "url", "/spec/endpoint", required=True)
    if url is not None and not _check_url(url, properties, required, check):
        url = None
    secret: str | None = None
    auth = check.mapping(endpoint, "auth", "/spec/endpoint")
    if auth is not None:
        check.only(auth, "/spec/endpoint/auth", _AUTH_FIELDS)
        check.string(auth, "type", "/spec/endpoint/auth", required=True, choices=("bearer",))
        ref = check.mapping(auth, "secretRef", "/spec/endpoint/auth", required=True)
        if ref is not None:
            check.only(ref, "/spec/endpoint/auth/secretRef", ("name",))
            secret = check.string(ref, "name", "/spec/endpoint/auth/secretRef", required=True)
            if secret is not None and not _SECRET_NAME.match(secret):
                check.error(
                    "/spec/endpoint/auth/secretRef/name",
                    "expected a secret name of letters, digits, '.', '_' and '-' (for example "
                    f"'zendesk-api-token'), {got(secret)}",
                )
                secret = None
        if url is not None and secret is not None:
            parts = urlsplit(url)
            if parts.scheme == "http" and (parts.hostname or "") not in _LOCAL_HOSTS:
                check.warning(
                    "/spec/endpoint/url",
                    "the bearer token would be sent unencrypted over http; use https",
                )
    timeout = check.duration(endpoint, "timeout", "/spec/endpoint")
    if method is None or url is None:
        return None, secret, timeout
    return (
        RestEndpoint(
            method=method.upper(),
            url=url,
            auth_type=None if auth is None else "bearer",
            secret_ref=secret,
        ),
        secret,
        timeout,
    )


def _check_url(url: str, properties: Mapping[str, Any], required: set[str], check: Checker) -> bool:
    """Placeholders may only fill the path and the query: the origin (where the token goes)
    is fixed by the operator, never chosen by the model's arguments."""
    at = "/spec/endpoint/url"
    stripped = _PLACEHOLDER.sub("", url)
    if "{" in stripped or "}" in stripped:
        check.error(at, "expected '{name}' placeholders with matching braces")
        return False
    names = url_placeholders(url)
    neutral = _PLACEHOLDER.sub("x", url)
    try:
        parts = urlsplit(neutral)
        _ = parts.port  # raises for a port that is not a number
    except ValueError as exc:
        check.error(at, f"expected an absolute http or https URL: {exc}")
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname:
        check.error(at, f"expected an absolute http or https URL, {got(url)}")
        return False
    if parts.username is not None or parts.password is not None:
        check.error(at, "must not hold credentials; use auth.secretRef")
        return False
    if parts.fragment or "#" in url:
        check.error(at, "must not have a fragment ('#…'): it is never sent to the server")
        return False
    origin_end = len(f"{parts.scheme}://{parts.netloc}")
    if any(match.start() < origin_end for match in _PLACEHOLDER.finditer(url)):
        check.error(
            at,
            "placeholders may fill only the path and the query, not the scheme, host or port",
        )
        return False
    ok = True
    for placeholder in names:
        if placeholder not in properties:
            check.error(
                at,
                f"placeholder {{{placeholder}}} must name a property of inputSchema "
                f"(known: {', '.join(properties) or 'none'})",
            )
            ok = False
        elif placeholder not in required:
            check.error(
                at,
                f"placeholder {{{placeholder}}} must name a required property: add "
                f"{placeholder!r} to inputSchema.required",
            )
            ok = False
    return ok


def _mcp_ref(spec: Mapping[str, Any], name: str, check: Checker) -> McpEntry | None:
    ref = check.mapping(spec, "mcpServerRef", "/spec", required=True)
    if ref is None:
        return None
    check.only(ref, "/spec/mcpServerRef", ("name", "toolName"))
    server = check.string(ref, "name", "/spec/mcpServerRef", required=True)
    remote = check.string(ref, "toolName", "/spec/mcpServerRef")
    return None if server is None else McpEntry(server=server, remote_name=remote or name)


def _function_ref(spec: Mapping[str, Any], check: Checker) -> PythonEntry | None:
    ref = check.string(spec, "function", "/spec", required=True)
    if ref is None:
        return None
    module, sep, attr = ref.rpartition(":")
    is_file = module.endswith(".py")
    if (
        not sep
        or not module
        or not _IDENTIFIERS.match(attr)
        or (not is_file and not _IDENTIFIERS.match(module))
    ):
        check.error(
            "/spec/function",
            "expected an import path 'package.module:function' or a file "
            f"'./file.py:function' (relative to this file), {got(ref)}",
        )
        return None
    return PythonEntry(ref)


def _command(spec: Mapping[str, Any], folder: Path, check: Checker) -> OsCommandEntry | None:
    if isinstance(spec.get("command"), str):
        check.error(
            "/spec/command",
            "expected the argv as a list of strings (no shell runs it), for example ['du', '-sh']",
        )
        return None
    argv = check.strings(spec, "command", "/spec", non_empty=True)
    if argv is None:
        if "command" not in spec:
            check.error("/spec/command", "is required for type: os: expected a list of strings")
        return None
    program = argv[0]
    # A relative path to a program is relative to the resource file, not to wherever the
    # gateway happens to run; a bare name is looked up on PATH when it runs.
    if "/" in program and not Path(program).is_absolute():
        program = str((folder / program).resolve())
    return OsCommandEntry((program, *argv[1:]))


# -- rules -------------------------------------------------------------------------------------


def _side_effects(
    spec: Mapping[str, Any], kind: str | None, check: Checker
) -> tuple[SideEffect, IdempotencySpec, ApprovalSpec]:
    default = DEFAULT_LEVELS.get(kind or "", SideEffect.LOCAL_WRITE)
    section = check.mapping(spec, "sideEffects", "/spec")
    if section is None:
        return default, IdempotencySpec(), ApprovalSpec()
    at = "/spec/sideEffects"
    check.only(section, at, _SIDE_EFFECT_FIELDS)
    level = check.string(section, "level", at, choices=[str(level) for level in SideEffect])
    idempotent = check.boolean(section, "idempotent", at)
    template = check.string(section, "idempotencyKeyTemplate", at)
    window = check.duration(section, "idempotencyWindow", at)
    requires = check.boolean(section, "requiresApproval", at)
    return (
        SideEffect(level) if level is not None else default,
        IdempotencySpec(idempotent, template, window or DEFAULT_IDEMPOTENCY_WINDOW),
        ApprovalSpec(required=requires),
    )


def _safety(spec: Mapping[str, Any], check: Checker) -> SafetySpec:
    section = check.mapping(spec, "safety", "/spec")
    if section is None:
        return SafetySpec()
    at = "/spec/safety"
    check.only(section, at, _SAFETY_FIELDS)
    agents = check.strings(section, "allowedAgents", at)
    if agents == ():
        check.warning(f"{at}/allowedAgents", "is empty: no agent may call this tool")
    denied = check.strings(section, "deniedNamespaces", at) or ()
    limit: RateLimit | None = None
    rate = check.mapping(section, "rateLimit", at)
    if rate is not None:
        check.only(rate, f"{at}/rateLimit", ("callsPerMinute", "callsPerDay"))
        per_minute = check.positive_int(rate, "callsPerMinute", f"{at}/rateLimit")
        per_day = check.positive_int(rate, "callsPerDay", f"{at}/rateLimit")
        if per_minute is not None or per_day is not None:
            limit = RateLimit(per_minute, per_day)
    return SafetySpec(allowed_agents=agents, denied_namespaces=denied, rate_limit=limit)


def _observability(spec: Mapping[str, Any], check: Checker) -> ObservabilitySpec:
    section = check.mapping(spec, "observability", "/spec")
    if section is None:
        return ObservabilitySpec()
    at = "/spec/observability"
    check.only(section, at, _OBSERVABILITY_FIELDS)
    log_args = check.boolean(section, "logArgs", at)
    log_result = check.boolean(section, "logResult", at)
    fields = check.strings(section, "redactFields", at) or ()
    for index, path in enumerate(fields):
        if path.split(".", 1)[0] not in ("args", "result"):
            check.error(
                pointer("spec", "observability", "redactFields", index),
                f"expected a path starting with 'args.' or 'result.' (for example "
                f"'args.body'), {got(path)}",
            )
    return ObservabilitySpec(
        log_args=True if log_args is None else log_args,
        log_result=True if log_result is None else log_result,
        redact_fields=fields,
    )


def _sandbox(
    spec: Mapping[str, Any], kind: str | None, folder: Path, check: Checker
) -> SandboxSpec | None:
    """``spec.sandbox`` / ``spec.permissions`` of an ``os`` tool (see
    :mod:`toolgate.formats._common.sandbox_fields`); other types run in the gateway and have
    none."""
    if kind == "os":
        return os_sandbox(spec, folder, check)
    for field in ("sandbox", "permissions"):
        if field in spec:
            check.error(f"/spec/{field}", f"is only for type: os (this tool is type: {kind})")
    return SandboxSpec(SandboxMode.HOST)
