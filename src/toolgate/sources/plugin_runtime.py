"""Running a Pandora plugin's Python on the host: importing its entry, ``resolve_tools`` and the
adapter that turns ``execute(input, ctx)`` into a :class:`~toolgate.python.PythonBinding`.

Everything here runs plugin code, so :mod:`toolgate.sources.plugins` calls it only for entries
the operator allowed to run on the host (``sandbox: host``, or the ``host_mode`` opt-in).

* **Importing.** Each plugin folder becomes a synthetic package (``_toolgate_plugin_<hash>``,
  its ``__path__`` the folder), and the entry is imported as a submodule of it, so relative
  imports between the plugin's modules work (``from .weather import weather_tool``) without
  putting the folder on ``sys.path``. Every load imports afresh: the package's modules are
  dropped from ``sys.modules`` first (once per load, so the entries of one plugin share its
  modules), and edited code is picked up by a reload.
* **``resolve_tools(ctx)``** (or the seed's spelling ``resolveTools``), sync or ``async``, runs
  in its own thread with a deadline, so a hanging plugin cannot stall loading forever (Python
  cannot stop the thread; it is a daemon and is abandoned).
* **``execute(input, ctx)``**: ``input`` is a plain ``dict`` of the validated arguments; ``ctx``
  is a :class:`PluginToolContext` with ``env`` (the declared keys only, taken when the plugin was
  loaded) and ``logger`` (console-style, records to the ``toolgate.tool.<id>`` logger, i.e. the
  operator's log, never the model).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import logging
import sys
import threading
import types
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..backends.base import BackendUnavailableError
from ..errors import ToolError
from ..loaders.plugin import PluginManifest, ToolsEntry
from ..python.binding import PythonBinding

__all__ = [
    "DEFAULT_RESOLVE_TIMEOUT",
    "PluginLogger",
    "PluginToolContext",
    "ResolveTimeoutError",
    "ResolveToolsContext",
    "call_resolve_tools",
    "execute_binding",
    "forget_modules",
    "import_entry",
    "package_name",
    "refusing_binding",
]

#: Seconds ``resolve_tools`` may take before the plugin's resolved tools are given up on.
DEFAULT_RESOLVE_TIMEOUT = 30.0

_IMPORT_LOCK = threading.Lock()


class PluginLogger:
    """The seed's ``logger``: ``log``/``info``/``warn``/``error``/``debug`` like a console, each
    joining its arguments with spaces. Records go to the logging system (the operator's log)."""

    __slots__ = ("logger",)

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        """The underlying :class:`logging.Logger` (``toolgate.tool.<tool id>``)."""

    def _emit(self, level: int, parts: tuple[object, ...]) -> None:
        if self.logger.isEnabledFor(level):
            # No %-formatting of plugin text: the message is passed as a finished string.
            self.logger.log(level, "%s", " ".join(str(part) for part in parts), stacklevel=3)

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
    """The seed's ``{ env, logger }`` handed to ``execute(input, ctx)``."""

    env: Mapping[str, str]
    """Only the environment variables the tool declared (``permissions.env``) that were set when
    the plugin was loaded (a snapshot: later changes are not seen)."""
    logger: PluginLogger
    """Console-style logger named after the tool; records go to the operator's log."""
    tool_id: str
    """The namespaced id (``@scope/weather:weather``)."""


@dataclass(frozen=True, slots=True)
class ResolveToolsContext:
    """The seed's ``ResolveToolsContext`` handed to ``resolve_tools(ctx)``."""

    plugin_config: Mapping[str, Any]
    """The operator's settings for the plugin (``options.config`` of its ``sources:`` entry)."""
    env: Mapping[str, str]
    """The declared environment variables of the entry (``permissions.env``) that are set."""
    logger: PluginLogger
    """Console-style logger named after the plugin."""

    @property
    def pluginConfig(self) -> Mapping[str, Any]:
        """``plugin_config`` under the seed's name."""
        return self.plugin_config


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
    as one ``dict``, as the seed's ``execute(input, ctx)`` expects, so no argument name can clash
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
