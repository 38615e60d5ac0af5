"""Jingle tools modules written in JavaScript or TypeScript, run by the JavaScript host.

A capability whose ``main`` is a ``.js``/``.ts`` file is loaded by the host
(:mod:`toolgate.backends.js_host`, kind ``jingle``) in an SES compartment with the seed's safe
globals and no further permission. :func:`js_capability_tools` lists its ``tools`` as plain
definitions whose ``handler`` and ``approval.buildConfirmation`` call back into the host, so
:mod:`toolgate.sources.capabilities` checks and binds them exactly like Python ones: the
connection gating, the masking of secrets in results and errors, the confirmation card.

``handler(input, ctx)`` runs on a warm host process; ``ctx`` holds the connection's
``secrets`` (this capability's only), its public ``config`` and ``capability``, sent with each
call and never put in the process's environment. ``buildConfirmation(input)`` runs in a
short-lived host process (the approval step asks synchronously).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..backends.js_host import JsHosts, JsHostSpec, confirm_once, describe_entry
from ..loaders.capability import CapabilityManifest
from ..model import Permissions
from .js_plugins import confinement

if TYPE_CHECKING:
    from ..sandbox.runner import Sandbox

__all__ = ["LOAD_TIMEOUT", "js_capability_tools"]

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


def _handler(hosts: JsHosts, spec: JsHostSpec, name: str) -> Callable[..., Any]:
    async def handler(input: Mapping[str, Any], ctx: Any) -> Any:
        context = {
            "secrets": dict(ctx.secrets),
            "config": _plain(dict(ctx.config)),
            "capability": ctx.capability,
            "connected": ctx.connected,
        }
        return await hosts.execute(
            spec,
            f"{spec.plugin_id}:{name}",
            name,
            input,
            timeout=_HANDLER_DEADLINE,
            ctx=context,
        )

    handler.__qualname__ = f"{spec.entry.name}:{name} (JavaScript host)"
    return handler


def _confirmation(spec: JsHostSpec, name: str) -> Callable[[Mapping[str, Any]], Any]:
    def build_confirmation(input: Mapping[str, Any]) -> Any:
        return confirm_once(spec, name, _plain(dict(input)), LOAD_TIMEOUT)

    return build_confirmation


def js_capability_tools(
    manifest: CapabilityManifest, hosts: JsHosts, sandbox: Sandbox | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The tool definitions of a JavaScript tools module (functions standing in for the host's)
    and the code's digest; the host runs inside bubblewrap too where ``sandbox`` works. Raises
    ``ToolError`` when Node.js is missing or the module fails to load (the message names the
    file and line)."""
    spec = JsHostSpec(
        plugin_id=manifest.id,
        root=manifest.main.parent,
        entry=manifest.main,
        mode="compartment",
        permissions=Permissions(),
        kind="jingle",
        generation=secrets.token_hex(8),
        confinement=confinement(sandbox, None, network=False, key=(str(manifest.main),)),
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
            value["handler"] = _handler(hosts, spec, name)
        approval = value.get("approval")
        if isinstance(approval, Mapping) and "buildConfirmation" in approval:
            approval = dict(approval)
            if approval.pop("buildConfirmation"):
                approval["buildConfirmation"] = _confirmation(spec, name)
            value["approval"] = approval
        tools.append(value)
    return tools, _digest(manifest)
