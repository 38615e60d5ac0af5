"""Running a plugin's Python on the host: importing its entry, ``resolve_tools`` and the
adapter that turns ``execute(input, ctx)`` into a :class:`~toolgate.python.PythonBinding`.

Everything here runs plugin code, so :mod:`toolgate.formats.plugin.source` calls it only for entries
the operator allowed to run on the host (``sandbox: host``, or the ``host_mode`` opt-in).

* **Importing.** Each plugin folder becomes a synthetic package (``_toolgate_plugin_<hash>``,
  its ``__path__`` the folder), and the entry is imported as a submodule of it, so relative
  imports between the plugin's modules work (``from .weather import weather_tool``) without
  putting the folder on ``sys.path``. Every load imports afresh: the package's modules are
  dropped from ``sys.modules`` first (once per load, so the entries of one plugin share its
  modules), and edited code is picked up by a reload.
* **``resolve_tools(ctx)``** (or the JavaScript spelling ``resolveTools``), sync or ``async``, runs
  in its own thread with a deadline, so a hanging plugin cannot stall loading forever (Python
  cannot stop the thread; it is a daemon and is abandoned).
* **``execute(input, ctx)``**: ``input`` is a plain ``dict`` of the validated arguments; ``ctx``
  is a :class:`PluginToolContext` with ``env`` (the declared keys only, taken when the plugin was
  loaded) and ``logger`` (console-style, records to the ``toolgate.tool.<id>`` logger, i.e. the
  operator's log, never the model).

Compartment entries never run here: :func:`describe_in_worker` and :func:`worker_binding` hand
them to the sandboxed worker (:mod:`toolgate.sandbox.compartment`), one process per request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import logging
import sys
import threading
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ...backends.base import BackendUnavailableError
from ...backends.processes import run_process
from ...errors import ConfigError, ToolError
from ...model import ImplementationKind, SandboxMode, SandboxSpec, SourceFormat, Tool, ToolSource
from ...python.binding import PythonBinding
from ...redaction import record_masker
from ...sandbox.compartment import WorkerRequest, run_worker
from ...sandbox.runner import Sandbox, SandboxUnavailableError
from .._common.diagnostics import Report
from .manifest import PluginManifest, ToolsEntry
from .tool import PluginTool, listed_tools

__all__ = [
    "DEFAULT_RESOLVE_TIMEOUT",
    "PLUGIN_OPTIONS",
    "PluginLogger",
    "PluginOptions",
    "PluginToolContext",
    "ResolveTimeoutError",
    "ResolveToolsContext",
    "call_resolve_tools",
    "describe_in_worker",
    "entry_tool",
    "execute_binding",
    "forget_modules",
    "import_entry",
    "no_worker_reason",
    "package_name",
    "refusing_binding",
    "worker_binding",
    "worker_entry_tools",
    "worker_runs",
]

#: Seconds ``resolve_tools`` may take before the plugin's resolved tools are given up on.
DEFAULT_RESOLVE_TIMEOUT = 30.0
#: The keys a plugin's ``options:`` may hold.
PLUGIN_OPTIONS: tuple[str, ...] = ("host_mode", "config", "resolve_timeout")

_IMPORT_LOCK = threading.Lock()


class PluginLogger:
    """The format's ``logger``: ``log``/``info``/``warn``/``error``/``debug`` like a console, each
    joining its arguments with spaces. Records go to the logging system (the operator's log)."""

    __slots__ = ("logger", "masker")

    def __init__(self, logger: logging.Logger, secrets: Iterable[str] = ()) -> None:
        self.logger = logger
        """The underlying :class:`logging.Logger` (``toolgate.tool.<tool id>``)."""
        self.masker = record_masker(secrets)
        """The log is a record: the values of the tool's environment (whole, encoded, in
        pieces) and the credentials of URLs are masked in it."""

    def _emit(self, level: int, parts: tuple[object, ...]) -> None:
        if self.logger.isEnabledFor(level):
            # No %-formatting of plugin text: the message is passed as a finished string.
            text = self.masker.sub(" ".join(str(part) for part in parts))
            self.logger.log(level, "%s", text, stacklevel=3)

    def log(self, *parts: object) -> None:
        """``console.log``: an info record."""
        self._emit(logging.INFO, parts)

    def info(self, *parts: object) -> None:
        """An info record."""
        self._emit(logging.INFO, parts)

    def debug(self, *parts: object) -> None:
        """A debug record."""
        self._emit(logging.DEBUG, parts)

    def warn(self, *parts: object) -> None:
        """A warning record."""
        self._emit(logging.WARNING, parts)

    warning = warn

    def error(self, *parts: object) -> None:
        """An error record."""
        self._emit(logging.ERROR, parts)


@dataclass(frozen=True, slots=True)
class PluginToolContext:
    """The plugin format's ``{ env, logger }`` handed to ``execute(input, ctx)``."""

    env: Mapping[str, str]
    """Only the environment variables the tool declared (``permissions.env``) that were set when
    the plugin was loaded (a snapshot: later changes are not seen)."""
    logger: PluginLogger
    """Console-style logger named after the tool; records go to the operator's log."""
    tool_id: str
    """The namespaced id (``@scope/weather:weather``)."""


@dataclass(frozen=True, slots=True)
class ResolveToolsContext:
    """The plugin format's ``ResolveToolsContext`` handed to ``resolve_tools(ctx)``."""

    plugin_config: Mapping[str, Any]
    """The operator's settings for the plugin (``options.config`` of its ``sources:`` entry)."""
    env: Mapping[str, str]
    """The declared environment variables of the entry (``permissions.env``) that are set."""
    logger: PluginLogger
    """Console-style logger named after the plugin."""

    @property
    def pluginConfig(self) -> Mapping[str, Any]:
        """``plugin_config`` under the plugin format's name."""
        return self.plugin_config


@dataclasses.dataclass(frozen=True, slots=True)
class PluginOptions:
    """The operator's settings for one plugin (``options:`` of its ``sources:`` entry)."""

    host_mode: bool | frozenset[str] = False
    """``True``: run every ``compartment`` tool of the plugin on the host; a set of tool ids:
    only those; ``False``: none (they stay unavailable / not loaded)."""
    config: Mapping[str, Any] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    """``pluginConfig`` for ``resolve_tools``."""
    resolve_timeout: float = DEFAULT_RESOLVE_TIMEOUT
    """Seconds ``resolve_tools`` may take."""

    @classmethod
    def parse(cls, options: Mapping[str, Any], where: str) -> PluginOptions:
        """Check ``options``; raises :class:`ConfigError` naming ``where`` and the key."""
        unknown = sorted(str(key) for key in options if key not in PLUGIN_OPTIONS)
        if unknown:
            raise ConfigError(
                f"{where}: unknown plugin option {', '.join(map(repr, unknown))}; "
                f"known options: {', '.join(PLUGIN_OPTIONS)}"
            )
        host_mode = options.get("host_mode", False)
        parsed_host: bool | frozenset[str]
        if isinstance(host_mode, bool):
            parsed_host = host_mode
        elif isinstance(host_mode, list) and all(
            isinstance(item, str) and item.strip() for item in host_mode
        ):
            parsed_host = frozenset(item.strip() for item in host_mode)
        else:
            raise ConfigError(
                f"{where}: host_mode must be true, false, or a list of tool ids "
                f"(e.g. [weather]), not {host_mode!r}"
            )
        config = options.get("config", {})
        if not isinstance(config, Mapping):
            raise ConfigError(
                f"{where}: config must be a mapping (the plugin's settings), not {config!r}"
            )
        timeout = options.get("resolve_timeout", DEFAULT_RESOLVE_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ConfigError(
                f"{where}: resolve_timeout must be a positive number of seconds, not {timeout!r}"
            )
        return cls(parsed_host, MappingProxyType(dict(config)), float(timeout))

    def runs_on_host(self, plugin_id: str, local_id: str) -> bool:
        """Whether the operator opted this tool in to host mode."""
        if isinstance(self.host_mode, bool):
            return self.host_mode
        return local_id in self.host_mode or f"{plugin_id}:{local_id}" in self.host_mode


def package_name(manifest: PluginManifest) -> str:
    """The synthetic package a plugin's modules are imported under (stable per folder)."""
    folder_hash = hashlib.sha256(str(manifest.folder).encode("utf-8")).hexdigest()[:16]
    return f"_toolgate_plugin_{folder_hash}"


def forget_modules(manifest: PluginManifest) -> None:
    """Drop the plugin's modules from ``sys.modules``, so the next import reads the files again
    (called once per load, before the first entry is imported)."""
    package = package_name(manifest)
    with _IMPORT_LOCK:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]


def import_entry(manifest: PluginManifest, entry: ToolsEntry) -> types.ModuleType:
    """Import the entry module of ``entry`` as a submodule of the plugin's package (created on
    first use). Runs the plugin's code; raises whatever it raises."""
    package = package_name(manifest)
    with _IMPORT_LOCK:
        if package not in sys.modules:
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [str(manifest.folder)]
            root = importlib.util.module_from_spec(spec)
            root.__doc__ = f"The modules of the toolgate plugin {manifest.id} ({manifest.folder})."
            sys.modules[package] = root
            importlib.invalidate_caches()
        return importlib.import_module(".".join((package, *entry.module_parts)))


class ResolveTimeoutError(TimeoutError):
    """``resolve_tools`` did not return within its deadline."""


async def _awaited(value: Awaitable[Any]) -> Any:
    return await value


def call_resolve_tools(
    resolve: Callable[[ResolveToolsContext], Any], context: ResolveToolsContext, timeout: float
) -> Any:
    """Call ``resolve(context)`` (awaiting it when it is async) in a daemon thread; its result,
    or what it raised. Raises :class:`ResolveTimeoutError` after ``timeout`` seconds."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            value = resolve(context)
            if inspect.isawaitable(value):
                value = asyncio.run(_awaited(value))
            outcome["value"] = value
        except BaseException as exc:  # noqa: BLE001 - handed to the loading thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="toolgate-resolve-tools", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise ResolveTimeoutError(f"resolve_tools did not return within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def is_async_callable(func: Callable[..., Any]) -> bool:
    """True for ``async def`` functions, partials of them and objects with an async
    ``__call__``."""
    if inspect.iscoroutinefunction(func):
        return True
    call = getattr(func, "__call__", None)  # noqa: B004 - callable objects
    return call is not None and inspect.iscoroutinefunction(call)


def _finish(awaitable: Awaitable[Any], tool_id: str) -> Any:
    """The value of an awaitable a *synchronous* ``execute`` returned (a lambda around an async
    function). Runs it on a private loop; refuses when this thread already runs one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(awaitable))
    if inspect.iscoroutine(awaitable):
        awaitable.close()
    raise ToolError(
        f"Tool {tool_id} is misdeclared: its execute is a plain function that returned an "
        "awaitable inside a running event loop. The plugin should declare it 'async def'."
    )


