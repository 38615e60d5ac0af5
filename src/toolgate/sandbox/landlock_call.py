"""One call of a compartment tool under the Landlock layer (:mod:`toolgate.sandbox.landlock`).

:meth:`toolgate.sandbox.runner.Sandbox.prepare` hands a call here once the checks every layer
shares are done: the same held descriptors as under bubblewrap, a scratch folder of the call
(``TMPDIR`` and ``HOME``), the egress proxy on a loopback port for a tool with network
permissions, and the launcher's command (:func:`~toolgate.sandbox.landlock.landlock_argv`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..model import Tool
from .bwrap import HeldPaths
from .command import SandboxedCommand, SandboxUnavailableError, no_call
from .held_binds import hold
from .landlock import (
    LandlockCapabilities,
    LandlockSpec,
    hold_system,
    landlock_argv,
    refuse_protected,
    remove_scratch,
)
from .layers import weaker_permissions
from .orphans import adopt_orphans, reap_soon
from .path_checks import CheckedPolicy
from .seccomp import SeccompUnavailableError

if TYPE_CHECKING:
    from .runner import Sandbox

__all__ = ["landlocked_command"]


@contextlib.asynccontextmanager
async def landlocked_command(
    sandbox: Sandbox,
    tool: Tool,
    argv: Sequence[str],
    env: Mapping[str, str],
    caps: LandlockCapabilities,
    held: HeldPaths,
    checks: CheckedPolicy,
    workspace: Path | None,
    code: Sequence[Path],
    programs: Sequence[str],
    call_id: str | None,
) -> AsyncIterator[SandboxedCommand]:
    """:meth:`prepare` of a compartment tool under the Landlock layer
    (:mod:`toolgate.sandbox.landlock`): the same checks and held descriptors as under
    bubblewrap, a scratch folder of the call, the egress proxy on a loopback port."""
    workspace, sandbox_env, read, execs = sandbox._checked_call(
        tool, env, held, checks, workspace, code
    )
    perms = tool.sandbox.permissions
    network = bool(perms.network)
    untrusted = [*code, *([workspace] if workspace is not None else [])]
    command, folders = await sandbox._programs(tool, list(argv), env, programs, untrusted)
    execs += hold(tool, held, folders)
    granted = [*read, *execs, *([workspace] if workspace is not None else [])]
    refuse_protected(f"Tool {tool.id}", granted, sandbox.protected)
    system_fds, dev_fds = hold_system(held, network=network)
    async with contextlib.AsyncExitStack() as stack:
        # The call's scratch folder: TMPDIR and HOME, writable, removed at the end.
        scratch = Path(tempfile.mkdtemp(prefix="toolgate-call-"))
        stack.callback(remove_scratch, scratch)
        (scratch / "tmp").mkdir()
        (scratch / "home").mkdir()
        scratch_real = held.hold(scratch, directory=True)
        sandbox_env |= {"TMPDIR": str(scratch / "tmp"), "HOME": str(scratch / "home")}
        write_fds = [held.fd(scratch_real)]
        read_fds = [held.fd(path) for path in read]
        if workspace is not None:
            target = write_fds if tool.side_effect.writes else read_fds
            target.append(held.fd(workspace))
        cgroup = sandbox._call_cgroup_of(caps.pids_cgroup, caps.nproc_enforced, overhead=1)
        if cgroup is not None:
            stack.push_async_callback(cgroup.close)
        ports: list[int] = []
        events: Sequence[Any] = ()
        bind_call: Callable[[str], None] = no_call
        if network:
            proxy = await sandbox._call_proxy(stack, tool, call_id, tcp=True)
            ports.append(proxy.port)
            url = f"http://127.0.0.1:{proxy.port}"
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
                sandbox_env[name] = url
            events = proxy.events
            bind_call = functools.partial(setattr, proxy, "call_id")
        spec = LandlockSpec(
            command=command,
            exec_fds=[*system_fds, *(held.fd(path) for path in execs)],
            read_fds=read_fds,
            write_fds=write_fds,
            dev_fds=dev_fds,
            connect_ports=ports,
            limits=sandbox.limits,
            nproc=caps.nproc_enforced and caps.pids_cgroup is None,
            network=network,
            scratch=scratch,
        )
        # No PID namespace here: what the call leaves behind goes to PID 1, which the
        # gateway may be itself (a container without an init): then it reaps them.
        adopt_orphans()
        stack.callback(reap_soon)
        try:
            launched = landlock_argv(sys.executable, spec)
        except SeccompUnavailableError as exc:
            raise SandboxUnavailableError(f"Tool {tool.id} is unavailable: {exc}") from None
        if cgroup is not None:
            launched = cgroup.wrap(launched)
        not_enforced = weaker_permissions(tool, "landlock")
        if caps.process_limit is None:
            not_enforced += ("processes",)
        cwd = workspace or scratch / "tmp"
        yield SandboxedCommand(
            launched,
            sandbox_env,
            cwd,
            cwd,
            sandboxed=True,
            egress_events=events,
            not_enforced=not_enforced,
            bind_call=bind_call,
            pass_fds=spec.pass_fds,
            layer="landlock",
        )
