"""One call of a compartment tool under bubblewrap (:mod:`toolgate.sandbox.bwrap`).

:meth:`toolgate.sandbox.runner.Sandbox.prepare` hands a call here once the checks every layer
shares are done: the command becomes ``bwrap …`` with the call's rlimits (set by ``prlimit``
inside, or by the shell that joins the call's pids cgroup), and a tool with network permissions
runs behind the egress bridge, which forwards a port inside the sandbox's network namespace to
the call's egress proxy.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model import Tool
from .bwrap import BwrapSpec, HeldPaths, bwrap_argv, install_root
from .command import SandboxedCommand, no_call
from .held_binds import hold
from .host import HostCapabilities
from .limits import prlimit_argv, shell_limit_args
from .path_checks import CheckedPolicy

if TYPE_CHECKING:
    from .runner import Sandbox

__all__ = ["BRIDGE_PORT", "EGRESS_MOUNT", "bwrap_command"]

#: The port the egress bridge listens on inside the sandbox's network namespace.
BRIDGE_PORT = 3128
#: Where the egress socket's folder appears inside the sandbox.
EGRESS_MOUNT = "/run/toolgate-egress"


@contextlib.asynccontextmanager
async def bwrap_command(
    sandbox: Sandbox,
    tool: Tool,
    argv: Sequence[str],
    env: Mapping[str, str],
    host: HostCapabilities,
    held: HeldPaths,
    checks: CheckedPolicy,
    workspace: Path | None,
    code: Sequence[Path],
    programs: Sequence[str],
    call_id: str | None,
) -> AsyncIterator[SandboxedCommand]:
    """:meth:`prepare` of a compartment tool on a host that sandboxes."""
    assert host.bwrap is not None and host.prlimit is not None
    workspace, sandbox_env, ro, code_paths = sandbox._checked_call(
        tool, env, held, checks, workspace, code
    )
    ro += code_paths
    perms = tool.sandbox.permissions
    network = bool(perms.network)
    # A shim (pyenv, asdf…) becomes the interpreter it runs, with its root bound.
    untrusted = [*code, *([workspace] if workspace is not None else [])]
    command, folders = await sandbox._programs(tool, list(argv), env, programs, untrusted)
    ro += hold(tool, held, folders)
    async with contextlib.AsyncExitStack() as stack:
        cgroup = sandbox._call_cgroup(host, network=network)
        if cgroup is not None:
            # Registered first, so it runs last: after the process and the egress proxy.
            stack.push_async_callback(cgroup.close)
        # The rlimits are set by the shell that joins the cgroup, before bwrap starts,
        # where that shell sets them exactly (probed) and RLIMIT_NPROC, the one limit that
        # must be set inside the sandbox's user namespace, means nothing anyway (the kernel
        # exempts root from it). An egress bridge runs first in the sandbox and is not the
        # tool's: then, and everywhere else, prlimit sets them inside, as the tool starts.
        outside = (
            cgroup is not None
            and cgroup.sets_limits
            and shell_limit_args(sandbox.limits) is not None
            and not host.nproc_enforced
            and not network
        )
        if not outside:
            command = [*prlimit_argv(host.prlimit, sandbox.limits), *command]
        extra: list[tuple[Path, Path]] = []
        events: Sequence[Any] = ()
        bind_call: Callable[[str], None] = no_call
        if network:
            proxy = await sandbox._call_proxy(stack, tool, call_id, tcp=False)
            python = os.path.realpath(sys.executable)
            command, extra = _behind_bridge(python, Path(proxy.socket_path), command)
            ro += hold(tool, held, install_root(python))
            events = proxy.events
            bind_call = functools.partial(setattr, proxy, "call_id")
        spec = BwrapSpec(
            command=command,
            workspace=workspace,
            workspace_writable=tool.side_effect.writes,
            ro_paths=ro,
            protected=sandbox.protected,
            network=network,
            extra_binds=extra,
            tmp_size=sandbox.limits.tmp_size_bytes,
            held=held.held,
            require_held=True,
        )
        sandboxed = bwrap_argv(host.bwrap, spec)
        if cgroup is not None:
            sandboxed = cgroup.wrap(sandboxed, limits=sandbox.limits if outside else None)
        yield SandboxedCommand(
            sandboxed,
            sandbox_env,
            Path("/"),
            workspace or Path("/tmp"),
            sandboxed=True,
            egress_events=events,
            not_enforced=() if host.process_limit is not None else ("processes",),
            bind_call=bind_call,
            pass_fds=spec.pass_fds,
        )


def _behind_bridge(
    python: str, socket_path: Path, command: list[str]
) -> tuple[list[str], list[tuple[Path, Path]]]:
    """``command`` behind the egress bridge (run by ``python``, its source passed with ``-c``):
    the new command and the bind of the socket's folder."""
    bridge = importlib.import_module("toolgate.sandbox.bridge")
    inside = f"{EGRESS_MOUNT}/{socket_path.name}"
    wrapped = bridge.bridge_argv(python, inside, BRIDGE_PORT, command)
    return list(wrapped), [(socket_path.parent, Path(EGRESS_MOUNT))]
