"""Plugin entries written in JavaScript or TypeScript: listed and run by the JavaScript host.

:func:`js_entry_tools` asks a host process (:mod:`toolgate.backends.js_host`) for the tools of
an entry (static ``tools`` and ``resolveTools``) and checks their declarative fields as any tool
object (:func:`~toolgate.formats.plugin.tool.build_plugin_tool`: annotations → side-effect
level, ``timeout`` in ms, default 60 s). :func:`js_binding` runs ``execute`` on a warm host.

A ``compartment`` entry needs no process sandbox: the SES compartment is its sandbox (globals
are the format's safe list plus what the permissions grant). Its ``fetch`` goes through an egress
proxy opened for the call (:class:`~toolgate.sandbox.egress.EgressProxy`: host allow-list,
resolved-address check, metadata never, redirects re-checked), whose records the outcome's
``metadata["sandbox"]`` (and so the audit) carries. A ``host`` entry runs in a plain Node.js
process with full access and is labelled so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...backends.js_host import DEFAULT_HEAP_MB, JsHosts, JsHostSpec, describe_entry
from ...model import SandboxMode, Tool
from ...python.binding import PythonBinding
from ...sandbox.egress import EgressProxy
from .._common.diagnostics import Report
from .._common.js_host import confinement, egress_options
from .manifest import PluginManifest, ToolsEntry
from .tool import PluginTool, listed_tools

if TYPE_CHECKING:
    from ...sandbox.runner import Sandbox

__all__ = [
    "host_escape_reason",
    "js_binding",
    "js_entry_tools",
    "js_spec",
]

_CONTEXT_KEYWORD = "__toolgate_context__"
_METADATA_KEYWORD = "__toolgate_metadata__"


def js_spec(
    manifest: PluginManifest,
    entry: ToolsEntry,
    tool: Tool | None,
    *,
    env: Mapping[str, str],
    config: Mapping[str, Any],
    generation: str,
    sandbox: Sandbox | None = None,
) -> JsHostSpec:
    """The host process of ``entry`` for ``tool`` (its own sandbox and permissions, which may
    override the entry's), or for the entry itself when ``tool`` is ``None``; inside bubblewrap
    too when ``sandbox`` works here."""
    mode = entry.sandbox if tool is None else tool.sandbox.mode
    permissions = entry.permissions if tool is None else tool.sandbox.permissions
    confined = None
    if mode is SandboxMode.COMPARTMENT:
        key = (str(entry.module_file), json.dumps(str(permissions)))
        where = f"{(tool.source.location if tool else None) or manifest.path}: permissions.fs"
        confined = confinement(
            sandbox, tool, network=bool(permissions.network), key=key, where=where
        )
    return JsHostSpec(
        plugin_id=manifest.id,
        root=manifest.folder,
        entry=entry.module_file,
        mode=mode.value,
        permissions=permissions,
        env=dict(env),
        config=dict(config),
        generation=generation,
        confinement=confined,
        # The operator's memory limit of sandboxed calls, as the host's JavaScript heap.
        heap_mb=sandbox.limits.memory_bytes // (1024 * 1024)
        if sandbox is not None
        else DEFAULT_HEAP_MB,
    )


def _in_host(arguments: Mapping[str, Any], context: Any) -> Any:
    """The ``execute`` of a tool listed by the JavaScript host: never called here (its binding
    runs the plugin's own in the host)."""
    raise RuntimeError("this tool runs in the JavaScript host only")


def _digest(root: Path) -> str:
    """The plugin's code, fingerprinted (its JS/TS files outside ``node_modules``): approvals
    bound to a definition end when the code changes."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if "node_modules" in path.parts or path.suffix not in (".ts", ".mts", ".js", ".mjs"):
            continue
        with contextlib.suppress(OSError):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def js_entry_tools(
    manifest: PluginManifest,
    entry: ToolsEntry,
    spec: JsHostSpec,
    *,
    timeout: float,
    report: Report,
) -> tuple[list[PluginTool], Any]:
    """The tools of a JavaScript entry as its host lists them (checked like tool objects,
    problems on ``report``), and the alerts of its ``resolveTools``. Raises ``ToolError`` when
    the host cannot run or the entry fails to load (the message names the file and line)."""
    answer = describe_entry(spec, timeout)
    tools = listed_tools(
        answer.get("tools"),
        manifest=manifest,
        entry=entry,
        report=report,
        stand_in=_in_host,
        digest=_digest(manifest.folder),
        reference=f"{entry.entry}:execute (JavaScript)",
    )
    return tools, answer.get("alerts")


def js_binding(
    hosts: JsHosts, spec: JsHostSpec, tool: Tool, local_id: str, sandbox: Sandbox | None
) -> PythonBinding:
    """An async binding running ``execute`` of ``local_id`` on a warm host of ``spec``.

    The outcome's ``metadata["sandbox"]`` says what ran it: the SES compartment (with the
    egress records of the call when it has ``network``), or the host label.
    """
    network = spec.mode == SandboxMode.COMPARTMENT.value and bool(spec.permissions.network)

    async def run_in_host(**arguments: Any) -> Any:
        context = arguments.pop(_CONTEXT_KEYWORD)
        metadata = arguments.pop(_METADATA_KEYWORD)
        if spec.mode != SandboxMode.COMPARTMENT.value:
            metadata["sandbox"] = {"mode": "host", "enforced": False, "runtime": "node"}
            return await hosts.execute(spec, tool.id, local_id, arguments, timeout=tool.timeout)
        described: dict[str, Any] = {"mode": "compartment", "enforced": True, "runtime": "ses"}
        if spec.confinement is not None:
            # The outer layer: bubblewrap, or Landlock + seccomp where bubblewrap cannot start.
            layer = spec.confinement.layer
            described["process_sandbox"] = "bwrap" if layer == "bubblewrap" else layer
        metadata["sandbox"] = described
        if not network:
            return await hosts.execute(spec, tool.id, local_id, arguments, timeout=tool.timeout)
        async with EgressProxy.start(
            spec.permissions,
            tool_id=tool.id,
            call_id=context.call_id or "",
            **egress_options(spec, sandbox, tool.id),
        ) as proxy:
            try:
                return await hosts.execute(
                    spec,
                    tool.id,
                    local_id,
                    arguments,
                    timeout=tool.timeout,
                    egress=str(proxy.socket_path),
                )
            finally:
                # Also when it failed or timed out: the connections it made are audited.
                described["egress"] = [dataclasses.asdict(event) for event in proxy.events]

    run_in_host.__qualname__ = f"plugin tool {tool.id} (JavaScript host)"
    return PythonBinding(
        func=run_in_host,
        is_async=True,
        context_param=_CONTEXT_KEYWORD,
        metadata_param=_METADATA_KEYWORD,
    )


def host_escape_reason(plugin_id: str, entry: str, local_id: str) -> str:
    """Why a tool object of a compartment entry that asks for ``sandbox: 'host'`` does not run:
    a tool never leaves its entry's compartment on its own (the manifest the operator reviewed
    says compartment); only the operator's ``host_mode`` moves it to the host."""
    return (
        f"it asks for sandbox 'host', but its entry {entry!r} runs in a compartment, and a tool "
        "never leaves it on its own. The operator can run it on the host (no isolation) by "
        f"adding 'options: {{host_mode: [{local_id}]}}' to plugin {plugin_id} under 'sources:' "
        "in toolgate.yaml."
    )
