"""Capability tools modules written in JavaScript or TypeScript, run by the JavaScript host.

A capability whose ``main`` is a ``.js``/``.ts`` file is loaded by the host
(:mod:`toolgate.backends.js_host`, kind ``capability``) in an SES compartment with the plugin
format's
safe globals and no further permission. :func:`js_capability_tools` lists its ``tools`` as plain
definitions whose ``handler`` and ``approval.buildConfirmation`` call back into the host, so
:mod:`toolgate.formats.capability.source` checks and binds them exactly like Python ones: the
connection
gating, the masking of secrets in results and errors, the confirmation card.

``handler(input, ctx)`` runs on a warm host process; ``ctx`` holds the connection's
``secrets`` (this capability's only), its public ``config`` and ``capability``, sent with each
call and never put in the process's environment. ``buildConfirmation(input)`` runs in a
short-lived host process (the approval step asks synchronously).

**Permissions.** A capability manifest cannot declare any, so the operator grants them, in the
``permissions`` option of the capability's ``sources:`` entry (checked by
:func:`permissions_option`, the same fields and rules as a plugin manifest's ``permissions``):
``time``, ``random``, ``network`` (a ``fetch`` through toolgate's egress proxy, opened for each
call exactly as for a plugin's compartment tool: host allow-list, resolved-address check, metadata
never, redirects re-checked, ``sandbox.network_grants``; its records go to the outcome's
``metadata["sandbox"]`` and so to the audit), ``env`` (``ctx.env``, a snapshot taken at load) and
``fs`` (``ctx.fs``, read-only). Without the option a handler gets none of them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...backends.js_host import JsHosts, JsHostSpec, confirm_once, describe_entry
from ...errors import ConfigError, ToolError
from ...model import Permissions
from ...sandbox.egress import EgressProxy
from .._common.diagnostics import Report, Severity
from .._common.js_host import confinement, egress_options
from .._common.messages import got
from .._common.permissions import PERMISSION_FIELDS, parse_permissions, suggest
from .manifest import CapabilityManifest

if TYPE_CHECKING:
    from ...sandbox.runner import Sandbox

__all__ = ["LOAD_TIMEOUT", "JsHandler", "js_capability_tools", "permissions_option"]

log = logging.getLogger("toolgate.sources")

#: Seconds loading a tools module (or building one confirmation) may take.
LOAD_TIMEOUT = 30.0
#: Seconds a handler may run on the host, past which its process is replaced; the tool's own
#: timeout (the pipeline's) is normally shorter.
_HANDLER_DEADLINE = 600.0


def _digest(manifest: CapabilityManifest) -> str:
    """The tools module's folder code, fingerprinted: approvals end when it changes."""
    digest = hashlib.sha256()
    root = manifest.main.parent
    for path in sorted(root.rglob("*")):
        if "node_modules" in path.parts or path.suffix not in (".ts", ".mts", ".js", ".mjs"):
            continue
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """JSON-ready (settings may hold values JSON cannot; they are sent as text)."""
    return json.loads(json.dumps(value, default=str))


def permissions_option(value: Any, where: str, folder: Path) -> Permissions:
    """The ``permissions`` option of a capability source, checked like a plugin manifest's
    ``permissions`` (host names normalized, ``fs`` prefixes made absolute against ``folder``).
    Stricter than a manifest: an unknown field is an error, not a warning, since the operator
    who wrote it meant to grant something. Raises :class:`ConfigError` naming ``where`` (the
    source) and the field."""
    fields = ", ".join(PERMISSION_FIELDS)
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{where}: options.permissions must be a mapping with any of {fields}, {got(value)}"
        )
    for key in value:
        if key not in PERMISSION_FIELDS:
            hint = suggest(key, PERMISSION_FIELDS) if isinstance(key, str) else ""
            raise ConfigError(
                f"{where}: options.permissions has an unknown field {key!r}{hint}; "
                f"known fields: {fields}"
            )
    report = Report(where)
    permissions = parse_permissions(value, "options.permissions", folder, report)
    problems = [d for d in report.items if d.severity is Severity.ERROR]
    if permissions is None or problems:
        details = "; ".join(
            f"{(d.field or 'options.permissions').replace('/', '.')}: {d.message}" for d in problems
        )
        raise ConfigError(f"{where}: {details or 'options.permissions is not valid'}")
    for warning in report.items:
        log.warning("%s: %s: %s", where, warning.field, warning.message)
    return permissions


