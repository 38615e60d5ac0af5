"""The one normalized tool model every declaration format is loaded into.

A :class:`Tool` is plain, immutable data: what the tool is called, what it accepts and returns,
how risky it is, and the rules the gateway applies to every call. It never holds code; the callable
(or script, endpoint, server) that implements it is bound separately when it is registered.

Field names follow the declaration formats where a format names them; each field's docstring says
which format and field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from .._json import digest, freeze, thaw
from .effects import SideEffect, ToolHints, requires_approval_by_default
from .mcp_metadata import McpToolMetadata

__all__ = [
    "DEFAULT_IDEMPOTENCY_WINDOW",
    "ApprovalSpec",
    "ConfirmationSpec",
    "DisplaySpec",
    "Fact",
    "IdempotencySpec",
    "ImplementationKind",
    "McpEntry",
    "ObservabilitySpec",
    "OsCommandEntry",
    "Permissions",
    "PythonEntry",
    "RateLimit",
    "RestEndpoint",
    "SafetySpec",
    "SandboxMode",
    "SandboxSpec",
    "ScriptEntry",
    "SecurityCheckSpec",
    "SourceFormat",
    "TileArg",
    "TileDisplay",
    "Tool",
    "ToolSource",
    "split_tool_id",
]

#: ``Tool`` resources leave the window configurable; 24 hours is what mature payment APIs use.
DEFAULT_IDEMPOTENCY_WINDOW = 24 * 60 * 60.0

_PART = re.compile(r"^[^\s:][^\s]*$")


def split_tool_id(tool_id: str) -> tuple[str, str]:
    """Split ``namespace:name`` at its **last** colon (plugin ids such as ``@scope/x:y``).

    Raises ``ValueError`` naming the problem when the id is not of that form.
    """
    namespace, sep, name = tool_id.rpartition(":")
    if not sep or not namespace or not name:
        raise ValueError(f"tool id {tool_id!r} must have the form 'namespace:name'")
    if not _PART.match(namespace) or not _PART.match(name) or ":" in name:
        raise ValueError(
            f"tool id {tool_id!r}: namespace and name must be non-empty and contain no white space"
        )
    return namespace, name


class ImplementationKind(StrEnum):
    """What runs when the tool is called (``spec.type`` of ``Tool`` resources, plus the scripts
    of tool folders)."""

    PYTHON = "python"
    SCRIPT = "script"
    REST = "rest"
    MCP = "mcp"
    OS = "os"


class SourceFormat(StrEnum):
    """The declaration format a tool was loaded from."""

    PYTHON = "python"
    TOOL_FOLDER = "tool-folder"
    CAPABILITY = "capability"
    PLUGIN = "plugin"
    EXTENSION_INFO = "extension-info"
    RESOURCE = "resource"


class SandboxMode(StrEnum):
    """The sandbox modes (the plugin format's): ``compartment`` (isolated, capabilities granted)
    or ``host``."""

    COMPARTMENT = "compartment"
    HOST = "host"


@dataclass(frozen=True, slots=True)
class ToolSource:
    """Where a tool was declared, for diagnostics and the catalog."""

    format: SourceFormat
    """The declaration format."""
    location: str | None = None
    """A file path, or ``module:qualname`` for Python functions."""


@dataclass(frozen=True, slots=True)
class PythonEntry:
    """Implementation: a Python callable, named by import path (``type: function`` resources)."""

    ref: str
    """``module:qualname`` of the callable."""
    code_digest: str | None = None
    """A digest of the function's compiled code, so approvals and grants bound to the definition
    hash end when the code changes."""


#: How a script tool's process serves calls (see :attr:`ScriptEntry.protocol`).
ScriptProtocol = Literal["oneshot", "worker"]


@dataclass(frozen=True, slots=True)
class ScriptEntry:
    """Implementation: a script run as a child process (a tool folder's ``script`` and
    ``runtime``)."""

    path: str
    """Absolute path of the script."""
    runtime: str
    """One of the tool folder runtimes: bun, node, python, bash, go, binary, powershell."""
    digest: str | None = None
    """SHA-256 of the script's (and security script's) contents when loaded, so the definition
    hash — and every approval and grant bound to it — changes when the code does."""
    # How the script is run, not what it does (``digest`` covers the code): kept out of the repr,
    # which the definition hash is taken over, so approvals and grants made before these fields
    # existed still apply.
    prestart: bool = field(default=False, repr=False)
    """Keep processes of it started ahead of calls, each used for one call (toolgate's
    extension, ``prestart: true``)."""
    protocol: ScriptProtocol = field(default="oneshot", repr=False)
    """``oneshot``: one process per call, its input on stdin (the tool folder format);
    ``worker``: a long-lived process answering one JSON line per call (toolgate's extension,
    ``protocol: worker``)."""


@dataclass(frozen=True, slots=True)
class RestEndpoint:
    """Implementation: an HTTP endpoint (``type: rest`` resources, ``spec.endpoint``)."""

    method: str
    """HTTP method, upper case."""
    url: str
    """URL template; ``{arg}`` placeholders are filled from the arguments."""
    auth_type: str | None = None
    """``bearer`` or ``None``."""
    secret_ref: str | None = None
    """Name of the secret holding the token (``auth.secretRef.name``)."""


@dataclass(frozen=True, slots=True)
class McpEntry:
    """Implementation: a tool on a remote MCP server (``type: mcp`` resources, ``mcpServerRef``)."""

    server: str
    """Name of the ``MCPServer`` resource."""
    remote_name: str
    """The tool's name on that server."""
    # Display only (the gateway decides nothing from it), so kept out of the repr the definition
    # hash is taken over: approvals and grants made before it existed still apply, and a change
    # of the server's listing is the pinning review's to catch.
    metadata: McpToolMetadata | None = field(default=None, repr=False, compare=False)
    """What the server's ``tools/list`` declared beyond name, description and schemas, passed
    on unchanged to MCP clients (``None`` for a ``Tool`` resource never matched to a listing)."""


