"""What a :class:`~toolgate.Gateway` is built from: plain frozen data, grouped by what it sets.

``toolgate.yaml`` becomes a :class:`GatewaySettings` (:func:`toolgate.config.build.build_gateway`),
and the Python API takes one; every group has working defaults, so a program names only the
groups it changes::

    from toolgate import AuditSettings, Gateway, GatewaySettings, StateSettings

    settings = GatewaySettings(
        audit=AuditSettings(path="audit.db"),
        state=StateSettings(path="state.db"),
    )
    gateway = Gateway(settings, approver="queue")

The runtime collaborators (the approver, the sandbox, the secret store, telemetry, a shared
database...) are objects with a life of their own, not data: they are the Gateway's own
keywords, not settings.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .backends.mcp_limits import DEFAULT_MAX_MESSAGE
from .backends.prestart import PrestartSettings
from .backends.processes import DEFAULT_MAX_OUTPUT
from .backends.workers import WorkerSettings
from .formats.tool_folder.source import DEFAULT_RESCAN_INTERVAL, FolderRoot
from .model.policy import AccessPolicy
from .pipeline.approval import ApprovalSettings
from .pipeline.concurrency import ConcurrencySettings
from .pipeline.idempotency import LEASE_GRACE
from .pipeline.overflow import DEFAULT_OVERFLOW_LIMIT, DEFAULT_PREVIEW_CHARS

__all__ = [
    "AccessSettings",
    "ApprovalSettings",
    "AuditSettings",
    "EnvironmentSettings",
    "GatewaySettings",
    "ResultSettings",
    "ScriptSettings",
    "SourceSettings",
    "StateSettings",
]


@dataclass(frozen=True, slots=True)
class ResultSettings:
    """How large results reach the model (``overflow:`` in toolgate.yaml)."""

    overflow_limit: int = DEFAULT_OVERFLOW_LIMIT
    """Characters of model-facing content above which it is spilled to a file."""
    preview_chars: int = DEFAULT_PREVIEW_CHARS
    """Characters the model still sees of spilled content."""
    spill_dir: Path | str | None = None
    """Where spilled content goes (default: ``<tmp>/toolgate/<session>/``)."""


@dataclass(frozen=True, slots=True)
class SourceSettings:
    """Where tools come from and how they are found."""

    tool_folders: Sequence[Path | str | FolderRoot] = ()
    """Folders whose sub-folders are tool folders (``tool.md`` + script); plain paths get the
    namespace ``local``. Kept as a tuple."""
    rescan_interval: float = DEFAULT_RESCAN_INTERVAL
    """Seconds between full rescans of the tool folders while watching."""
    home: Path | str | None = None
    """``$TOOLGATE_HOME``, for declaration sources that keep state there."""
    semantic_search: bool | None = None
    """Rank searches by embeddings too, fused with the lexical ranking (``None``: when the
    ``toolgate[search]`` extra is installed)."""
    mcp_max_message_bytes: int = DEFAULT_MAX_MESSAGE
    """Bytes of one message from an upstream MCP server (a stdio line, an HTTP body or event)
    for servers whose ``spec.maxMessageBytes`` is unset; past it the call fails and toolgate
    stops reading."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_folders", tuple(self.tool_folders))


@dataclass(frozen=True, slots=True)
class EnvironmentSettings:
    """What tools receive from the gateway: its environment, secrets and public settings."""

    environ: Mapping[str, str] | None = None
    """The gateway's environment as tools see it (default ``os.environ``): Python tools read
    their declared ``env`` from it; scripts get only its safe system variables (``PATH``,
    ``HOME``...) and the names allowed by ``env_from_process``."""
    env_file: Path | str | None = None
    """The ``.env`` file scripts' declared ``env`` variables are read from."""
    env_from_process: Collection[str] | bool = ()
    """Declared variables that may also come from ``environ`` (``True``: any declared one)."""
    secrets: Mapping[str, str] | None = None
    """Secret values; a tool receives only those it declares in ``secrets``."""
    config: Mapping[str, Any] | None = None
    """Public settings; a tool receives only those it declares in ``config``."""
    cwd: Path | str | None = None
    """Working directory of scripts called without a workspace (default: the current)."""


