"""Building a :class:`~toolgate.Gateway` from a loaded configuration."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Literal

from ..approvals import Approver
from ..backends.prestart import PrestartSettings
from ..backends.workers import WorkerSettings
from ..errors import ConfigError, ToolgateError
from ..formats.plugin.install import installed_plugins
from ..formats.tool_folder.source import FolderRoot
from ..gateway import Gateway
from ..gateway_settings import (
    AccessSettings,
    ApprovalSettings,
    AuditSettings,
    EnvironmentSettings,
    GatewaySettings,
    ResultSettings,
    ScriptSettings,
    SourceSettings,
    StateSettings,
)
from ..sandbox.egress import pinned_resolver
from ..sandbox.runner import Sandbox
from ..secrets import open_secret_store, secrets_file
from ..telemetry import Telemetry
from .files import LoadedConfig, load_config, toolgate_home
from .policies import load_policies
from .python_sources import _source_tools
from .schema import SourceEntry
from .shared_state import SharedState, open_shared_state

__all__ = [
    "AUDIT_FILE_NAME",
    "STATE_FILE_NAME",
    "AuditMode",
    "build_gateway",
    "config_sandbox",
    "gateway_settings",
    "load_gateway",
    "tool_folder_roots",
]

#: The SQLite database in ``$TOOLGATE_HOME`` holding approval requests and grants.
STATE_FILE_NAME = "toolgate.db"
#: The SQLite audit log in ``$TOOLGATE_HOME`` (one redacted record per call).
AUDIT_FILE_NAME = "audit.db"

AuditMode = Literal["write", "read", "off"]
"""How :func:`build_gateway` uses the audit log: ``"write"`` records every call; ``"read"`` opens
an existing log for statistics only (creates nothing, prunes nothing); ``"off"`` ignores it."""


def tool_folder_roots(
    loaded: LoadedConfig, *, home: Path | None = None, include_demo: bool = False
) -> list[FolderRoot]:
    """The tool-folder roots, in order: ``$TOOLGATE_HOME/tools`` (namespace ``local``), the
    ``tool_folders`` entries, then the bundled demo tool folders (namespace ``demo``) when
    ``demo: true`` or ``include_demo``.

    Raises :class:`ConfigError` for a configured folder that does not exist. Creates nothing.
    """
    config, label, folder = loaded.config, loaded.label, loaded.folder
    home = toolgate_home() if home is None else home
    roots = [FolderRoot(home / "tools", "local")]
    for index, entry in enumerate(config.tool_folders):
        path = Path(entry.path).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_dir():
            problem = "is not a folder" if path.exists() else "no such folder"
            raise ConfigError(f"{label}: tool_folders[{index}]: {problem}: {path}")
        # The same folder named twice (or $TOOLGATE_HOME/tools itself) would declare every tool
        # in it twice: once is enough, under one namespace.
        same = next((r for r in roots if r.path.resolve() == path.resolve()), None)
        if same is None:
            roots.append(FolderRoot(path, entry.namespace))
        elif same.namespace != entry.namespace:
            raise ConfigError(
                f"{label}: tool_folders[{index}]: {path} is already a tool folder with the "
                f"namespace {same.namespace!r}"
            )
    if config.demo or include_demo:
        from ..demo import TOOL_FOLDERS

        roots.append(FolderRoot(TOOL_FOLDERS, "demo"))
    return roots


def build_gateway(
    loaded: LoadedConfig,
    *,
    include_demo: bool = False,
    home: Path | None = None,
    approver: Approver | Literal["queue"] | None = "queue",
    audit: AuditMode = "write",
    serve_ports: Collection[int] = (),
    telemetry: Telemetry | None = None,
    keep_processes: bool = False,
    shared: SharedState | None = None,
) -> Gateway:
    """Build a :class:`Gateway` holding the configured tools.

    ``include_demo`` adds the bundled demo tools even when the file does not ask for them.
    ``home`` is ``$TOOLGATE_HOME`` (default :func:`toolgate_home`): its ``tools`` folder is always
    a tool-folder root, the plugins in its ``plugins`` folder (``toolgate plugins install``)
    are loaded, its ``.env`` holds the variables scripts declare, and its
    ``toolgate.db`` the approval requests and grants, so they outlive the process.
    ``approver`` decides calls that need approval (see :class:`Gateway`): ``"queue"`` (the
    default) keeps them pending for ``toolgate approvals`` (or any other surface) to decide;
    ``None`` denies them and opens no database.
    ``audit`` (when ``audit.enabled``, the default): ``"write"`` records every call in
    ``$TOOLGATE_HOME/audit.db`` (and the ``audit.jsonl`` file) and takes the tools' statistics
    from it; ``"read"`` opens that log only when it exists, for statistics, and creates or prunes
    nothing (for commands that call no tool); ``"off"`` keeps statistics in memory.
    ``serve_ports``: the ports ``toolgate serve`` really listens on (besides ``serve.port``), which
    no tool may reach. ``telemetry``: traces and metrics of every call (``toolgate serve`` and
    ``toolgate mcp`` pass :func:`toolgate.telemetry.from_environment`), closed with the gateway.
    ``keep_processes``: the gateway serves many calls (``serve``, ``mcp``), so script tools may
    have processes started ahead (``processes.prestart``); a command that makes one call starts
    none ahead. ``shared``: the state shared with other replicas, opened by the caller (default:
    :func:`open_shared_state` opens what ``state:`` / ``redis:`` name; the gateway closes it).
    Raises :class:`ConfigError` naming the file and the entry for every problem.
    """
    config, label, folder = loaded.config, loaded.label, loaded.folder
    home = toolgate_home() if home is None else home
    opened = shared is None
    shared = open_shared_state(loaded) if shared is None else shared
    try:
        settings = gateway_settings(
            loaded,
            home=home,
            include_demo=include_demo,
            approvals=approver is not None,
            audit=audit,
            keep_processes=keep_processes,
            shared=shared,
        )
    except BaseException:
        if opened:
            shared.close()
        raise
    gateway = Gateway(
        settings,
        approver=approver,
        # The keyring or the secrets file, chosen on first use: commands that read no secret
        # never load a keyring backend.
        secret_store=open_secret_store(home, database=shared.database),
        sandbox=config_sandbox(loaded, home, serve_ports),
        telemetry=telemetry,
        state_database=shared.database,
    )
    try:
        if config.python and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        for index, source in enumerate(config.python):
            where = f"{label}: python[{index}]"
            items = _source_tools(source, folder, where)
            try:
                gateway.add(items, namespace=source.namespace)
            except ToolgateError as exc:
                raise ConfigError(f"{where}: {exc.message}") from exc
        _add_sources(gateway, loaded)
        _add_installed_plugins(gateway, home)
        if config.demo or include_demo:
            from ..demo import tools as demo_tools

            try:
                gateway.add(demo_tools)
            except ToolgateError as exc:
                raise ConfigError(f"{label}: demo: {exc.message}") from exc
        if config.search.progressive:
            gateway.enable_progressive_disclosure(core=config.search.core)
        elif config.search.tool:
            gateway.add_search_tool()
    except BaseException:
        gateway.close()
        raise
    return gateway


def gateway_settings(
    loaded: LoadedConfig,
    *,
    home: Path,
    include_demo: bool = False,
    approvals: bool = True,
    audit: AuditMode = "write",
    keep_processes: bool = False,
    shared: SharedState,
) -> GatewaySettings:
    """The :class:`GatewaySettings` a configuration file describes (see :func:`build_gateway`
    for the arguments; ``approvals``: the gateway has an approver, so its requests and grants
    are kept in ``$TOOLGATE_HOME/toolgate.db``). Raises :class:`ConfigError`."""
    config, folder = loaded.config, loaded.folder
    roots = tool_folder_roots(loaded, home=home, include_demo=include_demo)
    policies = load_policies(loaded)
    spill = config.overflow.dir
    audit_path: Path | None = None
    audit_jsonl: Path | None = None
    if config.audit.enabled and audit != "off":
        # With a shared database the log is there (the path only names the local fallback).
        audit_path = home / AUDIT_FILE_NAME
        if audit == "read" and shared.database is None and not audit_path.is_file():
            audit_path = None
        if audit == "write" and config.audit.jsonl is not None:
            audit_jsonl = folder / Path(config.audit.jsonl).expanduser()
    return GatewaySettings(
        results=ResultSettings(
            overflow_limit=config.overflow.limit,
            preview_chars=config.overflow.preview,
            spill_dir=None if spill is None else folder / Path(spill).expanduser(),
        ),
        sources=SourceSettings(
            tool_folders=tuple(roots),
            home=home,
            semantic_search=config.search.semantic,
            mcp_max_message_bytes=config.mcp.max_message_bytes,
        ),
        environment=EnvironmentSettings(
            env_file=home / ".env", env_from_process=config.scripts.env_from_process
        ),
        scripts=ScriptSettings(
            max_output=config.scripts.max_output,
            prestart=config.processes.prestart.settings()
            if keep_processes
            else PrestartSettings(enabled=False),
            workers=WorkerSettings(idle_timeout=config.processes.workers.idle_timeout),
        ),
        concurrency=config.concurrency.settings(config.scripts.concurrency),
        approvals=ApprovalSettings(
            ttl=config.approval.expires_after,
            rules=tuple(config.approval.approval_rules()),
            max_pending_per_tool=config.approval.max_pending_per_tool,
            max_pending_per_agent=config.approval.max_pending_per_agent,
        ),
        access=AccessSettings(
            policies=tuple(policies),
            agent_labels=config.agent_labels(),
            rate_limit_per_agent=config.rate_limits.per_agent,
        ),
        audit=AuditSettings(
            path=audit_path,
            jsonl=audit_jsonl,
            retention_days=config.audit.retention_days if audit == "write" else None,
            max_payload_bytes=config.audit.max_payload_bytes,
            keep_full_payloads=config.audit.keep_full_payloads,
        ),
        state=StateSettings(
            path=home / STATE_FILE_NAME if approvals else None,
            # Accepted MCP tool definitions: read by every command, created only when an MCP
            # server lists its tools.
            pin_path=home / STATE_FILE_NAME,
            redis_url=shared.redis_url,
            idempotency_lease_grace=config.idempotency.lease_grace,
        ),
    )


def config_sandbox(loaded: LoadedConfig, home: Path, serve_ports: Collection[int] = ()) -> Sandbox:
    """The process sandbox of a configured gateway (the ``sandbox:`` section).

    The gateway's own folders (``home``, the tool folders, the folder of toolgate.yaml; the
    sources as they are opened) are never a workspace nor an ``fs`` prefix, inside or around
    (:mod:`toolgate.path_policy`). Its state is also protected: hidden in every sandbox even
    when a declared ``fs`` prefix or the workspace contains it (``.env``, the approval and audit
    databases with their SQLite side files, the secrets folder, the loaded toolgate.yaml, the
    audit JSON-lines file).
    The serve port is refused by the egress proxy and by REST tools, so a tool cannot call the
    gateway's HTTP API; ``sandbox.network_grants`` are the private networks a tool may reach.
    """
    protected: list[Path] = [home / ".env", secrets_file(home).parent]
    for name in (STATE_FILE_NAME, AUDIT_FILE_NAME):
        protected += [home / name, home / f"{name}-wal", home / f"{name}-shm"]
    if loaded.path is not None:
        protected.append(loaded.path)
    if loaded.config.audit.jsonl is not None:
        protected.append(loaded.folder / Path(loaded.config.audit.jsonl).expanduser())
    ports = {port for port in (loaded.config.serve.port, *serve_ports) if port}
    hosts = loaded.config.sandbox.hosts
    # Where the gateway loads code and configuration from: never a workspace nor inside an
    # ``fs`` prefix (the gateway adds its tool folders and sources as it opens them, and the
    # Python code folders are found when a call is prepared).
    # $TOOLGATE_HOME and the spill folder are state: not even a read-only workspace.
    own = [*(root.path for root in tool_folder_roots(loaded, home=home))]
    if loaded.path is not None:
        own.append(loaded.folder)
    state = [home]
    if loaded.config.overflow.dir is not None:
        state.append(loaded.folder / Path(loaded.config.overflow.dir).expanduser())
    return Sandbox(
        loaded.config.sandbox,
        protected=protected,
        gateway_folders=own,
        state_folders=state,
        deny_ports=sorted(ports),
        cidr_grants=loaded.config.sandbox.network_grants,
        resolver=pinned_resolver(hosts) if hosts else None,
    )


def _source_path(entry: SourceEntry, folder: Path, where: str) -> Path:
    if entry.path is not None:
        path = Path(entry.path).expanduser()
        return path if path.is_absolute() else folder / path
    package, _, inner = (entry.package or "").partition("/")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as exc:
        raise ConfigError(f"{where}: package {package!r} cannot be found: {exc}") from None
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"{where}: {package!r} is not an installed package")
    return Path(next(iter(spec.submodule_search_locations))) / inner


def _add_sources(gateway: Gateway, loaded: LoadedConfig) -> None:
    """Open every ``sources:`` entry; their declaration problems stay diagnostics."""
    for index, entry in enumerate(loaded.config.sources):
        where = f"{loaded.label}: sources[{index}]"
        path = _source_path(entry, loaded.folder, where)
        try:
            gateway.add_source(
                path,
                format=None if entry.format == "auto" else entry.format,
                options=entry.options,
            )
        except ToolgateError as exc:
            raise ConfigError(f"{where}: {exc.message}") from exc


def _add_installed_plugins(gateway: Gateway, home: Path) -> None:
    """Load every plugin ``toolgate plugins install`` put in ``$TOOLGATE_HOME/plugins``."""
    for plugin in installed_plugins(home):
        gateway.add_source(plugin.folder, format="plugin")


def load_gateway(
    config_path: Path | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    include_demo: bool = False,
    approver: Approver | Literal["queue"] | None = "queue",
    audit: AuditMode = "write",
) -> Gateway:
    """Find the configuration, load it, and build a :class:`Gateway` from it.

    ``approver`` and ``audit`` are passed to :func:`build_gateway`. Raises
    :class:`ConfigError` (naming the file and the field) when anything is wrong.
    """
    return build_gateway(
        load_config(config_path, cwd=cwd, environ=environ),
        include_demo=include_demo,
        home=toolgate_home(environ),
        approver=approver,
        audit=audit,
    )