def execute_binding(execute: Callable[..., Any], context: PluginToolContext) -> PythonBinding:
    """A :class:`PythonBinding` calling ``execute(arguments, context)``.

    The backend passes the validated arguments as keywords; the adapter hands them to the plugin
    as one ``dict``, as the format's ``execute(input, ctx)`` expects, so no argument name can clash
    with the context.
    """
    if is_async_callable(execute):

        async def run_async(**arguments: Any) -> Any:
            return await execute(dict(arguments), context)

        run_async.__qualname__ = f"plugin tool {context.tool_id}"
        return PythonBinding(func=run_async, is_async=True)

    def run(**arguments: Any) -> Any:
        result = execute(dict(arguments), context)
        if inspect.isawaitable(result):
            return _finish(result, context.tool_id)
        return result

    run.__qualname__ = f"plugin tool {context.tool_id}"
    return PythonBinding(func=run, is_async=False)


def refusing_binding(reason: str) -> PythonBinding:
    """A binding for a tool that must not run (a ``compartment`` tool without the host-mode
    opt-in): the registry already marks it unavailable; this fails closed should anything call
    it regardless."""

    def refuse(**arguments: Any) -> Any:
        raise BackendUnavailableError(reason)

    return PythonBinding(func=refuse, is_async=False)


