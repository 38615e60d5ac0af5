"""Plugins as a declaration source: a manifest plus Python tool objects.

``PluginSource.open(path)`` takes the manifest file or the plugin folder (see
:mod:`toolgate.formats.plugin.manifest` for the manifest, :mod:`toolgate.formats.plugin.tool` for
the
tool objects, :mod:`toolgate.formats.plugin.runtime` for importing and calling plugin code).
Tools are registered as ``pluginId:toolId`` (``@pandorakit/weather:weather``).

**Sandbox.** The format's default mode is ``compartment``. On a gateway with a working process
sandbox (bubblewrap; a gateway built from toolgate.yaml has one), a ``compartment`` entry is
never imported on the host: the sandboxed worker (:mod:`toolgate.sandbox.compartment`) lists its
tools (static and ``resolve_tools``) and runs each call of ``execute`` in a sandbox of its own,
with the tool's ``permissions`` enforced (``fs``, ``network``, ``env``; ``time`` and ``random``
are offered on ``ctx`` only when granted). Each call's outcome (and audit record) carries
``metadata.sandbox`` with the egress proxy's allowed and refused connections. When the host
cannot sandbox and the operator set ``sandbox: {unsandboxed_host: true}``, the worker runs on
the host instead (it imports the entry there) and every outcome is labelled
``unsandboxed-host``. Otherwise (no sandbox, or a host that cannot sandbox and no such
setting), a ``compartment`` tool never runs silently unsandboxed:

* An entry whose ``sandbox`` is ``compartment`` is **not imported at all** (importing runs the
  plugin's code on the host) unless the operator opts in with ``host_mode`` in the source's
  options. Its tools are reported as not loaded, with a warning diagnostic and a warning alert
  saying why and how to opt in. Which tools it would provide, and any per-tool ``sandbox``
  override inside the module, cannot be known without importing it.
* ``host_mode: true`` runs every compartment tool of the plugin on the host; ``host_mode:
  [weather, ...]`` (local or full ids) only those, and still imports the entries (the modules'
  top-level code runs on the host either way). A tool that runs on the host this way is
  registered with ``sandbox.mode = host`` (what really happens) and is reported as
  "host (operator opt-in)". The opt-in wins over the sandbox.
* A tool whose own ``sandbox`` override says ``compartment`` (in an entry that was imported)
  and that is not opted in runs in the worker when the sandbox works; otherwise it is
  registered **unavailable**, with a reason that says so and how to opt in; its binding refuses
  to run even if called directly.

Options of a ``sources:`` entry (``toolgate.yaml``)::

    sources:
      - path: ./plugins/weather
        format: plugin
        options:
          host_mode: true            # or [weather]; default false
          config: {units: metric}    # ctx.pluginConfig of resolve_tools
          resolve_timeout: 30        # seconds resolve_tools may take (default 30)

**Environment.** ``ctx.env`` holds only the declared ``permissions.env`` keys (the tool's own
``permissions`` override wins), snapshotted from the gateway's environment at load time.

**Dynamic tools.** ``resolve_tools(ctx)`` (sync or async; ``ctx.plugin_config`` /
``ctx.pluginConfig``, ``ctx.env``, ``ctx.logger``) returns ``{"tools": [...], "alerts": [...]}``;
alerts (``info`` / ``warning``) become :class:`SourceAlert` values of the plugin. When it raises,
times out or returns something else, the plugin gets a warning alert and no resolved tools; the
static ``tools`` still load.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..._json import thaw
from ...backends.js_host import JsHosts
from ...errors import ToolError
from ...model import SandboxMode, SourceFormat
from ...python.decorator import code_digest
from ...registry import RegisteredTool
from .._common.diagnostics import Diagnostic, Report, Severity
from ..declarations import DeclarationSource, SourceAlert, SourceContext, SourceLoad
from .js import host_escape_reason, js_binding, js_entry_tools, js_spec
from .manifest import PluginManifest, ToolsEntry, is_plugin_manifest, load_plugin_manifest
from .report import PluginEntryStatus, PluginReport, PluginToolStatus
from .runtime import (
    PLUGIN_OPTIONS,
    PluginLogger,
    PluginOptions,
    PluginToolContext,
    ResolveToolsContext,
    call_resolve_tools,
    entry_tool,
    execute_binding,
    forget_modules,
    import_entry,
    no_worker_reason,
    package_name,
    refusing_binding,
    worker_binding,
    worker_entry_tools,
    worker_runs,
)
from .tool import PluginTool, build_plugin_tool
from .values import NOT_A_RESULT, describe_error, field_of, reference_of, resolver_of

if TYPE_CHECKING:
    from typing import Self

    from ...sandbox.runner import Sandbox

__all__ = ["PLUGIN_OPTIONS", "PluginOptions", "PluginSource"]

log = logging.getLogger("toolgate.formats.plugin.source")


_OPT_IN_HINT = (
    "To run its tools on the host anyway (no isolation), add 'options: {host_mode: true}' (or a "
    "list of tool ids) to this plugin under 'sources:' in toolgate.yaml."
)


class PluginSource(DeclarationSource):
    """One plugin: its manifest file or folder.

    After each :meth:`load`, :attr:`report` tells what was loaded and why anything was not
    (``toolgate plugins`` prints it).
    """

    format: ClassVar[SourceFormat] = SourceFormat.PLUGIN

    def __init__(self, path: Path, context: SourceContext, options: PluginOptions) -> None:
        super().__init__(str(path))
        self.path = path
        self.context = context
        self.options = options
        self.report: PluginReport | None = None
        """What the last :meth:`load` found (``None`` before the first)."""
        self.js_hosts = JsHosts()
        """The warm JavaScript host processes of the plugin's JavaScript/TypeScript entries."""

    @classmethod
    def claims(cls, path: Path, document: Any) -> bool:
        """A document with ``id`` and ``provides.tools`` is a plugin manifest."""
        return is_plugin_manifest(document)

    @classmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> Self:
        """A source for a manifest file or a plugin folder; raises :class:`ConfigError` for bad
        ``options``."""
        return cls(path, context, PluginOptions.parse(options, f"{path}: options"))

    @classmethod
    def validate(cls, path: Path) -> list[Diagnostic]:
        """Check the manifest (never imports the entry: tool objects are checked at load)."""
        return list(load_plugin_manifest(path).diagnostics)

    def load(self) -> SourceLoad:
        """Read the manifest, import the entries allowed to run on the host, resolve dynamic
        tools and bind every tool. Never raises for a broken plugin."""
        loader = _PluginLoader(
            self.location, self.context.environ, self.options, self.context.sandbox
        )
        loader.js_hosts = self.js_hosts
        entries = loader.load(self.path)
        self.report = loader.report()
        return SourceLoad(entries, list(loader.diagnostics), list(loader.alerts))

    async def aclose(self) -> None:
        """Stop the plugin's JavaScript host processes of the running event loop."""
        await self.js_hosts.aclose()

    def close(self) -> None:
        """Stop the plugin's idle JavaScript host processes."""
        self.js_hosts.close()


