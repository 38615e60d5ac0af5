"""The sandboxed worker of compartment-mode Python tools (plugins): runs INSIDE bwrap.

This file is a standalone program (standard library only; it never imports toolgate, which the
sandbox need not contain). The gateway starts it under the sandbox with the interpreter it runs
on, one process per call, and writes one JSON request to its stdin:

``{"op": "execute", "folder": ..., "module": [...], "tool": "<local id>", "tool_id": ...,
"input": {...}, "env": {...}, "config": {...}, "grants": {"time": bool, "random": bool}}``
    Import the plugin's entry module (as a submodule of a synthetic package whose path is the
    plugin folder, so relative imports work), find the tool object whose ``id`` is ``tool`` in
    ``tools`` or, failing that, in what ``resolve_tools(ctx)`` returns, and call
    ``execute(input, ctx)`` (awaiting it when it is async).

``{"op": "describe", ...}`` (no ``tool``/``input``)
    Import the entry and return the declarative fields of every tool object (everything but
    ``execute``), for loading a plugin's tool list without importing it on the host.

The answer is one JSON object on the *original* stdout: ``{"result": ...}``, ``{"tools": [...],
"alerts": [...]}`` or ``{"error": "..."}``. Before any plugin code runs, file descriptor 1 is
pointed at stderr, so a plugin's ``print`` cannot forge the answer; the answer goes to a
private duplicate of the original stdout.

``ctx`` has ``env`` (the declared keys), ``logger`` (console-style, to stderr), ``tool_id``, and
``now()`` / ``random`` only when the tool was granted ``time`` / ``random``. Those two are
contracts for well-behaved code, not a boundary: Python code can always import ``time``.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import random as _random
import sys
import time
from typing import Any

PACKAGE = "_toolgate_plugin"
_DECLARATIVE = (
    "id",
    "name",
    "description",
    "parameters",
    "timeout",
    "sandbox",
    "permissions",
    "annotations",
)


class Logger:
    """The plugin format's console-style ``logger``; lines go to stderr (the gateway's log tail)."""

    def _emit(self, level: str, parts: tuple[object, ...]) -> None:
        sys.stderr.write(f"[{level}] " + " ".join(str(p) for p in parts) + "\n")
        sys.stderr.flush()

    def log(self, *parts: object) -> None:
        self._emit("info", parts)

    def info(self, *parts: object) -> None:
        self._emit("info", parts)

    def debug(self, *parts: object) -> None:
        self._emit("debug", parts)

    def warn(self, *parts: object) -> None:
        self._emit("warning", parts)

    warning = warn

    def error(self, *parts: object) -> None:
        self._emit("error", parts)


class Context:
    """``ctx`` of ``execute(input, ctx)`` and ``resolve_tools(ctx)``."""

    def __init__(self, request: dict[str, Any]) -> None:
        grants = request.get("grants") or {}
        self.env: dict[str, str] = dict(request.get("env") or {})
        self.logger = Logger()
        self.tool_id: str = request.get("tool_id") or ""
        self.plugin_config: dict[str, Any] = dict(request.get("config") or {})
        self.pluginConfig = self.plugin_config
        # Granted capabilities only (a contract, see the module documentation).
        self.now = time.time if grants.get("time") else None
        self.random = _random.SystemRandom() if grants.get("random") else None


def _field(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return value.get(key)
    return getattr(value, key, None)


def _import(request: dict[str, Any]) -> Any:
    spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
    spec.submodule_search_locations = [request["folder"]]
    sys.modules[PACKAGE] = importlib.util.module_from_spec(spec)
    return importlib.import_module(".".join((PACKAGE, *request["module"])))


def _finish(value: Any) -> Any:
    if inspect.isawaitable(value):

        async def wait() -> Any:
            return await value

        return asyncio.run(wait())
    return value


def _all_tools(module: Any, context: Context) -> tuple[list[Any], list[Any]]:
    tools = list(getattr(module, "tools", None) or [])
    alerts: list[Any] = []
    resolve = getattr(module, "resolve_tools", None) or getattr(module, "resolveTools", None)
    if callable(resolve):
        resolved = _finish(resolve(context))
        tools.extend(_field(resolved, "tools") or [])
        alerts.extend(_field(resolved, "alerts") or [])
    return tools, alerts


def _execute(request: dict[str, Any]) -> dict[str, Any]:
    context = Context(request)
    module = _import(request)
    wanted = request["tool"]
    found = [t for t in getattr(module, "tools", None) or [] if _field(t, "id") == wanted]
    if not found:
        found = [t for t in _all_tools(module, context)[0] if _field(t, "id") == wanted]
    if not found:
        return {"error": f"the plugin no longer declares a tool with id {wanted!r}"}
    execute = _field(found[0], "execute")
    return {"result": _finish(execute(dict(request.get("input") or {}), context))}


def _describe(request: dict[str, Any]) -> dict[str, Any]:
    context = Context(request)
    tools, alerts = _all_tools(_import(request), context)
    described = [
        {key: _field(tool, key) for key in _DECLARATIVE if _field(tool, key) is not None}
        | {"execute": callable(_field(tool, "execute"))}
        for tool in tools
    ]
    return {"tools": described, "alerts": alerts}


def main() -> int:
    """Read the request, answer on the original stdout; 0 unless the answer cannot be written."""
    answer_fd = os.dup(1)
    os.dup2(2, 1)  # the plugin's prints go to stderr
    try:
        request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
        answer = _describe(request) if request.get("op") == "describe" else _execute(request)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported as the answer
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        text = json.dumps(answer, default=str)
    except ValueError as exc:
        text = json.dumps({"error": f"the result is not JSON: {exc}"})
    with os.fdopen(answer_fd, "w", encoding="utf-8") as out:
        out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