# -- compartment entries: the sandboxed worker -------------------------------------------------

#: The keywords the Python backend passes the call's ToolContext and its outcome metadata under
#: (set after the arguments, so an argument of the same name cannot stand in for them).
_CONTEXT_KEYWORD = "__toolgate_context__"
_METADATA_KEYWORD = "__toolgate_metadata__"


def entry_tool(manifest: PluginManifest, entry: ToolsEntry, timeout: float) -> Tool:
    """The stand-in tool a ``describe`` request of ``entry`` runs as: the entry's own sandbox
    and permissions (its tools are not known before the worker lists them)."""
    return Tool(
        id=f"{manifest.id}:{'.'.join(entry.module_parts) or 'entry'}",
        description=f"the tool list of entry {entry.entry!r}",
        input_schema={"type": "object"},
        kind=ImplementationKind.PYTHON,
        timeout=timeout,
        env=entry.permissions.env,
        sandbox=SandboxSpec(SandboxMode.COMPARTMENT, entry.permissions),
        source=ToolSource(SourceFormat.PLUGIN, str(manifest.path)),
    )


def worker_runs(sandbox: Sandbox | None, tool: Tool) -> bool:
    """Whether ``tool`` runs in the worker: the gateway has a sandbox that puts the tool in a
    compartment, and either it works here or the operator chose ``unsandboxed_host``. In that
    case the worker runs on the host like a script tool would, and every outcome carries the
    ``unsandboxed-host`` label (:func:`worker_binding` records ``metadata["sandbox"]``)."""
    return (
        sandbox is not None
        and sandbox.mode_for(tool) is SandboxMode.COMPARTMENT
        and (sandbox.layer().name is not None or sandbox.config.unsandboxed_host)
    )


