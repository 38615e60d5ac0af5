"""How plugin entries and capability tools modules run on the JavaScript host alike: how the
host is confined (bubblewrap around the SES compartment) and how its calls reach the network
(the egress proxy's options)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...backends.js_host import JsConfinement, JsHostSpec
from ...model import SandboxMode, Tool
from ...path_policy import run_folder
from ...sandbox.addresses import tool_grant

if TYPE_CHECKING:
    from ...sandbox.runner import Sandbox

__all__ = ["confinement", "egress_options"]

_EGRESS_DIRS: dict[tuple[str, ...], Path] = {}


def confinement(
    sandbox: Sandbox | None,
    tool: Tool | None,
    *,
    network: bool,
    key: tuple[str, ...],
    where: str = "permissions.fs",
) -> JsConfinement | None:
    """The sandbox layer around a compartment host (bubblewrap; or Landlock + seccomp where
    bubblewrap cannot start, for a host without network permissions), where one works and the
    operator's namespaces put the tool in a compartment (``None`` otherwise: the SES
    compartment alone). ``key`` names
    the host, for the private folder its calls' egress sockets are made in."""
    if sandbox is None or (tool is not None and sandbox.mode_for(tool) is SandboxMode.HOST):
        return None
    layer = sandbox.layer()
    if layer.name == "landlock":
        # Landlock + seccomp around the host: only without network permissions. The calls of
        # a network plugin reach the egress proxy through a Unix socket, and a seccomp filter
        # that lets the host make Unix sockets would let it connect to every socket of the
        # machine (Landlock does not filter Unix connects): such a host keeps the SES
        # compartment alone, as on a host with no layer.
        if network:
            return None
        return JsConfinement(None, tuple(sandbox.protected), None, sandbox, where, "landlock")
    host = sandbox.host()
    if layer.name != "bubblewrap" or host.bwrap is None:
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