class _PluginLoader:
    """One load of one plugin: collects tools, diagnostics, alerts and the report."""

    def __init__(
        self,
        location: str,
        environ: Mapping[str, str],
        options: PluginOptions,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.location = location
        self.environ = environ
        self.options = options
        self.sandbox = sandbox
        self.in_worker: set[str] = set()
        """Local ids of the tools listed by the worker (their code never ran on the host)."""
        self.manifest: PluginManifest | None = None
        self.plugin_id: str | None = None
        self.diagnostics: list[Diagnostic] = []
        self.alerts: list[SourceAlert] = []
        self.entries: list[PluginEntryStatus] = []
        self.tools: list[PluginToolStatus] = []
        self.all_imported = True
        self.js_hosts = JsHosts()
        self.js_tools: set[str] = set()
        """Local ids of the tools listed by the JavaScript host."""
        self.generation = secrets.token_hex(8)

    def report(self) -> PluginReport:
        manifest = self.manifest
        return PluginReport(
            location=self.location,
            plugin_id=self.plugin_id,
            manifest=None if manifest is None else str(manifest.path),
            name=None if manifest is None else manifest.name,
            version=None if manifest is None else manifest.version,
            description=None if manifest is None else manifest.description,
            host_mode=self.options.host_mode
            if isinstance(self.options.host_mode, bool)
            else tuple(sorted(self.options.host_mode)),
            entries=tuple(self.entries),
            tools=tuple(self.tools),
            alerts=tuple(self.alerts),
            diagnostics=tuple(self.diagnostics),
        )

    def _alert(self, level: Literal["info", "warning"], message: str) -> None:
        self.alerts.append(SourceAlert(self.plugin_id or self.location, level, message))

    def _snapshot(self, keys: tuple[str, ...]) -> Mapping[str, str]:
        return MappingProxyType({key: self.environ[key] for key in keys if key in self.environ})

    def load(self, path: Path) -> list[RegisteredTool]:
        loaded = load_plugin_manifest(path)
        self.diagnostics.extend(loaded.diagnostics)
        self.plugin_id = loaded.plugin_id
        self.manifest = manifest = loaded.manifest
        if manifest is None:
            return []
        forget_modules(manifest)
        built: list[tuple[PluginTool, ToolsEntry, bool]] = []
        for entry in manifest.tools:
            built.extend((tool, entry, resolved) for tool, resolved in self._entry(manifest, entry))
        registered: list[RegisteredTool] = []
        seen: dict[str, str] = {}
        for plugin_tool, entry, resolved in built:
            if plugin_tool.local_id in seen:
                self.diagnostics.append(
                    Diagnostic(
                        str(entry.module_file),
                        None,
                        f"plugin {manifest.id}: tool id {plugin_tool.local_id!r} is declared "
                        f"twice (also by {seen[plugin_tool.local_id]}); the second is ignored",
                    )
                )
                continue
            seen[plugin_tool.local_id] = "resolve_tools" if resolved else f"{entry.entry} tools"
            registered.append(self._bind(manifest, entry, plugin_tool, resolved))
        self._check_host_mode_names(manifest, set(seen))
        return registered

    # -- one tools entry ----------------------------------------------------------------------

    def _entry(self, manifest: PluginManifest, entry: ToolsEntry) -> list[tuple[PluginTool, bool]]:
        if entry.is_javascript:
            return self._js_entry(manifest, entry)
        if entry.sandbox is SandboxMode.COMPARTMENT and not self.options.host_mode:
            stand_in = entry_tool(manifest, entry, self.options.resolve_timeout)
            if self.sandbox is not None and worker_runs(self.sandbox, stand_in):
                return self._worker_entry(manifest, entry)
            why = no_worker_reason(self.sandbox, stand_in)
            reason = (
                f"the tools of entry {entry.entry!r} were not loaded: its sandbox is "
                f"'compartment', which this gateway cannot enforce here ({why}), and importing "
                f"the entry would run its code on the host without a sandbox. {_OPT_IN_HINT}"
            )
            self.all_imported = False
            self.entries.append(
                PluginEntryStatus(entry.pointer, entry.entry, entry.sandbox, False, reason)
            )
            self.diagnostics.append(
                Diagnostic(str(manifest.path), f"{entry.pointer}/sandbox", reason, Severity.WARNING)
            )
            self._alert("warning", reason)
            return []
        try:
            module = import_entry(manifest, entry)
        except (Exception, SystemExit) as exc:
            log.warning(
                "plugin %s: importing %s failed", manifest.id, entry.module_file, exc_info=exc
            )
            problem = describe_error(exc, manifest.folder)
            reason = f"importing the entry {entry.entry!r} failed: {problem}"
            self._entry_failed(manifest, entry, reason)
            return []
        self.entries.append(PluginEntryStatus(entry.pointer, entry.entry, entry.sandbox, True))
        report = Report(str(entry.module_file))
        tools = self._static_tools(manifest, entry, module, report)
        tools.extend((tool, True) for tool in self._resolved_tools(manifest, entry, module, report))
        self.diagnostics.extend(report.items)
        return tools

    def _entry_failed(self, manifest: PluginManifest, entry: ToolsEntry, reason: str) -> None:
        """Record an entry that provides no tools, and why (a status and a diagnostic)."""
        self.all_imported = False
        self.entries.append(
            PluginEntryStatus(entry.pointer, entry.entry, entry.sandbox, False, reason)
        )
        self.diagnostics.append(
            Diagnostic(str(entry.module_file), None, f"plugin {manifest.id}: {reason}")
        )

    def _worker_entry(
        self, manifest: PluginManifest, entry: ToolsEntry
    ) -> list[tuple[PluginTool, bool]]:
        """The tools of a compartment entry, as the sandboxed worker lists them."""
        assert self.sandbox is not None
        report = Report(str(entry.module_file))
        try:
            tools, alerts = worker_entry_tools(
                self.sandbox,
                manifest,
                entry,
                env=self._snapshot(entry.permissions.env),
                config=thaw(self.options.config),
                timeout=self.options.resolve_timeout,
                report=report,
            )
        except ToolError as exc:
            reason = f"listing the tools of entry {entry.entry!r} in its sandbox failed: {exc}"
            self._entry_failed(manifest, entry, reason)
            return []
        self.entries.append(PluginEntryStatus(entry.pointer, entry.entry, entry.sandbox, True))
        self._resolve_alerts(entry, alerts)
        self.diagnostics.extend(report.items)
        self.in_worker.update(tool.local_id for tool in tools)
        return [(tool, False) for tool in tools]

    def _js_entry(
        self, manifest: PluginManifest, entry: ToolsEntry
    ) -> list[tuple[PluginTool, bool]]:
        """The tools of a JavaScript/TypeScript entry, as its host lists them (the SES
        compartment is the sandbox: no process sandbox or opt-in is needed)."""
        report = Report(str(entry.module_file))
        on_host = entry.sandbox is SandboxMode.HOST or self.options.host_mode is True
        spec = js_spec(
            manifest,
            dataclasses.replace(entry, sandbox=SandboxMode.HOST) if on_host else entry,
            None,
            env=self._snapshot(entry.permissions.env),
            config=thaw(self.options.config),
            generation=self.generation,
            sandbox=self.sandbox,
        )
        try:
            tools, alerts = js_entry_tools(
                manifest, entry, spec, timeout=self.options.resolve_timeout, report=report
            )
        except ToolError as exc:
            self._entry_failed(manifest, entry, f"loading the entry {entry.entry!r} failed: {exc}")
            self._alert("warning", f"entry {entry.entry!r} was not loaded: {exc}")
            return []
        self.entries.append(PluginEntryStatus(entry.pointer, entry.entry, entry.sandbox, True))
        self._resolve_alerts(entry, alerts)
        self.diagnostics.extend(report.items)
        self.js_tools.update(tool.local_id for tool in tools)
        return [(tool, False) for tool in tools]

    def _static_tools(
        self, manifest: PluginManifest, entry: ToolsEntry, module: ModuleType, report: Report
    ) -> list[tuple[PluginTool, bool]]:
        exported = getattr(module, "tools", None)
        if exported is None:
            if resolver_of(module) is None:
                report.error(
                    "/tools",
                    f"plugin {manifest.id}: the entry {entry.entry!r} exports neither 'tools' "
                    "(a list of tool objects) nor 'resolve_tools'",
                )
            return []
        if not isinstance(exported, (list, tuple)):
            report.error(
                "/tools",
                f"plugin {manifest.id}: 'tools' must be a list of tool objects, "
                f"not {type(exported).__name__}",
            )
            return []
        return [
            (tool, False)
            for index, value in enumerate(exported)
            if (tool := self._build(manifest, entry, value, index, f"/tools/{index}", report))
        ]

    def _build(
        self,
        manifest: PluginManifest,
        entry: ToolsEntry,
        value: Any,
        index: int,
        pointer: str,
        report: Report,
    ) -> PluginTool | None:
        return build_plugin_tool(
            value,
            manifest=manifest,
            entry=entry,
            index=index,
            pointer=pointer,
            report=report,
            digest=code_digest,
            reference=lambda fn: reference_of(fn, package_name(manifest)),
        )

    def _resolved_tools(
        self, manifest: PluginManifest, entry: ToolsEntry, module: ModuleType, report: Report
    ) -> list[PluginTool]:
        resolve = resolver_of(module)
        if resolve is None:
            return []
        if not callable(resolve):
            report.error(
                "/resolve_tools",
                f"plugin {manifest.id}: 'resolve_tools' must be a function, "
                f"not {type(resolve).__name__}",
            )
            return []
        env = self._snapshot(entry.permissions.env)
        context = ResolveToolsContext(
            plugin_config=thaw(self.options.config),
            env=env,
            logger=PluginLogger(logging.getLogger(f"toolgate.plugin.{manifest.id}"), env.values()),
        )
        try:
            result = call_resolve_tools(resolve, context, self.options.resolve_timeout)
        except (Exception, SystemExit) as exc:
            log.warning("plugin %s: resolve_tools failed", manifest.id, exc_info=exc)
            problem = describe_error(exc, manifest.folder)
            self._alert(
                "warning",
                f"resolve_tools of entry {entry.entry!r} failed ({problem}); its dynamic tools "
                "were not loaded",
            )
            return []
        tools_value = field_of(result, "tools")
        alerts_value = field_of(result, "alerts")
        if tools_value is NOT_A_RESULT:
            self._alert(
                "warning",
                f"resolve_tools of entry {entry.entry!r} returned {type(result).__name__}, not "
                "{tools, alerts}; its dynamic tools were not loaded",
            )
            return []
        self._resolve_alerts(entry, alerts_value)
        if tools_value is None:
            return []
        if not isinstance(tools_value, (list, tuple)):
            report.error(
                "resolve_tools()/tools",
                f"plugin {manifest.id}: resolve_tools returned 'tools' that is not a list "
                f"({type(tools_value).__name__})",
            )
            return []
        return [
            tool
            for index, value in enumerate(tools_value)
            if (
                tool := self._build(
                    manifest, entry, value, index, f"resolve_tools()/tools/{index}", report
                )
            )
        ]

    def _resolve_alerts(self, entry: ToolsEntry, value: Any) -> None:
        if value is None:
            return
        if not isinstance(value, (list, tuple)):
            self._alert(
                "warning",
                f"resolve_tools of entry {entry.entry!r} returned 'alerts' that is not a list "
                f"({type(value).__name__}); ignored",
            )
            return
        for index, alert in enumerate(value):
            level, message = field_of(alert, "level"), field_of(alert, "message")
            if level in ("info", "warning") and isinstance(message, str) and message.strip():
                self._alert(level, message.strip())
            else:
                self._alert(
                    "warning",
                    f"resolve_tools of entry {entry.entry!r} returned a malformed alert at "
                    f"index {index} (expected {{level: 'info' | 'warning', message: str}}): "
                    f"{alert!r:.200}",
                )

    # -- binding --------------------------------------------------------------------------------

    def _bind(
        self, manifest: PluginManifest, entry: ToolsEntry, item: PluginTool, resolved: bool
    ) -> RegisteredTool:
        tool = item.tool
        declared = tool.sandbox.mode
        opted_in = declared is SandboxMode.COMPARTMENT and self.options.runs_on_host(
            manifest.id, item.local_id
        )
        reason: str | None = None
        if opted_in:
            # What really happens is recorded: the tool runs on the host.
            tool = dataclasses.replace(
                tool, sandbox=dataclasses.replace(tool.sandbox, mode=SandboxMode.HOST)
            )
            log.info(
                "plugin %s: tool %s declares sandbox 'compartment' and runs on the host without "
                "a sandbox (operator opt-in: host_mode)",
                manifest.id,
                tool.id,
            )
        if (
            item.local_id in self.js_tools
            and declared is SandboxMode.HOST
            and entry.sandbox is SandboxMode.COMPARTMENT
            and not self.options.runs_on_host(manifest.id, item.local_id)
        ):
            reason = host_escape_reason(manifest.id, entry.entry, item.local_id)
            status = PluginToolStatus(tool.id, entry.entry, declared, False, resolved, reason)
            self.tools.append(status)
            return RegisteredTool(tool, refusing_binding(reason), reason)
        if item.local_id in self.js_tools:
            spec = js_spec(
                manifest,
                entry,
                tool,
                env=self._snapshot(tool.env),
                config=thaw(self.options.config),
                generation=self.generation,
                sandbox=self.sandbox,
            )
            binding = js_binding(self.js_hosts, spec, tool, item.local_id, self.sandbox)
            self.tools.append(
                PluginToolStatus(
                    tool.id, entry.entry, declared, opted_in, resolved, javascript=spec.mode
                )
            )
            # Its fs prefixes are bound into the host's bubblewrap and read by ctx.fs: the
            # gateway's own folders (known only now) never are.
            refused = None
            if self.sandbox is not None and spec.mode == SandboxMode.COMPARTMENT.value:
                refused = self.sandbox.fs_refusal(tool)
            return RegisteredTool(tool, binding, refused)
        in_worker = item.local_id in self.in_worker or (
            not opted_in and declared is SandboxMode.COMPARTMENT and worker_runs(self.sandbox, tool)
        )
        if in_worker and self.sandbox is not None:
            # Listed by the worker, or a compartment override in a host entry: the sandboxed
            # worker runs execute (no opt-in needed).
            reason = self.sandbox.unavailable_reason(tool)
            binding = worker_binding(
                self.sandbox,
                manifest,
                entry,
                tool,
                item.local_id,
                env=self._snapshot(tool.env),
                config=thaw(self.options.config),
            )
        else:
            if declared is SandboxMode.COMPARTMENT and not opted_in:
                reason = (
                    "it declares sandbox 'compartment', which this gateway cannot enforce here "
                    f"({no_worker_reason(self.sandbox, tool)}), so it does not run rather than "
                    "run without a sandbox. The operator can run it on the host (no isolation) "
                    f"by adding 'options: {{host_mode: [{item.local_id}]}}' (or 'host_mode: "
                    f"true') to plugin {manifest.id} under 'sources:' in toolgate.yaml."
                )
            env = self._snapshot(tool.env)
            context = PluginToolContext(
                env=env,
                logger=PluginLogger(logging.getLogger(f"toolgate.tool.{tool.id}"), env.values()),
                tool_id=tool.id,
            )
            binding = (
                execute_binding(item.execute, context)
                if reason is None
                else refusing_binding(reason)
            )
        self.tools.append(
            PluginToolStatus(
                id=tool.id,
                entry=entry.entry,
                declared_sandbox=declared,
                host_opt_in=opted_in,
                resolved=resolved,
                unavailable_reason=reason,
                in_worker=in_worker and self.sandbox is not None,
                worker_unsandboxed=(
                    in_worker and self.sandbox is not None and self.sandbox.layer().name is None
                ),
            )
        )
        return RegisteredTool(tool, binding, reason)

    def _check_host_mode_names(self, manifest: PluginManifest, local_ids: set[str]) -> None:
        names = self.options.host_mode
        if isinstance(names, bool) or not self.all_imported:
            return  # unknown ids cannot be told apart from tools that did not load
        full = {f"{manifest.id}:{local}" for local in local_ids}
        for name in sorted(names):
            if name not in local_ids and name not in full:
                provided = ", ".join(sorted(local_ids)) or "none"
                self.diagnostics.append(
                    Diagnostic(
                        self.location,
                        "options/host_mode",
                        f"host_mode names {name!r}, which plugin {manifest.id} does not provide "
                        f"(its tools: {provided})",
                        Severity.WARNING,
                    )
                )