def describe_in_worker(
    sandbox: Sandbox,
    manifest: PluginManifest,
    entry: ToolsEntry,
    *,
    env: Mapping[str, str],
    config: Mapping[str, Any],
    timeout: float,
) -> Mapping[str, Any]:
    """``{"tools": [...], "alerts": [...]}``: the declarative fields of the entry's tool objects
    (static and resolved), listed by the sandboxed worker. Raises ``ToolError`` when it fails.

    Loading is synchronous and may happen on a running event loop, so the worker is awaited on
    a private loop in a thread of its own.
    """
    stand_in = entry_tool(manifest, entry, timeout)
    request = WorkerRequest(
        manifest.folder, entry.module_parts, stand_in.id, None, env=env, config=config
    )
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="toolgate-describe") as pool:
        future = pool.submit(
            asyncio.run, run_worker(sandbox, stand_in, request, runner=run_process)
        )
        return future.result()


def worker_binding(
    sandbox: Sandbox,
    manifest: PluginManifest,
    entry: ToolsEntry,
    tool: Tool,
    local_id: str,
    *,
    env: Mapping[str, str],
    config: Mapping[str, Any],
) -> PythonBinding:
    """An async :class:`PythonBinding` that runs ``execute`` of ``local_id`` in the sandboxed
    worker, one process per call, and returns its result.

    The call's outcome metadata receives ``sandbox`` (what was enforced, the egress proxy's
    allowed and refused connections, or the ``unsandboxed-host`` label), as for script tools,
    so the audit record carries it too.
    """
    permissions = tool.sandbox.permissions

    async def run_in_worker(**arguments: Any) -> Any:
        context = arguments.pop(_CONTEXT_KEYWORD)
        metadata = arguments.pop(_METADATA_KEYWORD)
        request = WorkerRequest(
            manifest.folder,
            entry.module_parts,
            tool.id,
            local_id,
            arguments,
            env=env,
            config=config,
            time=permissions.time,
            random=permissions.random,
        )
        try:
            answer = await run_worker(
                sandbox,
                tool,
                request,
                runner=run_process,
                workspace=context.workspace,
                metadata=metadata,
                call_id=context.call_id,
            )
        except SandboxUnavailableError as exc:
            # As for script tools: the call is refused as unavailable, not as a tool failure.
            raise BackendUnavailableError(str(exc)) from None
        return answer.get("result")

    run_in_worker.__qualname__ = f"plugin tool {tool.id} (sandboxed worker)"
    return PythonBinding(
        func=run_in_worker,
        is_async=True,
        context_param=_CONTEXT_KEYWORD,
        metadata_param=_METADATA_KEYWORD,
    )


def no_worker_reason(sandbox: Sandbox | None, tool: Tool) -> str:
    """Why a compartment entry or tool cannot run in the sandboxed worker (for messages)."""
    if sandbox is None:
        return "this gateway has no process sandbox"
    if sandbox.mode_for(tool) is SandboxMode.HOST:
        return "the operator's sandbox.namespaces puts its namespace in mode 'host'"
    problem = sandbox.layer().problem or "the sandbox does not work"
    return (
        f"{problem}; the operator's 'sandbox: {{unsandboxed_host: true}}' would run it in the "
        "worker on the host, labelled 'unsandboxed-host'"
    )


def _in_worker(arguments: Mapping[str, Any], context: Any) -> Any:
    """The ``execute`` of a tool listed by the worker: never called here (its binding runs the
    plugin's own in the sandbox)."""
    raise ToolError("this tool runs in its sandboxed worker only")


def _file_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def worker_entry_tools(
    sandbox: Sandbox,
    manifest: PluginManifest,
    entry: ToolsEntry,
    *,
    env: Mapping[str, str],
    config: Mapping[str, Any],
    timeout: float,
    report: Report,
) -> tuple[list[PluginTool], Any]:
    """The tools of a compartment entry as the sandboxed worker lists them (checked like tool
    objects, problems on ``report``), and the alerts of its ``resolve_tools``. Raises
    ``ToolError`` when the worker fails."""
    answer = describe_in_worker(sandbox, manifest, entry, env=env, config=config, timeout=timeout)
    # Fingerprinted by the module file: approvals bound to the definition end when it changes
    # (the plugin's functions are never seen in the gateway).
    tools = listed_tools(
        answer.get("tools"),
        manifest=manifest,
        entry=entry,
        report=report,
        stand_in=_in_worker,
        digest=_file_digest(entry.module_file),
        reference=f"{'.'.join(entry.module_parts)}:execute (sandboxed)",
    )
    return tools, answer.get("alerts")