@dataclass(frozen=True, slots=True)
class OsCommandEntry:
    """Implementation: a sandboxed command (``type: os`` resources)."""

    command: tuple[str, ...]
    """The argv to execute."""


Entry = PythonEntry | ScriptEntry | RestEndpoint | McpEntry | OsCommandEntry


@dataclass(frozen=True, slots=True)
class Fact:
    """One label/value line of a confirmation (``facts``)."""

    label: str
    value: str
    """A literal, or for manifests a template such as ``{{ args.repository }}``."""


@dataclass(frozen=True, slots=True)
class ConfirmationSpec:
    """What a person sees before approving (``buildConfirmation``), as static templates.

    Python tools may instead compute it with a ``build_confirmation(args)`` function bound with
    the implementation.
    """

    title: str | None = None
    risk: str | None = None
    """Risk label; derived from the side-effect level when not set."""
    facts: tuple[Fact, ...] = ()


@dataclass(frozen=True, slots=True)
class ApprovalSpec:
    """Whether calls need a person's approval (``approval`` of capability manifests,
    ``requireApproval`` of tool folders and plugins, ``sideEffects.requiresApproval`` of ``Tool``
    resources)."""

    required: bool | None = None
    """``None``: decided by the side-effect level's default."""
    confirmation: ConfirmationSpec | None = None


@dataclass(frozen=True, slots=True)
class SecurityCheckSpec:
    """A check that runs before the tool and may allow, block or ask (a tool folder's security
    script)."""

    script: str | None = None
    """Absolute path of the security script; ``None`` when a Python check function is bound."""
    timeout: float = 10.0
    """Seconds (``securityTimeout`` of tool folders, default 10000 ms)."""