@dataclass(frozen=True, slots=True)
class ScriptSettings:
    """How script tools' processes run (``scripts:`` and ``processes:`` in toolgate.yaml)."""

    max_output: int = DEFAULT_MAX_OUTPUT
    """Bytes of stdout (and of stderr) a script may write; past that it is stopped."""
    prestart: PrestartSettings | None = None
    """Which host-mode script tools keep processes started ahead of their calls, and how many
    (default: the tools that declare ``prestart: true``, two each)."""
    workers: WorkerSettings | None = None
    """How long idle workers of ``protocol: worker`` tools are kept."""


@dataclass(frozen=True, slots=True)
class AccessSettings:
    """Who may call what, beyond the tools' own ``safety`` rules."""

    policies: Sequence[AccessPolicy] = ()
    """Access policies (``Policy`` resources) layered on the tools' own rules. Kept as a
    tuple."""
    agent_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Labels per agent name, for policies that select agents by label."""
    rate_limit_per_agent: bool = False
    """Count rate limits per agent instead of per tool."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "policies", tuple(self.policies))


@dataclass(frozen=True, slots=True)
class AuditSettings:
    """The audit log: one redacted record per call, and the source of health statistics."""

    path: Path | str | None = None
    """The SQLite audit log (in the shared database when the gateway has one). ``None``: no
    audit log, and statistics are kept in memory only."""
    jsonl: Path | str | None = None
    """Also append every audit record to this JSON-lines file."""
    retention_days: float | None = 30
    """How long records are kept (``None``: forever)."""
    max_payload_bytes: int | None = 8 * 1024
    """Bytes of JSON of one payload (arguments, result, visualization, detail) a record keeps
    (``None``: all); a larger one is replaced by ``{"_truncated": true, "original_size": N,
    "preview": ...}``."""
    keep_full_payloads: bool = False
    """Also write each oversized payload, redacted, to a file in ``<spill_dir>/audit/``, named
    in the marker's ``full``."""


@dataclass(frozen=True, slots=True)
class StateSettings:
    """Where approvals, grants, idempotency records and rate-limit counters live.

    Without a file they are in memory and last as long as the gateway; a shared database given
    to the Gateway (``state_database``) takes precedence over ``path``.
    """

    path: Path | str | None = None
    """The SQLite file of this process's state (the CLI uses ``$TOOLGATE_HOME/toolgate.db``)."""
    pin_path: Path | str | None = None
    """The SQLite file holding the accepted definitions of MCP servers' tools (default:
    ``path``; in the shared database when there is one; else in memory, so every server's
    first listing is trusted again on the next start). Opened only when an MCP server lists
    its tools."""
    redis_url: str | None = None
    """Keep rate-limit counters in this Redis, shared by the replicas."""
    idempotency_lease_grace: float = LEASE_GRACE
    """Seconds beyond a tool's timeout that a call holds its idempotency key; a retry after
    that finds the call cut off and is answered ``outcome_unknown`` (a tool declared
    ``idempotent`` runs again)."""


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Everything a :class:`~toolgate.Gateway` is configured with, as data. Every group has
    working defaults; ``dataclasses.replace`` derives a variant."""

    results: ResultSettings = field(default_factory=ResultSettings)
    sources: SourceSettings = field(default_factory=SourceSettings)
    environment: EnvironmentSettings = field(default_factory=EnvironmentSettings)
    scripts: ScriptSettings = field(default_factory=ScriptSettings)
    concurrency: ConcurrencySettings = field(default_factory=ConcurrencySettings)
    """Calls of one tool that may run at once, and wait for a slot, by default and per tool
    id or ``namespace:*`` (default: 16 running, 64 waiting for every tool). A call past both
    ends ``busy`` at once; a call that waits longer than the tool's timeout ends ``busy``."""
    approvals: ApprovalSettings = field(default_factory=ApprovalSettings)
    """How long requests wait, the operator's rules, and how many may wait at once (who
    decides is the Gateway's ``approver``)."""
    access: AccessSettings = field(default_factory=AccessSettings)
    audit: AuditSettings = field(default_factory=AuditSettings)
    state: StateSettings = field(default_factory=StateSettings)