class JsHandler:
    """A tool's ``handler(input, ctx)``, run on a warm host of ``spec``. The capability source
    also hands it the call's outcome metadata, where it records what ran the handler (the SES
    compartment, bubblewrap) and, with ``network``, the egress proxy's records of the call."""

    def __init__(self, hosts: JsHosts, spec: JsHostSpec, name: str, sandbox: Sandbox | None):
        self.hosts = hosts
        self.spec = spec
        self.name = name
        self.tool_id = f"{spec.plugin_id}:{name}"
        self.sandbox = sandbox
        self.__qualname__ = f"{spec.entry.name}:{name} (JavaScript host)"

    async def __call__(
        self, input: Mapping[str, Any], ctx: Any, metadata: dict[str, Any] | None = None
    ) -> Any:
        context = {
            "secrets": dict(ctx.secrets),
            "config": _plain(dict(ctx.config)),
            "capability": ctx.capability,
            "connected": ctx.connected,
        }
        described: dict[str, Any] = {"mode": "compartment", "enforced": True, "runtime": "ses"}
        if self.spec.confinement is not None:
            # The outer layer: bubblewrap, or Landlock + seccomp where bubblewrap cannot start.
            layer = self.spec.confinement.layer
            described["process_sandbox"] = "bwrap" if layer == "bubblewrap" else layer
        if metadata is not None:
            metadata["sandbox"] = described
        run = self.hosts.execute
        arguments = (self.spec, self.tool_id, self.name, input)
        if not self.spec.permissions.network:
            return await run(*arguments, timeout=_HANDLER_DEADLINE, ctx=context)
        async with EgressProxy.start(
            self.spec.permissions,
            tool_id=self.tool_id,
            call_id=getattr(ctx, "call_id", "") or "",
            **egress_options(self.spec, self.sandbox, self.tool_id),
        ) as proxy:
            try:
                return await run(
                    *arguments,
                    timeout=_HANDLER_DEADLINE,
                    ctx=context,
                    egress=str(proxy.socket_path),
                )
            finally:
                # Also when it failed or timed out: the connections it made are audited.
                described["egress"] = [dataclasses.asdict(event) for event in proxy.events]


def _confirmation(spec: JsHostSpec, name: str) -> Callable[[Mapping[str, Any]], Any]:
    def build_confirmation(input: Mapping[str, Any]) -> Any:
        return confirm_once(spec, name, _plain(dict(input)), LOAD_TIMEOUT)

    return build_confirmation


def js_capability_tools(
    manifest: CapabilityManifest,
    hosts: JsHosts,
    sandbox: Sandbox | None = None,
    permissions: Permissions | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """The tool definitions of a JavaScript tools module (functions standing in for the host's)
    and the code's digest; the host runs inside bubblewrap too where ``sandbox`` works.
    ``permissions`` are the operator's grant (none when ``None``); ``ctx.env`` is the snapshot
    of its ``env`` keys in ``environ``, taken now. Raises ``ToolError`` when Node.js is missing
    or the module fails to load (the message names the file and line)."""
    permissions = permissions or Permissions()
    environ = environ or {}
    if sandbox is not None:  # the gateway's own folders are known only now
        refused = sandbox.prefix_refusal(
            permissions.fs, own=[manifest.main.parent], where="options.permissions.fs"
        )
        if refused is not None:
            raise ToolError(refused)
    # The egress socket folder belongs to one host process: keyed by the grant too.
    key = (str(manifest.main), json.dumps(str(permissions)))
    spec = JsHostSpec(
        plugin_id=manifest.id,
        root=manifest.main.parent,
        entry=manifest.main,
        mode="compartment",
        permissions=permissions,
        env={name: environ[name] for name in permissions.env if name in environ},
        kind="capability",
        generation=secrets.token_hex(8),
        confinement=confinement(sandbox, None, network=bool(permissions.network), key=key),
    )
    answer = describe_entry(spec, LOAD_TIMEOUT)
    listed = answer.get("tools")
    tools: list[dict[str, Any]] = []
    for fields in listed if isinstance(listed, list) else []:
        if not isinstance(fields, Mapping):
            tools.append(fields)  # reported by the checks, as for Python
            continue
        value = dict(fields)
        name = str(value.get("name"))
        if value.pop("handler", False):
            value["handler"] = JsHandler(hosts, spec, name, sandbox)
        approval = value.get("approval")
        if isinstance(approval, Mapping) and "buildConfirmation" in approval:
            approval = dict(approval)
            if approval.pop("buildConfirmation"):
                approval["buildConfirmation"] = _confirmation(spec, name)
            value["approval"] = approval
        tools.append(value)
    return tools, _digest(manifest)