@dataclass(frozen=True, slots=True)
class Permissions:
    """Capabilities granted in ``compartment`` mode (``permissions``)."""

    time: bool = False
    network: tuple[str, ...] = ()
    """Host names the tool may reach."""
    env: tuple[str, ...] = ()
    """Environment variable keys the tool may read."""
    fs: tuple[str, ...] = ()
    """Path prefixes the tool may read."""
    random: bool = False


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """How the tool is isolated (``sandbox`` + ``permissions``)."""

    mode: SandboxMode = SandboxMode.HOST
    permissions: Permissions = field(default_factory=Permissions)


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Hard caps enforced at the gateway (``safety.rateLimit`` of ``Tool`` resources)."""

    calls_per_minute: int | None = None
    calls_per_day: int | None = None


@dataclass(frozen=True, slots=True)
class SafetySpec:
    """Who may call the tool and how often (``spec.safety`` of ``Tool`` resources)."""

    allowed_agents: tuple[str, ...] | None = None
    """Only these agents may call; ``None`` means any agent."""
    denied_namespaces: tuple[str, ...] = ()
    """No agent in these namespaces may call."""
    rate_limit: RateLimit | None = None


@dataclass(frozen=True, slots=True)
class IdempotencySpec:
    """De-duplication of repeated calls (``sideEffects.idempotent`` and key template of ``Tool``
    resources)."""

    idempotent: bool | None = None
    """The tool declares that repeating a call is harmless."""
    key_template: str | None = None
    """Template over ``args``, ``agent``, ``session``, ``tool`` that yields the key."""
    window: float = DEFAULT_IDEMPOTENCY_WINDOW
    """Seconds during which a repeated key replays the stored outcome."""


@dataclass(frozen=True, slots=True)
class ObservabilitySpec:
    """What the audit log keeps (``spec.observability`` of ``Tool`` resources)."""

    log_args: bool = True
    log_result: bool = True
    redact_fields: tuple[str, ...] = ()
    """Paths such as ``args.body`` or ``result.items.*.token`` whose values are masked."""


@dataclass(frozen=True, slots=True)
class TileArg:
    """How one argument appears in a tile's display line (Extension Info ``ui.args``)."""

    name: str
    prefix: str | None = None
    suffix: str | None = None


@dataclass(frozen=True, slots=True)
class TileDisplay:
    """The one-line display of a call (Extension Info ``ui``); argument order is significant."""

    prefix: str | None = None
    args: tuple[TileArg, ...] = ()
    suffix: str | None = None


@dataclass(frozen=True, slots=True)
class DisplaySpec:
    """How people see the tool: tile display and prompt examples (as in extension info)."""

    ui: TileDisplay | None = None
    examples: tuple[str, ...] = ()
    """Prompts that should select this tool."""
    dangerous: bool = False
    """``dangerous`` (tool folders): shown with a warning sign in listings."""


