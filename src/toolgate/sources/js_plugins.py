"""Plugin entries written in JavaScript or TypeScript: listed and run by the JavaScript host.

:func:`js_entry_tools` asks a host process (:mod:`toolgate.backends.js_host`) for the tools of
an entry (static ``tools`` and ``resolveTools``) and checks their declarative fields as any tool
object (:func:`~toolgate.loaders.plugin_tool.build_plugin_tool`: annotations → side-effect
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
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backends.js_host import (
    DEFAULT_HEAP_MB,
    JsConfinement,
    JsHosts,
    JsHostSpec,
    describe_entry,
)
from ..loaders.plugin import PluginManifest, ToolsEntry
from ..loaders.plugin_tool import PluginTool, listed_tools
from ..loaders.tool_folder_fields import Report
from ..model import SandboxMode, Tool
from ..path_policy import run_folder
from ..python.binding import PythonBinding
from ..sandbox.addresses import tool_grant
from ..sandbox.egress import EgressProxy

if TYPE_CHECKING:
    from ..sandbox.runner import Sandbox

__all__ = [
    "confinement",
    "egress_options",
    "host_escape_reason",
    "js_binding",
    "js_entry_tools",
    "js_spec",
]

_CONTEXT_KEYWORD = "__toolgate_context__"
_METADATA_KEYWORD = "__toolgate_metadata__"


_EGRESS_DIRS: dict[tuple[str, ...], Path] = {}


def confinement(
    sandbox: Sandbox | None,
    tool: Tool | None,
    *,
    network: bool,
    key: tuple[str, ...],
    where: str = "permissions.fs",
) -> JsConfinement | None:
    """Bubblewrap around a compartment host, where it works and the operator's namespaces put
    the tool in a compartment (``None`` otherwise: the SES compartment alone). ``key`` names
    the host, for the private folder its calls' egress sockets are made in."""
    if sandbox is None or (tool is not None and sandbox.mode_for(tool) is SandboxMode.HOST):
        return None
    host = sandbox.host()
    if not host.works or host.bwrap is None:
        return None
    egress = None
    if network:
        egress = _EGRESS_DIRS.get(key)
        if egress is None or not egress.is_dir():
            # In the gateway's run folder: a state folder no sandbox is shown (path_policy).
            made = tempfile.mkdtemp(prefix="toolgate-js-egress-", dir=run_folder())
            egress = _EGRESS_DIRS[key] = Path(made)
    return JsConfinement(host.bwrap, tuple(sandbox.protected), egress, sandbox, where)


def egress_options(spec: JsHostSpec, sandbox: Sandbox | None, tool_id: str) -> dict[str, Any]:
    """The keyword arguments of :meth:`EgressProxy.start` for one call of ``tool_id`` on a host
    of ``spec``: the socket folder bound into its bubblewrap, and the operator's denied ports,
    CIDR grant (``sandbox.network_grants``) and resolver (``sandbox.hosts``). Shared by plugin
    entries and capability tools modules, so both reach the network under the same rules."""
    options: dict[str, Any] = {}
    if spec.confinement is not None and spec.confinement.egress_dir is not None:
        options["socket_dir"] = spec.confinement.egress_dir
    if sandbox is not None:
        options["deny_ports"] = sandbox.deny_ports
        options["cidr_grants"] = tool_grant(sandbox.cidr_grants, tool_id)
        if sandbox.resolver is not None:
            options["resolver"] = sandbox.resolver
    return options


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
            described["process_sandbox"] = "bwrap"
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
