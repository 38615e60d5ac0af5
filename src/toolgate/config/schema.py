"""The sections of ``toolgate.yaml``: pydantic models, one per section, and the whole file."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BeforeValidator,
    Field,
    GetJsonSchemaHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ..backends.mcp_limits import DEFAULT_MAX_MESSAGE
from ..backends.prestart import PrestartSettings
from ..backends.processes import DEFAULT_MAX_OUTPUT
from ..model import SideEffect, split_tool_id
from ..pipeline.approval import (
    DEFAULT_APPROVAL_TTL,
    DEFAULT_MAX_PENDING_PER_AGENT,
    DEFAULT_MAX_PENDING_PER_TOOL,
)
from ..pipeline.approval_policy import ApprovalRule
from ..pipeline.concurrency import (
    DEFAULT_RUNNING,
    DEFAULT_WAITING,
    ConcurrencyLimit,
    ConcurrencySettings,
)
from ..pipeline.idempotency import LEASE_GRACE
from ..pipeline.overflow import DEFAULT_OVERFLOW_LIMIT, DEFAULT_PREVIEW_CHARS
from ..sandbox.addresses import parse_cidr_grants
from ..sandbox.settings import SandboxConfig
from .auth_schema import AuthConfig
from .section import Section as _Section
from .section import valid_namespace
from .state_urls import check_redis_url, check_state_url

__all__ = [
    "AgentConfig",
    "ApprovalConfig",
    "ApprovalRuleEntry",
    "AuditConfig",
    "AuthConfig",
    "ConcurrencyConfig",
    "GatewayConfig",
    "IdempotencyConfig",
    "McpConfig",
    "OverflowConfig",
    "PrestartSection",
    "ProcessesConfig",
    "PythonSource",
    "RateLimitsConfig",
    "SandboxSection",
    "ScriptsConfig",
    "SearchConfig",
    "ServeConfig",
    "SourceEntry",
    "ToolFolderEntry",
    "WorkersSection",
]

#: The declaration formats ``sources:`` entries may name (``auto``: detect from the content).
SOURCE_FORMATS = ("auto", "capability", "plugin", "extension-info", "resource")


class _ShortFormSection(_Section):
    """An entry that may also be written as one string: the value of its :attr:`_short_key`."""

    _short_key: ClassVar[str]

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return {cls._short_key: value} if isinstance(value, str) else value

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Tell editors about the short form too, which the before-validator accepts.
        full = handler(core_schema)
        short = {
            "type": "string",
            "minLength": 1,
            "description": f"Short for {{{cls._short_key}: …}}.",
        }
        return {"anyOf": [short, full]}


class PythonSource(_ShortFormSection):
    """One entry of ``python:``: a module, a ``module:attr`` or a ``.py`` file."""

    module: str = Field(min_length=1)
    """``pkg.mod``, ``pkg.mod:attr``, ``path/to/file.py`` or ``path/to/file.py:attr``."""
    namespace: str | None = Field(default=None, min_length=1)
    """Re-home every tool of this entry in this namespace."""

    _short_key = "module"


class OverflowConfig(_Section):
    """``overflow:``: when content is saved to a file instead of sent whole."""

    limit: int = Field(default=DEFAULT_OVERFLOW_LIMIT, ge=1)
    """Characters of model-facing content above which it is spilled to a file."""
    preview: int = Field(default=DEFAULT_PREVIEW_CHARS, ge=0)
    """Characters of spilled content the model still sees."""
    dir: str | None = None
    """Where spilled content is written (relative to the config file's folder)."""

    @model_validator(mode="after")
    def _preview_fits(self) -> OverflowConfig:
        if self.preview > self.limit:
            raise ValueError(f"preview ({self.preview}) must not exceed limit ({self.limit})")
        return self


class ToolFolderEntry(_ShortFormSection):
    """One entry of ``tool_folders:``: a folder whose sub-folders are tool folders."""

    path: str = Field(min_length=1)
    """The folder (``~`` expanded; relative to the config file's folder)."""
    namespace: str = Field(default="local", min_length=1)
    """The namespace of its tools (ids ``namespace:name``)."""

    _short_key = "path"

    @field_validator("namespace")
    @classmethod
    def _valid_folder_namespace(cls, value: str) -> str:
        return valid_namespace(value)


class SourceEntry(_ShortFormSection):
    """One entry of ``sources:``: declarations in one of the formats (capability manifests,
    plugins, extension info, Kubernetes-style resources)."""

    path: str | None = Field(default=None, min_length=1)
    """A file or folder (``~`` expanded; relative to the config file's folder)."""
    package: str | None = Field(default=None, min_length=1)
    """A Python package whose folder holds the declarations (``mypkg`` or ``mypkg/sub``)."""
    format: str = "auto"
    """``capability``, ``plugin``, ``extension-info``, ``resource``, or ``auto`` (detected)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Settings of the format (see its README section), e.g. a plugin's ``host_mode``."""

    _short_key = "path"

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in SOURCE_FORMATS:
            raise ValueError(f"must be one of {', '.join(SOURCE_FORMATS)}")
        return value

    @model_validator(mode="after")
    def _one_location(self) -> SourceEntry:
        if (self.path is None) == (self.package is None):
            raise ValueError("give exactly one of path, package")
        return self


class ScriptsConfig(_Section):
    """``scripts:``: how script tools (tool folders) run."""

    env_from_process: tuple[str, ...] | bool = ()
    """Declared ``env`` names that may also come from the gateway's environment (``True``: any);
    by default a script's variables come only from ``$TOOLGATE_HOME/.env``."""
    max_output: int = Field(default=DEFAULT_MAX_OUTPUT, ge=1)
    """Bytes of stdout (and of stderr) a script may write before it is stopped."""
    concurrency: int | None = Field(default=None, ge=1)
    """Processes of one script tool that may run at once (the older form of
    ``concurrency.default.running`` for script tools; unset: that value). An entry of
    ``concurrency.tools`` naming the tool or its namespace wins over it."""

    @field_validator("env_from_process", mode="before")
    @classmethod
    def _names_or_true(cls, value: Any) -> Any:
        # One clear message instead of pydantic's per-member union errors.
        if isinstance(value, bool):
            return value
        if isinstance(value, (list, tuple)) and all(
            isinstance(item, str) and item for item in value
        ):
            return tuple(value)
        raise ValueError("must be a list of variable names, or true for any declared variable")


class PrestartSection(_Section):
    """`processes.prestart:`: script tools whose processes are started ahead of their calls."""

    enabled: bool = True
    """`false`: no tool is pre-started, not even one that declares `prestart: true`."""
    tools: tuple[str, ...] = ()
    """More tools to pre-start besides those that declare it: tool ids, `namespace:*`, or `*`
    (every script tool; compartment ones get warm sandboxes where bubblewrap runs). A script
    that works before reading its input then does that work early, once per process."""
    per_tool: int = Field(default=2, ge=1, le=64)
    """Processes kept ready per tool (and working directory and environment)."""
    total: int = Field(default=16, ge=1, le=1024)
    """Processes kept ready in all."""
    idle_timeout: float = Field(default=60, gt=0)
    """Seconds a ready process waits for a call before it is stopped."""
    fast_exit: bool = True
    """python3 and node tools end without their interpreter's teardown (a shim reports the exit
    code once it is final); `false`: they end as fresh processes do."""

    @field_validator("tools")
    @classmethod
    def _tool_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            if pattern != "*" and not pattern.endswith(":*"):
                split_tool_id(pattern)  # raises ValueError naming it: namespace:name
        return value

    def settings(self) -> PrestartSettings:
        """The backend's settings."""
        return PrestartSettings(
            enabled=self.enabled,
            tools=frozenset(self.tools),
            per_tool=self.per_tool,
            total=self.total,
            idle_timeout=self.idle_timeout,
            fast_exit=self.fast_exit,
        )


class WorkersSection(_Section):
    """`processes.workers:`: the long-lived processes of `protocol: worker` tools."""

    idle_timeout: float = Field(default=300, gt=0)
    """Seconds an idle worker waits for its next call before it is stopped."""


class McpConfig(_Section):
    """``mcp:``: the gateway's connections to upstream MCP servers (``kind: MCPServer``)."""

    max_message_bytes: int = Field(default=DEFAULT_MAX_MESSAGE, ge=1024, le=1 << 30)
    """Bytes of one message from a server (a stdio line, an HTTP body or SSE event) when its
    ``spec.maxMessageBytes`` is unset; past it the call fails and toolgate stops reading."""


class ProcessesConfig(_Section):
    """`processes:`: how script tools' processes serve calls (`toolgate serve` and `toolgate
    mcp`; a one-call command starts none ahead)."""

    prestart: PrestartSection = Field(default_factory=PrestartSection)
    workers: WorkersSection = Field(default_factory=WorkersSection)


class ApprovalRuleEntry(_Section):
    """One entry of ``approval.rules:``: which tools it selects and whether they need approval."""

    tool: str | None = Field(default=None, min_length=1)
    """A tool id (``namespace:name``)."""
    namespace: str | None = Field(default=None, min_length=1)
    """Every tool of a namespace."""
    level: SideEffect | None = None
    """Every tool of a side-effect level (``read_only`` … ``privileged``)."""
    require: bool
    """Whether the selected tools need a person's approval."""
    override: bool = False
    """Let ``require: false`` waive a requirement the tool declares itself."""

    @field_validator("tool")
    @classmethod
    def _valid_tool_id(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                split_tool_id(value)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("namespace")
    @classmethod
    def _valid_rule_namespace(cls, value: str | None) -> str | None:
        return None if value is None else valid_namespace(value)

    @model_validator(mode="after")
    def _one_selector(self) -> ApprovalRuleEntry:
        chosen = [name for name in ("tool", "namespace", "level") if getattr(self, name)]
        if len(chosen) != 1:
            given = f" (got {', '.join(chosen)})" if chosen else ""
            raise ValueError(f"give exactly one of tool, namespace, level{given}")
        return self

    def to_rule(self) -> ApprovalRule:
        """The :class:`~toolgate.pipeline.approval_policy.ApprovalRule` this entry declares."""
        return ApprovalRule(
            require=self.require,
            tool=self.tool,
            namespace=self.namespace,
            level=self.level,
            override=self.override,
        )


class ApprovalConfig(_Section):
    """``approval:``: how long requests wait, and the operator's approval rules."""

    expires_after: float = Field(default=DEFAULT_APPROVAL_TTL, gt=0)
    """Seconds a request waits for a decision before it expires."""
    rules: list[ApprovalRuleEntry] = Field(default_factory=list)
    """Per tool, namespace or level; see :mod:`toolgate.pipeline.approval_policy`."""
    max_pending_per_tool: int | None = Field(default=DEFAULT_MAX_PENDING_PER_TOOL, ge=1)
    """Requests of one agent for one tool that may wait for a person at once (``null``: no
    limit); past it a new call is ``rate_limited`` and no request is created."""
    max_pending_per_agent: int | None = Field(default=DEFAULT_MAX_PENDING_PER_AGENT, ge=1)
    """Requests of one agent, all tools together, that may wait at once (``null``: no limit)."""

    @field_validator("expires_after", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("must be a number of seconds")
        return value

    def approval_rules(self) -> list[ApprovalRule]:
        """The rules, in file order."""
        return [entry.to_rule() for entry in self.rules]


class AuditConfig(_Section):
    """``audit:``: the audit log (one redacted record per call) in ``$TOOLGATE_HOME/audit.db``."""

    enabled: bool = True
    """Record every call (the default)."""
    jsonl: str | None = Field(default=None, min_length=1)
    """Also append every record to this JSON-lines file (relative to the config file's folder)."""
    retention_days: float | None = Field(default=30, gt=0)
    """Days records are kept (``null``: forever)."""
    max_payload_bytes: int | None = Field(default=8 * 1024, ge=256)
    """Bytes of JSON of one payload (arguments, result, visualization, detail) a record keeps;
    a larger one is replaced by a marker with its size and a preview (``null``: keep all)."""
    keep_full_payloads: bool = False
    """Also write each oversized payload, redacted, to a file in the overflow folder's
    ``audit/`` folder, named by the record's marker (``full``)."""

    @field_validator("retention_days", mode="before")
    @classmethod
    def _days(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError("must be a number of days, or null to keep records forever")
        return value


#: The label that makes an agent an operator of ``toolgate serve`` (deciding approvals,
#: revoking grants, reading the audit log, connecting capabilities over the HTTP API).
OPERATOR_ROLE = ("role", "operator")

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


class AgentConfig(_Section):
    """One entry of ``agents:``: the labels policies select the agent by, and optionally the
    SHA-256 of its API key (``toolgate agents add NAME`` keeps keys in ``$TOOLGATE_HOME``
    instead, so this file keeps its comments)."""

    labels: dict[str, str] = Field(default_factory=dict)
    """Labels for policies; ``role: operator`` lets the agent decide approvals over HTTP."""
    key_sha256: str | None = None
    """The hex SHA-256 of the agent's API key (``Authorization: Bearer <key>``); never the
    key itself."""

    @field_validator("key_sha256", mode="before")
    @classmethod
    def _hex_digest(cls, value: Any) -> Any:
        if value is None:
            return None
        text = value.strip().lower() if isinstance(value, str) else value
        if isinstance(text, str) and text.startswith("sha256:"):
            text = text.removeprefix("sha256:")
        if not isinstance(text, str) or not _SHA256_HEX.match(text):
            raise ValueError(
                "must be the 64 hex digits of the key's SHA-256 (toolgate agents add NAME "
                "creates a key and stores its hash for you)"
            )
        return text

    @property
    def operator(self) -> bool:
        """Whether the agent has the ``role: operator`` label."""
        key, value = OPERATOR_ROLE
        return self.labels.get(key) == value


#: The port ``toolgate serve`` listens on by default.
DEFAULT_SERVE_PORT = 8470
#: The largest request body the HTTP API reads (1 MiB).
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
#: Tools per MCP ``tools/list`` page: catalogs up to this size are answered in one page.
DEFAULT_MCP_PAGE_SIZE = 1000
#: Seconds an HTTP API request may take (calling a tool, or approving a call, gets the tool's
#: timeout plus a margin when that is longer).
DEFAULT_REQUEST_TIMEOUT = 30.0


class ServeConfig(_Section):
    """``serve:``: where ``toolgate serve`` listens and the HTTP API's limits (the command's
    ``--host`` / ``--port`` options win over these)."""

    host: str = Field(default="127.0.0.1", min_length=1)
    """The address to listen on. Anything but loopback needs agent keys."""
    port: int = Field(default=DEFAULT_SERVE_PORT, ge=0, le=65535)
    """The TCP port (``0``: any free port, printed at start)."""
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024, le=256 * 1024 * 1024)
    """Larger request bodies are refused with ``413``."""
    request_timeout: float = Field(default=DEFAULT_REQUEST_TIMEOUT, gt=0, le=3600)
    """Seconds a request may take before it is answered with ``504``."""
    mcp_sessions: Literal["auto", "stateful", "stateless"] = "auto"
    """Sessions of handshake-era MCP clients: ``stateful`` (they get the approval form by
    elicitation and ``tools/list_changed``), ``stateless`` (any replica may answer any request),
    or ``auto``: stateless with shared state (``state:``), else stateful. Behind a load balancer
    that keeps each ``Mcp-Session-Id`` on one replica, ``stateful`` gives those clients both."""
    mcp_page_size: int = Field(default=DEFAULT_MCP_PAGE_SIZE, ge=1, le=100_000)
    """Tools per MCP ``tools/list`` page (``toolgate serve`` and ``toolgate mcp``): a larger
    catalog is answered in pages, each but the last with a ``nextCursor`` the client follows."""
    loop_blocked_after: float = Field(default=1.0, ge=0, le=600)
    """Seconds the event loop may go without answering (an async tool computing without
    awaiting holds every request) before a warning names the tool call running on it and
    ``/metrics`` counts it; ``0`` turns the watchdog off."""


class SearchConfig(_Section):
    """``search:``: tool search, the ``search_tools`` tool and progressive disclosure."""

    semantic: bool | None = None
    """Rank by embeddings too, fused with the lexical ranking (needs ``toolgate[search]``);
    unset: when the extra is installed."""
    tool: bool = False
    """Offer agents the ``toolgate:search_tools`` tool."""
    progressive: bool = False
    """Progressive disclosure: MCP ``tools/list`` shows only the ``core`` tools and
    ``search_tools``; the tools a session finds by searching are added to its list (and
    ``list_changed`` is sent). Implies ``tool``."""
    core: list[str] = Field(default_factory=list)
    """Tool ids or patterns (``fs:*``) always listed under progressive disclosure."""


class ConcurrencyDefault(_Section):
    """``concurrency.default:``: the limits of every tool no entry of ``concurrency.tools``
    names."""

    running: int = Field(default=DEFAULT_RUNNING, ge=1)
    """Calls of one tool that may run at once."""
    waiting: int = Field(default=DEFAULT_WAITING, ge=0)
    """Calls of one tool that may wait for a free slot (``0``: none; a call past ``running``
    ends ``busy``)."""


class ConcurrencyOverride(_Section):
    """One entry of ``concurrency.tools:``; an omitted value is the default's."""

    running: int | None = Field(default=None, ge=1)
    """Calls of the tool that may run at once."""
    waiting: int | None = Field(default=None, ge=0)
    """Calls of the tool that may wait for a free slot."""


class ConcurrencyConfig(_Section):
    """``concurrency:``: how many calls of one tool run at once, and how many wait for a slot.

    A call past both ends ``busy`` at once; a call that waits longer than the tool's timeout
    ends ``busy``. Each tool has its own slots, so a flooded tool never delays another.

    .. code-block:: yaml

        concurrency:
          default: {running: 16, waiting: 64}
          tools:
            reports:render: {running: 2, waiting: 10}   # one tool
            crawler:*: {running: 4}                      # every tool of a namespace
    """

    default: ConcurrencyDefault = Field(default_factory=ConcurrencyDefault)
    tools: dict[str, ConcurrencyOverride] = Field(default_factory=dict)
    """Limits by tool id (``namespace:name``) or namespace (``namespace:*``); a tool's own
    entry wins over its namespace's, both over ``default``."""

    @field_validator("tools")
    @classmethod
    def _tool_patterns(cls, value: dict[str, ConcurrencyOverride]) -> dict[str, Any]:
        for pattern in value:
            if pattern.endswith(":*"):
                valid_namespace(pattern[:-2])
            else:
                split_tool_id(pattern)  # raises ValueError naming it: namespace:name
        return value

    def settings(self, scripts_running: int | None = None) -> ConcurrencySettings:
        """The gateway's settings (``scripts_running``: ``scripts.concurrency``)."""
        return ConcurrencySettings(
            default=ConcurrencyLimit(self.default.running, self.default.waiting),
            tools={
                pattern: ConcurrencyLimit(limit.running, limit.waiting)
                for pattern, limit in self.tools.items()
            },
            scripts_running=scripts_running,
        )


class IdempotencyConfig(_Section):
    """``idempotency:``: how long a call holds its idempotency key before it counts as cut off."""

    lease_grace: float = Field(default=LEASE_GRACE, ge=0)
    """Seconds beyond a tool's timeout that a running call holds its key (default 30). A retry
    after that finds the call cut off: ``outcome_unknown`` (the tool is run again only when it
    is declared ``idempotent``)."""


class RateLimitsConfig(_Section):
    """``rate_limits:``: how the tools' ``callsPerMinute`` / ``callsPerDay`` are counted."""

    per_agent: bool = False
    """Count each agent's calls separately (default: all agents' calls of a tool together)."""


def _policy_entry(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("a policy file path must not be empty")
        return value
    if isinstance(value, dict):
        return value
    raise ValueError(
        "must be a Policy resource (a mapping) or the path of a YAML file of Policy documents"
    )


#: What ``policies:`` entries look like to an editor (the validator above checks them).
_POLICY_ENTRY = {
    "anyOf": [
        {"type": "string", "minLength": 1, "description": "A YAML file of Policy documents."},
        {"type": "object", "description": "A Kubernetes-style Policy resource."},
    ]
}


#: A DNS host name (labels of letters, digits and hyphens, dots between; a trailing dot allowed).
_HOST_NAME = re.compile(
    r"(?=.{1,253}\.?$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
    r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?"
)


class SandboxSection(SandboxConfig):
    """``sandbox:``: the process sandbox (see :class:`~toolgate.sandbox.settings.SandboxConfig`)
    plus the operator's network grants.

    .. code-block:: yaml

        sandbox:
          network_grants:                  # per tool id: private networks it may reach
            inventory:lookup: [10.20.0.0/16]
            test:api: [127.0.0.1/32]
            MCPServer:everything: [127.0.0.1/32]   # an MCPServer's connections, by its name

    ``hosts`` pins names to addresses (``api.example.com: [10.20.0.7]``) for every tool.

    Without a grant a tool reaches public addresses only (REST tools in-process, sandboxed tools
    through the egress proxy); so does the MCP client connecting to an ``MCPServer`` URL, whose
    grant is keyed ``MCPServer:<metadata.name>`` (its connection serves all its tools). A grant
    never opens metadata addresses (169.254.169.254, fd00:ec2::254): such a range is refused here.
    """

    network_grants: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Private (loopback, RFC 1918, ULA, link-local…) networks each tool id (or
    ``MCPServer:<name>``) may reach."""
    hosts: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Host names answered with these addresses instead of DNS, for every tool's network
    access (the egress proxy and REST tools), like ``/etc/hosts``: an internal mirror, a
    split-horizon name, a stand-in server in tests. A pinned address is checked like a resolved
    one: a private address still needs a network grant; metadata addresses never open."""

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for name, addresses in value.items():
            if not _HOST_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a host name")
            if not addresses:
                raise ValueError(f"{name}: give at least one address")
            for address in addresses:
                try:
                    ipaddress.ip_address(address)
                except ValueError:
                    raise ValueError(f"{name}: {address!r} is not an IP address") from None
        return value

    @field_validator("network_grants")
    @classmethod
    def _grants(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for tool_id, grants in value.items():
            split_tool_id(tool_id)  # raises ValueError naming the id: namespace:name
            try:
                parse_cidr_grants(grants)
            except ValueError as exc:
                raise ValueError(f"{tool_id}: {exc}") from None
        return value


class GatewayConfig(_Section):
    """The whole ``toolgate.yaml``."""

    python: list[PythonSource] = Field(default_factory=list)
    """Python modules, attributes and files that hold tools."""
    tool_folders: list[ToolFolderEntry] = Field(default_factory=list)
    """Folders of tool folders (besides ``$TOOLGATE_HOME/tools``, which is always used)."""
    sources: list[SourceEntry] = Field(default_factory=list)
    """Declarations in the other formats: capabilities, plugins, extension info, resources."""
    scripts: ScriptsConfig = Field(default_factory=ScriptsConfig)
    processes: ProcessesConfig = Field(default_factory=ProcessesConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    """Connections to upstream MCP servers."""
    demo: bool = False
    """Include the bundled demo tools."""
    overflow: OverflowConfig = Field(default_factory=OverflowConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    policies: list[
        Annotated[Any, BeforeValidator(_policy_entry), WithJsonSchema(_POLICY_ENTRY)]
    ] = Field(default_factory=list)
    """Inline Kubernetes-style ``Policy`` resources (mappings) and paths of YAML files holding
    them."""
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agents by name, with their labels (for policies selecting agents by label) and
    optionally their API key's hash."""
    rate_limits: RateLimitsConfig = Field(default_factory=RateLimitsConfig)
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    """Calls of one tool that may run at once and wait for a slot, by default and per tool or
    namespace."""
    idempotency: IdempotencyConfig = Field(default_factory=IdempotencyConfig)
    search: SearchConfig = Field(default_factory=SearchConfig)
    """Tool search: semantic ranking, the search tool, progressive disclosure over MCP."""
    serve: ServeConfig = Field(default_factory=ServeConfig)
    """Where ``toolgate serve`` listens, and the HTTP API's limits."""
    auth: AuthConfig | None = None
    """OAuth 2.1 access tokens from an identity provider, accepted beside the API keys
    (``null``, the default: API keys only)."""
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    """The process sandbox (bubblewrap) of compartment-mode tools, which tools use it, and the
    operator's network grants."""
    state: str | None = None
    """The shared state of several replicas: a ``postgresql://`` URL (libpq's form) for
    approvals, grants, idempotency records and agent keys (``TOOLGATE_DATABASE_URL`` wins over
    it). ``null``, the default: the embedded SQLite file ``$TOOLGATE_HOME/toolgate.db``."""
    redis: str | None = None
    """A ``redis://`` (or ``rediss://``, ``unix://``) URL for rate-limit counters shared by the
    replicas (``TOOLGATE_REDIS_URL`` wins over it). ``null``: they live with the rest of the
    state."""

    @field_validator("state")
    @classmethod
    def _state_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_state_url(value)
        return value

    @field_validator("redis")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_redis_url(value)
        return value

    def agent_labels(self) -> dict[str, dict[str, str]]:
        """The labels of every declared agent, by name."""
        return {name: dict(agent.labels) for name, agent in self.agents.items()}