@dataclass(frozen=True, slots=True)
class Tool:
    """A normalized tool declaration. Immutable; holds no code and does no I/O.

    Build one directly, or let a loader (``@tool``, a tool folder, a manifest) build it.
    Schemas passed in are deep-copied and frozen; use :meth:`input_schema_dict` for a plain copy.
    """

    id: str
    """Namespaced id ``namespace:name`` (split at the last colon)."""
    description: str
    """The text the model reads to decide when and how to call the tool."""
    input_schema: Mapping[str, Any]
    """JSON Schema of the arguments (an ``object`` schema)."""
    kind: ImplementationKind = ImplementationKind.PYTHON
    entry: Entry | None = None
    """Descriptive pointer to the implementation (import path, script, endpoint, server)."""
    title: str | None = None
    output_schema: Mapping[str, Any] | None = None
    """JSON Schema the result must match, when declared."""
    timeout: float = 60.0
    """Seconds before the call is cancelled (per-format defaults: functions 60 s, scripts 30 s)."""
    side_effect: SideEffect = SideEffect.LOCAL_WRITE
    hints: ToolHints = field(default_factory=ToolHints)
    approval: ApprovalSpec = field(default_factory=ApprovalSpec)
    security_check: SecurityCheckSpec | None = None
    sandbox: SandboxSpec = field(default_factory=SandboxSpec)
    env: tuple[str, ...] = ()
    """Environment variables passed to the implementation (``env``); nothing else is."""
    secrets: tuple[str, ...] = ()
    """Secrets the tool needs (``requiredPreferenceNames`` of capability manifests); unavailable
    without them."""
    config: tuple[str, ...] = ()
    """Public settings the tool reads (``publicPreferenceNames`` of capability manifests)."""
    capability: str | None = None
    """The capability/connection this tool belongs to (a capability manifest's
    ``aiCapability.id``)."""
    safety: SafetySpec = field(default_factory=SafetySpec)
    idempotency: IdempotencySpec = field(default_factory=IdempotencySpec)
    observability: ObservabilitySpec = field(default_factory=ObservabilitySpec)
    display: DisplaySpec = field(default_factory=DisplaySpec)
    source: ToolSource = field(default_factory=lambda: ToolSource(SourceFormat.PYTHON))
    _definition_hash: str | None = field(default=None, init=False, repr=False, compare=False)
    # Computed on first use (a SHA-256 over the canonical JSON: ~35 µs), then kept: a Tool is
    # immutable, and pre-started processes, workers and approvals all key on it.

    def __post_init__(self) -> None:
        split_tool_id(self.id)
        if not isinstance(self.input_schema, Mapping):
            raise ValueError(f"{self.id}: input_schema must be a JSON object schema")
        if self.input_schema.get("type", "object") != "object":
            raise ValueError(f"{self.id}: input_schema must have type 'object'")
        if self.timeout <= 0:
            raise ValueError(f"{self.id}: timeout must be positive, not {self.timeout}")
        object.__setattr__(self, "input_schema", freeze(self.input_schema))
        if self.output_schema is not None:
            object.__setattr__(self, "output_schema", freeze(self.output_schema))
        object.__setattr__(self, "side_effect", SideEffect(self.side_effect))
        object.__setattr__(self, "kind", ImplementationKind(self.kind))

    @property
    def namespace(self) -> str:
        """The part of the id before the last colon."""
        return split_tool_id(self.id)[0]

    @property
    def name(self) -> str:
        """The part of the id after the last colon."""
        return split_tool_id(self.id)[1]

    @property
    def display_title(self) -> str:
        """``title`` when set, otherwise the name."""
        return self.title or self.name

    @property
    def requires_approval(self) -> bool:
        """The tool's own answer: its declaration, else its side-effect level's default."""
        if self.approval.required is not None:
            return self.approval.required
        return requires_approval_by_default(self.side_effect)

    @property
    def resolved_hints(self) -> ToolHints:
        """Hints with every undeclared value derived from the side-effect level."""
        return self.hints.resolved(self.side_effect)

    def input_schema_dict(self) -> dict[str, Any]:
        """A plain, mutable copy of the input schema."""
        schema: dict[str, Any] = thaw(self.input_schema)
        return schema

    def output_schema_dict(self) -> dict[str, Any] | None:
        """A plain, mutable copy of the output schema, or ``None``."""
        if self.output_schema is None:
            return None
        schema: dict[str, Any] = thaw(self.output_schema)
        return schema

    @property
    def definition_hash(self) -> str:
        """SHA-256 over everything a person or model is shown and every rule that applies.

        Approvals and grants are bound to it: when the definition changes, they no longer apply.
        """
        if self._definition_hash is None:
            object.__setattr__(self, "_definition_hash", digest(_definition_fields(self)))
        assert self._definition_hash is not None
        return self._definition_hash


#: Fields left out of the definition hash: ``source`` on purpose (moving a file does not change
#: what the tool does), and the hash's own cache.
_NOT_DEFINITION = frozenset({"source", "_definition_hash"})


def _definition_fields(tool: Tool) -> dict[str, Any]:
    return {
        name: getattr(tool, name)
        for name in Tool.__dataclass_fields__
        if name not in _NOT_DEFINITION
    }
