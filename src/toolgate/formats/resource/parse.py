"""Kubernetes-style resources → tools, access policies and MCP server documents.

A file holds one or more YAML documents separated by ``---`` (or one JSON document); a folder is
every ``.yaml``, ``.yml`` and ``.json`` file directly inside it, loaded together. Each document
is a resource::

    apiVersion: joch.dev/v1alpha1
    kind: Tool | Policy | MCPServer
    metadata: {name: ..., namespace: ...}   # namespace defaults to "default"
    spec: {...}
    status: {...}                           # an output (toolgate get tools): ignored on input

``kind: Tool`` maps onto :class:`~toolgate.model.Tool` (id ``<namespace>:<name>``):

==================================  ===========================================================
resource field                      Tool field
==================================  ===========================================================
``spec.type``                       ``kind``: function → python, rest, mcp, os
``spec.description``                ``description``
``spec.function``                   ``entry``: PythonEntry (``module:attr`` or ``./file.py:attr``)
``spec.endpoint`` method, url,      ``entry``: RestEndpoint; ``secrets`` = (secretRef name,);
auth {type: bearer, secretRef},     ``timeout``
timeout
``spec.mcpServerRef`` name,         ``entry``: McpEntry(server, remote name; default
toolName                            ``metadata.name``)
``spec.command`` (argv list)        ``entry``: OsCommandEntry; ``sandbox``: compartment
``spec.timeout``                    ``timeout`` (seconds, or ``500ms`` / ``30s`` / ``2m``)
``spec.inputSchema``,               ``input_schema``, ``output_schema``
``spec.outputSchema``
``sideEffects.level``               ``side_effect`` (default by type: function local_write,
                                    rest and mcp external_write, os code_execution)
``sideEffects.idempotent``          ``idempotency.idempotent`` and ``hints.idempotent``
``sideEffects.requiresApproval``    ``approval.required``
``sideEffects.idempotencyKey…``     ``idempotency.key_template`` (and ``idempotencyWindow``)
``safety.allowedAgents``,           ``safety``
``deniedNamespaces``, ``rateLimit``
``observability.*``                 ``observability`` (log_args, log_result, redact_fields)
==================================  ===========================================================

``kind: Policy`` is loaded by :func:`toolgate.formats.resource.policy.load_policy`. ``kind:
MCPServer``
documents are returned as they are, for the MCP source to parse. Every problem is a diagnostic
naming the file, the document number and the JSON pointer; unknown fields are errors (a typo in a
safety rule must not silently drop the rule). Nothing is imported or run here.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...model import McpEntry, OsCommandEntry, PythonEntry, RestEndpoint, Tool
from ...model.policy import AccessPolicy
from .._common.diagnostics import Diagnostic
from .._common.document_fields import Checker, DocumentRef
from .._common.messages import got, pointer
from .._common.safe_yaml import YamlError, load_yaml, split_yaml_documents
from .policy import load_policy
from .tool import ToolResource, build_tool_resource

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "DEFAULT_NAMESPACE",
    "KINDS",
    "PolicyResource",
    "RawResource",
    "ResourceSet",
    "ToolResource",
    "is_resource",
    "load_resources",
    "parse_resources",
    "resource_files",
    "tool_document",
]

API_VERSION = "joch.dev/v1alpha1"
API_GROUP = "joch.dev/"
KINDS = ("Tool", "Policy", "MCPServer")
#: The namespace of a resource whose metadata names none (as in Kubernetes).
DEFAULT_NAMESPACE = "default"
RESOURCE_SUFFIXES = (".yaml", ".yml", ".json")
#: A resource file larger than this is refused before it is read.
MAX_FILE_BYTES = 8 * 1024 * 1024

_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_METADATA_FIELDS = ("name", "namespace", "labels", "annotations")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_NAME_RULE = "letters, digits, '.', '_' and '-', starting and ending with a letter or digit"


@dataclass(frozen=True, slots=True)
class RawResource:
    """A resource document handed on unparsed (``kind: MCPServer``)."""

    kind: str
    data: Mapping[str, Any]
    where: DocumentRef
    pointer: str = ""
    """The JSON pointer of the document in its file, viewing a multi-document file as an array
    (``"/2"`` for the third document; ``""`` when the file holds one document)."""


@dataclass(frozen=True, slots=True)
class PolicyResource:
    """A loaded ``kind: Policy`` resource and where it was declared."""

    policy: AccessPolicy
    where: DocumentRef


@dataclass
class ResourceSet:
    """Everything a file or folder of resources declares."""

    tools: list[ToolResource] = field(default_factory=list)
    policies: list[PolicyResource] = field(default_factory=list)
    servers: list[RawResource] = field(default_factory=list)
    """``kind: MCPServer`` documents."""
    diagnostics: list[Diagnostic] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    """The files read."""

    def extend(self, other: ResourceSet) -> None:
        """Add another file's resources (duplicates are checked by :func:`load_resources`)."""
        self.tools.extend(other.tools)
        self.policies.extend(other.policies)
        self.servers.extend(other.servers)
        self.diagnostics.extend(other.diagnostics)
        self.files.extend(other.files)


