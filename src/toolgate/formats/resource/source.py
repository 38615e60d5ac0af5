"""Kubernetes-style resources as a declaration source: ``format: resource``.

A file or folder of ``apiVersion: joch.dev/v1alpha1`` documents (see
:mod:`toolgate.formats.resource.parse` for the fields). :meth:`ResourceSource.load` binds each
``kind: Tool`` by its type:

* ``rest`` — run by :class:`~toolgate.backends.rest.RestBackend`; unavailable while its
  ``secretRef`` secret is not set (``toolgate secrets set NAME``). It reaches public addresses
  only, plus the private networks the operator grants the tool (``sandbox.network_grants`` in
  toolgate.yaml); never the gateway's own serve port.
* ``function`` — the Python callable is imported and bound (see
  :mod:`toolgate.formats.resource.functions`).
* ``os`` — run by :class:`~toolgate.backends.os_command.OsCommandBackend`: in a compartment
  (bubblewrap, :mod:`toolgate.sandbox`) with the declared ``spec.permissions`` when the gateway
  has a process sandbox and the tool is not in mode ``host``; on the host, unsandboxed, only
  when the operator opted in to host mode; otherwise unavailable, with the reason and the fix.
* ``mcp`` — handed, with the ``kind: MCPServer`` documents, to
  :class:`toolgate.formats.mcp_server.source.McpServers`, which connects to the servers and
  registers
  their tools.

``kind: Policy`` resources are returned in :attr:`SourceLoad.policies`.

Options (the ``options:`` of the ``sources:`` entry in ``toolgate.yaml``):

``host_mode``
    ``true`` runs every ``os`` tool of this source on the host, unsandboxed; a list of tool ids
    (``namespace:name``) runs only those. Default ``false``.
``endpoint_origins``
    ``{"https://api.example.com": "http://127.0.0.1:8080"}``: send REST requests declared for
    the first origin to the second instead (staging, a local mock). Origins only, no paths. A
    private origin such as this one also needs a grant for each tool (``sandbox.network_grants``).
``reload_interval``
    Seconds between checks, while the gateway runs, for changed files and secrets that were set
    or deleted (default 10; ``0`` turns it off). A change reloads the source.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit

from ...backends.environment import ScriptEnvironment
from ...backends.os_command import OsCommandBackend, OsCommandBinding, command_unavailable_reason
from ...backends.rest import RestBackend, rest_unavailable_reason
from ...errors import ConfigError
from ...model import ImplementationKind, RestEndpoint, SandboxMode, SandboxSpec, SourceFormat, Tool
from ...registry import RegisteredTool
from ...sandbox.addresses import tool_grant
from .._common.diagnostics import Diagnostic
from ..declarations import DeclarationSource, SourceContext, SourceLoad
from .functions import bind_function, function_file_problem
from .parse import RawResource, ResourceSet, is_resource, load_resources, resource_files
from .tool import ToolResource

if TYPE_CHECKING:
    from typing import Self

    from ...backends import Backend

__all__ = [
    "DEFAULT_RELOAD_INTERVAL",
    "OPTIONS",
    "ResourceSource",
    "host_declared_reason",
    "host_mode_reason",
]

log = logging.getLogger("toolgate.sources")

DEFAULT_RELOAD_INTERVAL = 10.0
OPTIONS = ("host_mode", "endpoint_origins", "reload_interval")
_MCP_MODULE = "toolgate.formats.mcp_server.source"


def host_mode_reason(tool_id: str) -> str:
    """Why an ``os`` tool does not run on a gateway without a process sandbox (a
    :class:`~toolgate.Gateway` built without ``sandbox=``), and how the operator opts in."""
    return (
        "os tools run a command on this host and this gateway cannot sandbox them (it has no "
        "process sandbox), so it runs them only when the operator opts in to host mode: add "
        "'options: {host_mode: true}' "
        f"(or 'host_mode: [{tool_id}]') to this file's entry under 'sources:' in toolgate.yaml "
        "(a gateway built from toolgate.yaml sandboxes them with bubblewrap instead)"
    )


def host_declared_reason(tool_id: str) -> str:
    """Why an ``os`` tool in sandbox mode ``host`` does not run, and how the operator opts in."""
    return (
        f"{tool_id} runs in sandbox mode 'host' (its 'spec.sandbox' or the operator's "
        "'sandbox.namespaces'), which runs its command unsandboxed: the operator must opt in "
        f"with 'options: {{host_mode: [{tool_id}]}}' on this file's entry under 'sources:' in "
        "toolgate.yaml, or drop 'sandbox: host' so it runs in a compartment"
    )


def _origin(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return None
    return f"{parts.scheme}://{parts.netloc}".lower()


def _options(
    path: Path, options: Mapping[str, Any]
) -> tuple[bool | frozenset[str], dict[str, str], float]:
    where = f"{path}: options"
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown option(s) {', '.join(unknown)}; known: {', '.join(OPTIONS)}"
        )
    host: bool | frozenset[str] = False
    raw_host = options.get("host_mode", False)
    if isinstance(raw_host, bool):
        host = raw_host
    elif isinstance(raw_host, list) and all(isinstance(t, str) and ":" in t for t in raw_host):
        host = frozenset(raw_host)
    else:
        raise ConfigError(
            f"{where}.host_mode: expected true, false or a list of tool ids (namespace:name)"
        )
    origins: dict[str, str] = {}
    raw_origins = options.get("endpoint_origins") or {}
    if not isinstance(raw_origins, Mapping):
        raise ConfigError(f"{where}.endpoint_origins: expected a mapping of origin to origin")
    for source, target in raw_origins.items():
        declared = _origin(str(source))
        replacement = _origin(target) if isinstance(target, str) else None
        if declared is None or replacement is None:
            raise ConfigError(
                f"{where}.endpoint_origins: {source!r}: expected origins such as "
                "'https://api.example.com': 'http://127.0.0.1:8080' (scheme, host and port only)"
            )
        origins[declared] = replacement
    interval = options.get("reload_interval", DEFAULT_RELOAD_INTERVAL)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
        raise ConfigError(f"{where}.reload_interval: expected seconds >= 0 (0 turns it off)")
    return host, origins, float(interval)


def _mcp_module() -> tuple[ModuleType | None, str | None]:
    """The MCP servers module, or why it cannot be imported."""
    try:
        return importlib.import_module(_MCP_MODULE), None
    except ImportError as exc:
        return None, str(exc)


def _in_document(problems: list[Diagnostic], raw: RawResource) -> list[Diagnostic]:
    """The MCP parser's diagnostics (pointers from the start of the file) in this format's
    notation: ``document N: /pointer/inside/the/document``."""
    found: list[Diagnostic] = []
    for problem in problems:
        field = problem.field or ""
        if raw.pointer and field.startswith(raw.pointer):
            field = field[len(raw.pointer) :]
        found.append(dataclasses.replace(problem, field=raw.where.field(field)))
    return found


class ResourceSource(DeclarationSource):
    """A file or folder of Kubernetes-style resources (``format: resource``)."""

    format: ClassVar[SourceFormat] = SourceFormat.RESOURCE

    def __init__(
        self,
        path: Path,
        context: SourceContext,
        *,
        host_mode: bool | frozenset[str] = False,
        endpoint_origins: Mapping[str, str] | None = None,
        reload_interval: float = DEFAULT_RELOAD_INTERVAL,
    ) -> None:
        super().__init__(str(path))
        self.path = path
        self.context = context
        self.host_mode = host_mode
        self.endpoint_origins = dict(endpoint_origins or {})
        self.reload_interval = reload_interval
        self.environment = ScriptEnvironment(
            env_file=None if context.home is None else context.home / ".env",
            process_env=context.environ,
            allow_from_process=(),
        )
        sandbox = context.sandbox
        # REST calls are checked in-process like the egress proxy checks sandboxed tools: only
        # public addresses, plus the private networks the operator granted the tool.
        self._rest = RestBackend(
            context.secrets,
            cidr_grants=None
            if sandbox is None
            else lambda tool: tool_grant(sandbox.cidr_grants, tool.id),
            deny_ports=() if sandbox is None else sandbox.deny_ports,
            resolver=None if sandbox is None else sandbox.resolver,
        )
        self._mcp: Any = None
        self._mcp_tried = False
        self._fingerprint: tuple[Any, ...] = ()
        self._secret_names: frozenset[str] = frozenset()
        self._watch: asyncio.Task[None] | None = None

    # -- DeclarationSource -----------------------------------------------------------------------

    @classmethod
    def claims(cls, path: Path, document: Any) -> bool:
        return is_resource(document)

    @classmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> Self:
        host, origins, interval = _options(path, options)
        return cls(
            path, context, host_mode=host, endpoint_origins=origins, reload_interval=interval
        )

    @classmethod
    def validate(cls, path: Path) -> list[Diagnostic]:
        resources = load_resources(path)
        problems = list(resources.diagnostics)
        for resource in resources.tools:
            if resource.type == "function":
                missing = function_file_problem(resource)
                if missing is not None:
                    problems.append(missing)
        if resources.servers:
            module, why = _mcp_module()
            for raw in resources.servers:
                if module is None:
                    problems.append(
                        raw.where.diagnostic("", f"MCPServer resources cannot be checked: {why}")
                    )
                    continue
                _spec, found = module.parse_mcp_server(
                    raw.data, path=raw.where.path, pointer=raw.pointer
                )
                problems.extend(_in_document(list(found), raw))
        return problems

    def load(self) -> SourceLoad:
        resources = load_resources(self.path)
        result = SourceLoad(
            diagnostics=list(resources.diagnostics),
            policies=[declared.policy for declared in resources.policies],
        )
        refs: list[Tool] = []
        for resource in resources.tools:
            if resource.type == "rest":
                tool = self._with_origin(resource.tool)
                reason = rest_unavailable_reason(tool, self.context.secrets)
                result.entries.append(RegisteredTool(tool, None, reason))
            elif resource.type == "function":
                entry, problems = bind_function(resource)
                result.diagnostics.extend(problems)
                if entry is not None:
                    result.entries.append(entry)
            elif resource.type == "os":
                result.entries.append(self._os_entry(resource))
            else:
                refs.append(resource.tool)
        if resources.servers or refs or self._mcp is not None:
            self._load_mcp(resources, refs, result)
        self._secret_names = frozenset(
            tool.entry.secret_ref
            for tool in (entry.tool for entry in result.entries)
            if isinstance(tool.entry, RestEndpoint) and tool.entry.secret_ref is not None
        )
        self._fingerprint = self._current_fingerprint()
        return result

    def backends(self) -> Mapping[ImplementationKind, Backend]:
        found: dict[ImplementationKind, Backend] = {
            ImplementationKind.REST: self._rest,
            ImplementationKind.OS: OsCommandBackend(),
        }
        mcp = self._mcp_servers()
        if mcp is not None:
            found[ImplementationKind.MCP] = mcp.backend()
        return found

    async def start(self, changed: Callable[[], None]) -> None:
        if self._mcp is not None:
            await self._mcp.start(changed)
        if self.reload_interval > 0 and self._watch is None:
            self._watch = asyncio.create_task(
                self._watch_changes(changed), name=f"toolgate-resources:{self.path}"
            )

    async def aclose(self) -> None:
        task, self._watch = self._watch, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._mcp is not None:
            await self._mcp.aclose()
        await self._rest.aclose()

    def close(self) -> None:
        """:meth:`aclose` for synchronous code: ends the MCP connections (their processes).
        The change watch only runs on a started gateway's loop, which ends it."""
        if self._mcp is not None:
            self._mcp.close()
        self._rest.close()

    # -- binding ---------------------------------------------------------------------------------

    def _with_origin(self, tool: Tool) -> Tool:
        endpoint = tool.entry
        if not isinstance(endpoint, RestEndpoint) or not self.endpoint_origins:
            return tool
        parts = urlsplit(endpoint.url)
        declared = f"{parts.scheme}://{parts.netloc}".lower()
        replacement = self.endpoint_origins.get(declared)
        if replacement is None:
            return tool
        url = replacement + endpoint.url[len(declared) :]
        return dataclasses.replace(tool, entry=dataclasses.replace(endpoint, url=url))

    def _opted_in(self, tool: Tool) -> bool:
        return self.host_mode is True or (
            isinstance(self.host_mode, frozenset) and tool.id in self.host_mode
        )

    def _os_entry(self, resource: ToolResource) -> RegisteredTool:
        tool = resource.tool
        sandbox = self.context.sandbox
        if self._opted_in(tool):
            # The definition says where it runs: approvals given for a host-mode tool are bound
            # to that, and end if the operator later turns host mode off.
            tool = dataclasses.replace(
                tool, sandbox=SandboxSpec(SandboxMode.HOST, tool.sandbox.permissions)
            )
            binding = OsCommandBinding(self.environment)
            return RegisteredTool(tool, binding, command_unavailable_reason(tool, self.environment))
        if sandbox is None:
            return RegisteredTool(tool, None, host_mode_reason(tool.id))
        if sandbox.mode_for(tool) is SandboxMode.HOST:
            # Declared (or configured) 'host': the command runs unsandboxed, which only the
            # operator's host_mode opt-in allows.
            return RegisteredTool(tool, None, host_declared_reason(tool.id))
        binding = OsCommandBinding(self.environment, sandbox=sandbox)
        reason = command_unavailable_reason(tool, self.environment) or sandbox.unavailable_reason(
            tool
        )
        return RegisteredTool(tool, binding, reason)

    def mcp_servers(self) -> Any:
        """The MCP servers of this source's ``MCPServer`` resources (``None``: none yet)."""
        return self._mcp

    def _mcp_servers(self) -> Any:
        if not self._mcp_tried:
            self._mcp_tried = True
            module, _why = _mcp_module()
            if module is not None:
                self._mcp = module.McpServers(self.context)
        return self._mcp

    def _load_mcp(self, resources: ResourceSet, refs: list[Tool], result: SourceLoad) -> None:
        mcp = self._mcp_servers()
        if mcp is None:
            _module, why = _mcp_module()
            for raw in resources.servers:
                result.diagnostics.append(
                    raw.where.diagnostic("", f"MCP servers are not supported here: {why}")
                )
            for ref in refs:
                result.diagnostics.append(
                    Diagnostic(
                        ref.source.location or self.location,
                        ref.id,
                        f"type: mcp tools are not supported here: {why}",
                    )
                )
            return
        module, _why = _mcp_module()
        assert module is not None
        specs: list[Any] = []
        for raw in resources.servers:
            spec, problems = module.parse_mcp_server(
                raw.data, path=raw.where.path, pointer=raw.pointer
            )
            result.diagnostics.extend(_in_document(list(problems), raw))
            if spec is not None:
                specs.append(spec)
        mcp.configure(specs, refs)
        entries, problems = mcp.entries()
        result.entries.extend(entries)
        result.diagnostics.extend(problems)

    # -- noticing changes ------------------------------------------------------------------------

    def _current_fingerprint(self) -> tuple[Any, ...]:
        """What a reload depends on besides MCP servers: the files and which secrets are set."""
        files, _problems = resource_files(self.path)
        stats: list[tuple[str, int, int]] = []
        for file in files:
            try:
                info = file.stat()
            except OSError:
                continue
            stats.append((str(file), info.st_mtime_ns, info.st_size))
        secrets: list[tuple[str, bool]] = []
        probe = Tool(id="resource:probe", description="", input_schema={"type": "object"})
        for name in sorted(self._secret_names):
            try:
                present = bool(self.context.secrets.get(probe, name))
            except Exception:  # noqa: BLE001 - an unreadable store counts as "not set"
                present = False
            secrets.append((name, present))
        return (tuple(stats), tuple(secrets))

    async def _watch_changes(self, changed: Callable[[], None]) -> None:
        while True:
            await asyncio.sleep(self.reload_interval)
            try:
                now = await asyncio.to_thread(self._current_fingerprint)
                if now != self._fingerprint:
                    log.info("resources at %s changed; reloading", self.path)
                    changed()
            except Exception:
                log.exception("checking %s for changes failed", self.path)