def is_resource(document: Any) -> bool:
    """Whether a parsed document is a Kubernetes-style resource of this format (its
    ``apiVersion`` is ``joch.dev/…``)."""
    return (
        isinstance(document, dict)
        and isinstance(document.get("apiVersion"), str)
        and document["apiVersion"].startswith(API_GROUP)
    )


def resource_files(path: Path) -> tuple[list[Path], list[Diagnostic]]:
    """The resource files of ``path``: the file itself, or a folder's ``.yaml``/``.yml``/
    ``.json`` files (not recursive, sorted by name, hidden files skipped)."""
    try:
        if path.is_file():
            return [path], []
        if path.is_dir():
            found = sorted(
                child
                for child in path.iterdir()
                if child.suffix in RESOURCE_SUFFIXES
                and not child.name.startswith(".")
                and child.is_file()
            )
            if not found:
                return [], [
                    Diagnostic(str(path), None, "the folder holds no .yaml, .yml or .json files")
                ]
            return found, []
    except OSError as exc:
        return [], [Diagnostic(str(path), None, f"cannot be read: {exc.strerror or exc}")]
    return [], [Diagnostic(str(path), None, "no such file or folder")]


def load_resources(path: Path) -> ResourceSet:
    """Read and check every resource in a file or folder. Never raises for what the files hold;
    never imports or runs anything."""
    files, problems = resource_files(path)
    result = ResourceSet(diagnostics=problems)
    for file in files:
        result.extend(_load_file(file))
    _check_duplicates(result)
    return result


def _load_file(file: Path) -> ResourceSet:
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            problem = f"is larger than {MAX_FILE_BYTES:,} bytes ({size:,}); split it"
            return ResourceSet(diagnostics=[Diagnostic(str(file), None, problem)])
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
        return ResourceSet(diagnostics=[Diagnostic(str(file), None, problem)], files=[file])
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror or exc}"
        return ResourceSet(diagnostics=[Diagnostic(str(file), None, problem)])
    loaded = parse_resources(text, source=str(file))
    loaded.files.append(file)
    return loaded


def parse_resources(text: str, *, source: str) -> ResourceSet:
    """Check every document of a (multi-document) resource text; ``source`` names the file
    (relative ``./file.py`` functions and commands are relative to its folder)."""
    result = ResourceSet()
    # Each document is parsed on its own, so a syntax error in one does not hide the others.
    number = 0
    for offset, chunk in split_yaml_documents(text):
        if not chunk.strip():
            continue
        number += 1
        where = DocumentRef(source, number, offset + 1)
        try:
            document = load_yaml(chunk, source=source, line_offset=offset)
        except YamlError as exc:
            result.diagnostics.append(where.diagnostic("", f"{exc.location}{exc.problem}"))
            continue
        if document is None:
            number -= 1  # only comments: not a document
            continue
        _load_document(document, where, result)
    if number == 0:
        result.diagnostics.append(Diagnostic(source, None, "holds no resource documents"))
    if number > 1:
        result.servers = [
            dataclasses.replace(raw, pointer=f"/{raw.where.number - 1}") for raw in result.servers
        ]
    return result


def _load_document(document: Any, where: DocumentRef, result: ResourceSet) -> None:
    check = Checker(where)
    if not isinstance(document, dict):
        check.error(
            "", f"expected a resource object (apiVersion, kind, metadata, spec), {got(document)}"
        )
        result.diagnostics.extend(check.items)
        return
    kind = _header(document, check)
    if kind is None:
        result.diagnostics.extend(check.items)
        return
    if kind == "MCPServer":
        result.servers.append(RawResource(kind, document, where))
        return
    if kind == "Policy":
        try:
            policy = load_policy(document, source=f"{where.path} ({where.field()})")
            result.policies.append(PolicyResource(policy, where))
        except ValueError as exc:
            message = str(exc).removeprefix(f"{where.path} ({where.field()}): ")
            check.error("", f"not a valid Policy: {message}")
        result.diagnostics.extend(check.items)
        return
    check.only(document, "", _TOP_FIELDS)
    identity = _metadata(document, check)
    tool = None if identity is None else build_tool_resource(document, *identity, check)
    if tool is not None and not check.failed:
        result.tools.append(tool)
    result.diagnostics.extend(check.items)


def _header(document: Mapping[str, Any], check: Checker) -> str | None:
    version = document.get("apiVersion")
    if not isinstance(version, str) or not version.startswith(API_GROUP):
        check.error("/apiVersion", f"expected {API_VERSION!r}, {got(version)}")
        return None
    if version != API_VERSION:
        check.error("/apiVersion", f"unsupported version: expected {API_VERSION!r}, {got(version)}")
        return None
    kind = document.get("kind")
    if kind not in KINDS:
        close = difflib.get_close_matches(str(kind), KINDS, n=1) if isinstance(kind, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        check.error("/kind", f"expected one of {', '.join(KINDS)}, {got(kind)}{hint}")
        return None
    return str(kind)


def _metadata(document: Mapping[str, Any], check: Checker) -> tuple[str, str] | None:
    metadata = check.mapping(document, "metadata", "", required=True)
    if metadata is None:
        return None
    check.only(metadata, "/metadata", _METADATA_FIELDS)
    for key in ("labels", "annotations"):
        values = check.mapping(metadata, key, "/metadata")
        for label, value in (values or {}).items():
            if not isinstance(value, str):
                check.error(pointer("metadata", key, label), f"expected a string, {got(value)}")
    name = check.string(metadata, "name", "/metadata", required=True)
    namespace = check.string(metadata, "namespace", "/metadata") or DEFAULT_NAMESPACE
    for key, value in (("name", name), ("namespace", namespace)):
        if value is not None and (not _NAME.match(value) or len(value) > 253):
            check.error(f"/metadata/{key}", f"expected {_NAME_RULE}, {got(value)}")
            return None
    return None if name is None else (name, namespace)


def _check_duplicates(result: ResourceSet) -> None:
    """A second declaration of a tool id or a policy name is an error; the first one stays."""
    seen: dict[str, ToolResource] = {}
    kept: list[ToolResource] = []
    for resource in result.tools:
        first = seen.get(resource.tool.id)
        if first is None:
            seen[resource.tool.id] = resource
            kept.append(resource)
            continue
        result.diagnostics.append(
            resource.where.diagnostic(
                "/metadata/name",
                f"tool {resource.tool.id} is already declared in {first.where.path} "
                f"({first.where.field()})",
            )
        )
    result.tools = kept
    names: dict[str, PolicyResource] = {}
    policies: list[PolicyResource] = []
    for declared in result.policies:
        earlier = names.get(declared.policy.name)
        if earlier is not None:
            result.diagnostics.append(
                declared.where.diagnostic(
                    "/metadata/name",
                    f"policy {declared.policy.name!r} is already declared in "
                    f"{earlier.where.path} ({earlier.where.field()})",
                )
            )
            continue
        names[declared.policy.name] = declared
        policies.append(declared)
    result.policies = policies


# -- the way back: a tool as a resource (toolgate get tools -o yaml) ---------------------------


def _joch_type(tool: Tool) -> str:
    entry = tool.entry
    if isinstance(entry, RestEndpoint):
        return "rest"
    if isinstance(entry, McpEntry):
        return "mcp"
    if isinstance(entry, OsCommandEntry):
        return "os"
    if isinstance(entry, PythonEntry) or str(tool.kind) == "python":
        return "function"
    return str(tool.kind)  # script: toolgate's own kind, not a resource type


def tool_document(tool: Tool, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``tool`` as a ``kind: Tool`` resource (with ``status`` when given). Resources loaded from
    this format come back as they were declared, with every default filled in; other tools are
    described in the same shape (``type: script`` for tool folders, which the resource format has
    no type for).
    """
    spec: dict[str, Any] = {"type": _joch_type(tool), "description": tool.description}
    entry = tool.entry
    timeout = f"{tool.timeout:g}s"
    if isinstance(entry, RestEndpoint):
        endpoint: dict[str, Any] = {"method": entry.method, "url": entry.url}
        if entry.secret_ref is not None:
            endpoint["auth"] = {"type": "bearer", "secretRef": {"name": entry.secret_ref}}
        endpoint["timeout"] = timeout
        spec["endpoint"] = endpoint
    else:
        if isinstance(entry, McpEntry):
            ref = {"name": entry.server}
            if entry.remote_name != tool.name:
                ref["toolName"] = entry.remote_name
            spec["mcpServerRef"] = ref
        elif isinstance(entry, PythonEntry):
            spec["function"] = entry.ref
        elif isinstance(entry, OsCommandEntry):
            spec["command"] = list(entry.command)
        spec["timeout"] = timeout
    spec["inputSchema"] = tool.input_schema_dict()
    output = tool.output_schema_dict()
    if output is not None:
        spec["outputSchema"] = output
    side_effects: dict[str, Any] = {"level": str(tool.side_effect)}
    if tool.idempotency.idempotent is not None:
        side_effects["idempotent"] = tool.idempotency.idempotent
    side_effects["requiresApproval"] = tool.requires_approval
    if tool.idempotency.key_template is not None:
        side_effects["idempotencyKeyTemplate"] = tool.idempotency.key_template
        side_effects["idempotencyWindow"] = f"{tool.idempotency.window:g}s"
    spec["sideEffects"] = side_effects
    safety: dict[str, Any] = {}
    if tool.safety.allowed_agents is not None:
        safety["allowedAgents"] = list(tool.safety.allowed_agents)
    if tool.safety.denied_namespaces:
        safety["deniedNamespaces"] = list(tool.safety.denied_namespaces)
    limit = tool.safety.rate_limit
    if limit is not None:
        rate = {"callsPerMinute": limit.calls_per_minute, "callsPerDay": limit.calls_per_day}
        safety["rateLimit"] = {k: v for k, v in rate.items() if v is not None}
    if safety:
        spec["safety"] = safety
    spec["observability"] = {
        "logArgs": tool.observability.log_args,
        "logResult": tool.observability.log_result,
        "redactFields": list(tool.observability.redact_fields),
    }
    document: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Tool",
        "metadata": {
            "name": tool.name,
            "namespace": tool.namespace,
            "annotations": {
                "toolgate.dev/source": f"{tool.source.format}: {tool.source.location or '-'}"
            },
        },
        "spec": spec,
    }
    if status is not None:
        document["status"] = dict(status)
    return document
