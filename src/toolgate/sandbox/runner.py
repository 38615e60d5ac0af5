"""The seam the process backends call: turn a host command into a sandboxed one, or refuse.

A backend that starts a process asks :meth:`Sandbox.prepare` for the command to run::

    async with sandbox.prepare(tool, argv, env=env, workspace=ws, code=[folder]) as command:
        result = await run_process(command.argv, env=command.env, cwd=command.cwd, ...)

For a tool whose mode (:meth:`~toolgate.sandbox.settings.SandboxConfig.mode_for`) is ``host``
the command is returned unchanged. For ``compartment``:

* the host works (:func:`~toolgate.sandbox.host.probe_host`): the command runs under
  ``bwrap`` (see :mod:`toolgate.sandbox.bwrap`) with the call's rlimits (set by ``prlimit``, or
  by the cgroup's join shell: :mod:`toolgate.sandbox.limits`), with an environment of the
  declared ``env`` keys only, plus a fixed ``PATH``, ``HOME=/run/toolgate-home`` (an empty
  tmpfs of its own, where no workspace can be), ``TMPDIR=/tmp`` and ``LANG=C.UTF-8`` (sandbox
  values, never the gateway's). When the host has a usable pids
  cgroup, ``bwrap`` starts inside a fresh cgroup of the call (:mod:`toolgate.sandbox.cgroups`)
  whose ``pids.max`` is the process limit; it is emptied and removed when the context exits,
  however the call ended. The path checks below are worked out once and reused while the
  gateway's folders are unchanged (:mod:`toolgate.sandbox.path_checks`); what a call opens is
  checked every time. A workspace, or a declared ``fs`` prefix, that is, holds or lies in a
  system folder, a home or credential folder, or one of the gateway's own folders is refused
  (:class:`SandboxWorkspaceError`, :class:`SandboxUnavailableError`; the rule is
  :mod:`toolgate.path_policy`, checked again here because the gateway's folders are known only
  to the running gateway);
* the host works but cannot enforce the process count (the gateway runs as root without a
  pids cgroup): :class:`~toolgate.sandbox.errors.SandboxUnavailableError`, unless the operator
  set ``allow_unlimited_processes: true``; then the command runs sandboxed and its outcome says
  ``"not_enforced": ["processes"]``;
* the host cannot sandbox and the operator set ``unsandboxed_host: true``: the command runs on
  the host and ``command.label`` is ``"unsandboxed-host"`` (the caller records it in the
  outcome);
* otherwise :class:`~toolgate.sandbox.errors.SandboxUnavailableError` is raised (and
  :meth:`Sandbox.unavailable_reason` already made the tool unavailable at registration).

A tool with ``network`` permissions gets the per-call egress proxy of
:mod:`toolgate.sandbox.egress` and runs behind the bridge of :mod:`toolgate.sandbox.bridge`;
without them it has no network at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from ..model import SandboxMode, SandboxSpec, Tool
from ..model.permission_rules import env_refusal
from ..path_policy import PathPolicy, outside_system
from .addresses import tool_grant
from .bwrap import HeldPaths
from .bwrap_call import bwrap_command
from .cgroups import BRIDGE_TASKS, BWRAP_TASKS, CallCgroup, PidsHierarchy
from .command import (
    SANDBOX_ENV,
    SANDBOX_HOME,
    UNSANDBOXED_LABEL,
    SandboxedCommand,
    SandboxUnavailableError,
    SandboxWorkspaceError,
    sandbox_environment,
)
from .held_binds import (
    checked_workspace,
    held_prefixes,
    hold,
    own_folder,
    workspace_message,
)
from .host import HostCapabilities, probe_host
from .identity import IdentityGuard
from .landlock import (
    ENFORCEMENT,
    LandlockCapabilities,
)
from .landlock_call import landlocked_command
from .layers import LayerChoice, choose_layer, declared_permissions, weaker_permissions
from .limits import ResourceLimits
from .path_checks import CheckedPolicy, PathChecks
from .programs import ContainedProgram, contain_program, contained_before, resolved_folders
from .settings import SandboxConfig

__all__ = [
    "SANDBOX_ENV",
    "SANDBOX_HOME",
    "UNSANDBOXED_LABEL",
    "Sandbox",
    "SandboxUnavailableError",
    "SandboxWorkspaceError",
    "SandboxedCommand",
    "sandbox_environment",
]


#: The path checks of the call being prepared (set only around its synchronous checks), so the
#: public checks it calls (:meth:`Sandbox.workspace_refusal`) use them rather than taking new ones.
_PREPARING: ContextVar[CheckedPolicy | None] = ContextVar("toolgate_sandbox_checks", default=None)


def _env_refusal(tool: Tool) -> str | None:
    """Why ``tool``'s declared environment (``env`` and ``permissions.env``) may not be passed."""
    return env_refusal(tool.id, (*tool.env, *tool.sandbox.permissions.env))


class Sandbox:
    """The process sandbox service of one gateway (configuration + the host's probe)."""

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        protected: Sequence[Path] = (),
        gateway_folders: Sequence[Path] = (),
        state_folders: Sequence[Path] = (),
        deny_ports: Sequence[int] = (),
        cidr_grants: Mapping[str, Sequence[str]] | None = None,
        resolver: Any = None,
    ) -> None:
        self.config = config or SandboxConfig()
        self.protected = tuple(protected)
        """The gateway's state (database, ``.env``, secrets): never visible in a sandbox."""
        self.gateway_folders: tuple[Path, ...] = tuple(gateway_folders)
        """The folders the gateway loads code or configuration from (tool folders, sources,
        the folder of toolgate.yaml): never a writable workspace, never inside an ``fs``
        prefix. The gateway adds its tool folders and sources (:meth:`guard`); the Python code
        and program folders (and those of the runtimes resolved so far) are added by
        :meth:`paths`."""
        self.state_folders: tuple[Path, ...] = tuple(state_folders)
        """The folders of the gateway's state (``$TOOLGATE_HOME``, the spill folder): never a
        workspace, read-only or not, never inside an ``fs`` prefix. :meth:`paths` adds the run
        folder (egress sockets) and the default spill folder."""
        self.deny_ports = tuple(deny_ports)
        """The gateway's own listening ports: the egress proxy refuses them."""
        self.cidr_grants = dict(cidr_grants or {})
        """Per tool id: private networks the operator explicitly allows it to reach."""
        self.resolver = resolver
        """The resolver of the egress proxy and REST tools (``None``: the system's);
        ``sandbox.hosts`` pins names with one, tests give their own."""
        lim = self.config.limits
        self.limits = ResourceLimits.from_megabytes(
            cpu_seconds=lim.cpu_seconds,
            memory_mb=lim.memory_mb,
            file_size_mb=lim.file_size_mb,
            processes=lim.processes,
            tmp_size_mb=lim.tmp_size_mb,
        )
        self._checks = PathChecks()

    def guard(self, folders: Sequence[Path], *, state: bool = False) -> None:
        """Count ``folders`` among the gateway's own (see :attr:`gateway_folders`), or with
        ``state`` among its state folders (:attr:`state_folders`)."""
        added = (Path(os.path.abspath(folder)) for folder in folders)
        if state:
            self.state_folders = tuple(dict.fromkeys((*self.state_folders, *added)))
        else:
            self.gateway_folders = tuple(dict.fromkeys((*self.gateway_folders, *added)))

    def paths(self) -> PathPolicy:
        """The rule for workspaces and ``fs`` prefixes now (:mod:`toolgate.path_policy`)."""
        # The runtimes resolved so far run on the host: their folders are the gateway's too.
        programs = tuple(outside_system(resolved_folders()))
        return PathPolicy(
            gateway_folders=(*self.gateway_folders, *programs), state_folders=self.state_folders
        ).with_code()

    def checks(self, policy: PathPolicy | None = None) -> CheckedPolicy:
        """The path rule and identity guard of ``policy`` (default: :meth:`paths` now) with
        the protected paths, worked out once and reused while the folders they name are the
        same (:mod:`toolgate.sandbox.path_checks`)."""
        if policy is None:
            preparing = _PREPARING.get()
            if preparing is not None:
                return preparing
            policy = self.paths()
        return self._checks.of(policy, self.protected)

    def workspace_refusal(self, tool: Tool, workspace: Path) -> str | None:
        """Why a call of ``tool`` cannot have ``workspace`` (``None``: it can): for the pipeline,
        before anything runs, and again when the sandbox is prepared. Host-mode tools run with
        the gateway user's rights, workspace or not, so only tools in a compartment (sandboxed
        or, by the operator's choice, run unsandboxed) are checked; a tool whose side-effect
        level writes gets it writable, so it must not hold the gateway's own folders either."""
        if self.mode_for(tool) is SandboxMode.HOST:
            return None
        checks = self.checks()
        problem = checks.workspace_problem(workspace, writable=tool.side_effect.writes)
        return None if problem is None else workspace_message(tool, problem)

    def confine_new_folder(self, tool: Tool) -> tuple[Tool, str | None]:
        """``tool``, of a tool folder that appeared while the gateway runs, in the mode its
        location grants: one that would run on the host runs in a compartment instead, unless
        the operator's ``sandbox.namespaces`` grants its namespace host mode. With the warning
        that says so (``None`` when nothing changed)."""
        if self.mode_for(tool) is not SandboxMode.HOST:
            return tool, None
        namespace = tool.id.partition(":")[0]
        if self.config.namespaces.get(namespace) is SandboxMode.HOST:
            return tool, None
        confined = dataclasses.replace(
            tool, sandbox=SandboxSpec(SandboxMode.COMPARTMENT, tool.sandbox.permissions)
        )
        return confined, (
            f"this tool folder appeared while the gateway was running, so {tool.id} runs in "
            "sandbox mode 'compartment', not on the host: a folder written at run time gets no "
            "more rights than its location grants. To run it on the host, restart the gateway "
            f"(the folders present at start are the installed ones) or grant its namespace "
            f"host mode ('sandbox: {{namespaces: {{{namespace}: host}}}}' in toolgate.yaml)."
        )

    def fs_refusal(
        self, tool: Tool, code: Sequence[Path] = (), *, checks: CheckedPolicy | None = None
    ) -> str | None:
        """Why a declared ``fs`` prefix of ``tool`` cannot be bound (``None``: all can)."""
        if not tool.sandbox.permissions.fs:
            return None
        return self.prefix_refusal(
            tool.sandbox.permissions.fs,
            own=[*code, *own_folder(tool)],
            where=f"{tool.source.location or tool.id}: permissions.fs",
            checks=checks,
        )

    def prefix_refusal(
        self,
        prefixes: Sequence[str],
        *,
        own: Sequence[Path],
        where: str,
        checks: CheckedPolicy | None = None,
    ) -> str | None:
        """Why one of ``prefixes`` (granted at ``where``, e.g. ``file: permissions.fs``)
        cannot be bound (``None``: all can); a prefix inside ``own`` is the tool's own code."""
        checks = checks or self.checks()
        for index, prefix in enumerate(prefixes):
            problem = checks.prefix_problem(prefix, own=own)
            if problem is not None:
                return (
                    f"{where}[{index}]: {problem}: a sandbox never shows it to a tool. Grant "
                    "only the folder of the data the tool reads"
                )
        return None

    def host(self) -> HostCapabilities:
        """This host's capabilities (probed once per bwrap path and cgroup setting)."""
        return probe_host(self.config.bwrap_path, self.config.pids_cgroup)

    def layer(self) -> LayerChoice:
        """The sandbox layer compartment tools run under here (``sandbox.layer``; see
        :mod:`toolgate.sandbox.layers`)."""
        return choose_layer(self.config)

    def weaker(self, tool: Tool) -> tuple[str, ...]:
        """The declared permissions of ``tool`` the layer in use does not enforce (empty under
        bubblewrap, or when no layer works)."""
        name = self.layer().name
        return weaker_permissions(tool, name) if name is not None else ()

    def mode_for(self, tool: Tool) -> SandboxMode:
        """The mode ``tool`` runs in (see :class:`SandboxConfig`)."""
        return self.config.mode_for(tool)

    def unavailable_reason(
        self,
        tool: Tool,
        *,
        programs: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        code: Sequence[Path] = (),
        checks: CheckedPolicy | None = None,
    ) -> str | None:
        """Why ``tool`` cannot run here (``None``: it can); for the registry. ``programs`` are
        the runtime programs it starts as found on ``env``'s ``PATH``: one that cannot be
        contained (:mod:`toolgate.sandbox.programs`) makes the tool unavailable too; ``code``
        are the tool's own folders (a program there is never started to ask); ``checks``: the
        path checks to use (default: :meth:`checks` now)."""
        refusal = _env_refusal(tool)
        if refusal is not None:
            return refusal
        if self.mode_for(tool) is SandboxMode.HOST:
            return None
        refused = self.fs_refusal(tool, checks=checks)
        if refused is not None:
            return refused
        layer = self.layer()
        if layer.name is None:
            if self.config.unsandboxed_host:
                return None
            return (
                f"{tool.id} runs in sandbox mode 'compartment', but this host cannot sandbox: "
                f"{layer.problem}. It does not run unsandboxed unless the operator sets "
                "'sandbox: {unsandboxed_host: true}' in toolgate.yaml."
            )
        if layer.name == "bubblewrap":
            assert layer.host is not None
            problem = layer.host.process_problem()
        else:
            problem = _landlock_process_problem(layer.landlock)
        if problem is not None and not self.config.allow_unlimited_processes:
            return f"{tool.id} runs in sandbox mode 'compartment', but {problem}."
        weaker = weaker_permissions(tool, layer.name)
        if weaker and not self.config.accepts_weaker(tool.id, layer.name):
            return _weaker_reason(tool, layer, weaker)
        if tool.sandbox.permissions.network and _egress() is None:
            return (
                f"{tool.id} declares network permissions, but the egress proxy "
                "(toolgate.sandbox.egress) is not available in this installation"
            )
        for program in programs:
            found_env = env if env is not None else os.environ
            problem = self.contained(program, found_env, untrusted=code).problem
            if problem is not None:
                return f"{tool.id} runs in sandbox mode 'compartment', but {problem}"
        return None

    def contained(
        self, program: str, env: Mapping[str, str], *, untrusted: Sequence[Path] = ()
    ) -> ContainedProgram:
        """How ``program`` (found on ``env``'s ``PATH``) runs in this host's sandboxes: the
        real interpreter behind a shim and the folders it needs (see
        :mod:`toolgate.sandbox.programs`; a program inside ``untrusted`` is never started to
        ask). Only when a layer works here (under Landlock the program is not asked again inside
        a sandbox: its folders are granted, nothing else)."""
        bwrap = self.host().bwrap if self.layer().name == "bubblewrap" else None
        return contain_program(
            bwrap,
            program,
            env,
            sandbox_env=SANDBOX_ENV,
            system_paths=self._system_paths(),
            untrusted=untrusted,
        )

    def _contained_before(
        self, program: str, env: Mapping[str, str], untrusted: Sequence[Path]
    ) -> ContainedProgram | None:
        bwrap = self.host().bwrap if self.layer().name == "bubblewrap" else None
        return contained_before(
            bwrap, program, env, system_paths=self._system_paths(), untrusted=untrusted
        )

    def _system_paths(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.config.system_paths)

    def enforced(self, tool: Tool) -> dict[str, str]:
        """What is enforced for ``tool``, one line per aspect (for ``tools show``)."""
        if self.mode_for(tool) is SandboxMode.HOST:
            return {"sandbox": "host: no isolation (clean environment, timeout, output caps)"}
        layer = self.layer()
        if layer.name is None:
            return {"sandbox": UNSANDBOXED_LABEL if self.config.unsandboxed_host else "none"}
        if layer.name == "landlock":
            return self._enforced_landlock(tool, layer)
        perms = tool.sandbox.permissions
        return {
            "sandbox": "compartment (bubblewrap)",
            "filesystem": "system libraries read-only"
            + (f"; read-only: {', '.join(perms.fs)}" if perms.fs else "")
            + "; workspace "
            + ("writable" if tool.side_effect.writes else "read-only")
            + "; private /tmp",
            "network": ("only via egress proxy to: " + ", ".join(perms.network))
            if perms.network
            else "none",
            "environment": "declared keys only: " + (", ".join(perms.env or tool.env) or "none"),
            **self.host().limit_notes(
                self.limits.processes,
                unlimited_accepted=self.config.allow_unlimited_processes,
            ),
        }

    def _enforced_landlock(self, tool: Tool, layer: LayerChoice) -> dict[str, str]:
        """:meth:`enforced` under the Landlock layer: the layer, then each aspect of
        :data:`~toolgate.sandbox.landlock.ENFORCEMENT` that holds for ``tool``."""
        weaker = weaker_permissions(tool, "landlock")
        lines = {"sandbox": "compartment (landlock + seccomp)"}
        if weaker:
            accepted = self.config.accepts_weaker(tool.id, "landlock")
            lines["sandbox"] += f"; NOT enforced: {', '.join(weaker)} " + (
                "(accepted by sandbox.accept_weaker)" if accepted else "(so unavailable)"
            )
        lines["layer"] = f"landlock (bubblewrap not used: {layer.why_not_bubblewrap})"
        perms = tool.sandbox.permissions
        for name in declared_permissions(tool):
            held, how = ENFORCEMENT["landlock"][name]
            lines[f"{name} (landlock)"] = ("enforced: " if held else "NOT enforced: ") + how
        lines["filesystem"] = (
            "system read-only"
            + (f"; read-only: {', '.join(perms.fs)}" if perms.fs else "")
            + "; workspace "
            + ("writable" if tool.side_effect.writes else "read-only")
            + "; private scratch folder (TMPDIR, HOME)"
        )
        lines["network"] = (
            ("only via egress proxy to: " + ", ".join(perms.network)) if perms.network else "none"
        )
        lines["environment"] = "declared keys only: " + (", ".join(perms.env or tool.env) or "none")
        lines["processes"] = (
            f"enforced: {layer.process_limit}"
            if layer.process_limit is not None
            else "not enforced (root, no usable pids cgroup); killpg at the timeout"
        )
        return lines

    @contextlib.asynccontextmanager
    async def prepare(
        self,
        tool: Tool,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        workspace: Path | None,
        code: Sequence[Path] = (),
        programs: Sequence[str] = (),
        call_id: str | None = None,
    ) -> AsyncIterator[SandboxedCommand]:
        """The command to run for one call of ``tool`` (see the module documentation).

        ``env`` is what the host command would get (the values of the declared keys are taken
        from it); ``code`` are folders the command needs read-only (the tool's folder);
        ``programs`` are the runtime programs it starts: a shim becomes the interpreter it runs
        and the installation root is bound when outside ``/usr``
        (:mod:`toolgate.sandbox.programs`); one that cannot be contained raises
        :class:`SandboxUnavailableError`.
        """
        host_cwd = workspace or Path.cwd()
        refusal = _env_refusal(tool)
        if refusal is not None:  # whatever the mode: the loaders refuse these names first
            raise SandboxUnavailableError(f"Tool {tool.id} is unavailable: {refusal}")
        if self.mode_for(tool) is SandboxMode.HOST:
            yield SandboxedCommand(list(argv), dict(env), host_cwd, host_cwd, sandboxed=False)
            return
        # The path checks of the gateway's folders as they are now, for the whole preparation.
        checks = self.checks()
        reason = self.unavailable_reason(tool, checks=checks)
        if reason is not None:
            raise SandboxUnavailableError(f"Tool {tool.id} is unavailable: {reason}")
        layer = self.layer()
        if layer.name is None:
            # The operator's explicit choice (unsandboxed_host): host, labelled.
            yield SandboxedCommand(
                list(argv), dict(env), host_cwd, host_cwd, False, label=UNSANDBOXED_LABEL
            )
            return
        if layer.name == "landlock":
            assert layer.landlock is not None
            with HeldPaths() as held:
                async with landlocked_command(
                    self,
                    tool,
                    argv,
                    env,
                    layer.landlock,
                    held,
                    checks,
                    workspace,
                    code,
                    programs,
                    call_id,
                ) as command:
                    yield command
            return
        host = self.host()
        assert host.bwrap is not None and host.prlimit is not None
        # Every host path a bind shows is opened once here, checked as what the descriptor
        # points to, and bound from the descriptor: nothing is resolved by name again.
        with HeldPaths() as held:
            async with bwrap_command(
                self, tool, argv, env, host, held, checks, workspace, code, programs, call_id
            ) as command:
                yield command

    async def _call_proxy(
        self, stack: contextlib.AsyncExitStack, tool: Tool, call_id: str | None, *, tcp: bool
    ) -> Any:
        """The egress proxy of one call of ``tool`` (a Unix socket, or a loopback port when
        ``tcp``), closed with ``stack``."""
        return await stack.enter_async_context(
            _egress().EgressProxy.start(
                tool.sandbox.permissions,
                tool_id=tool.id,
                call_id=call_id or "",
                deny_ports=self.deny_ports,
                cidr_grants=tool_grant(self.cidr_grants, tool.id),
                tcp=tcp,
                **({"resolver": self.resolver} if self.resolver is not None else {}),
            )
        )

    async def _programs(
        self,
        tool: Tool,
        argv: list[str],
        env: Mapping[str, str],
        programs: Sequence[str],
        untrusted: Sequence[Path],
    ) -> tuple[list[str], list[Path]]:
        """``argv`` with a shim replaced by the interpreter it runs, and the folders the
        programs need (read-only); raises :class:`SandboxUnavailableError`."""
        folders: list[Path] = []
        for program in programs:
            contained = self._contained_before(program, env, untrusted)
            if contained is None:
                contained = await asyncio.to_thread(
                    functools.partial(self.contained, program, env, untrusted=untrusted)
                )
            if contained.problem is not None:
                raise SandboxUnavailableError(
                    f"Tool {tool.id} is unavailable: it runs in sandbox mode 'compartment', "
                    f"but {contained.problem}"
                )
            folders += contained.read_only
            if argv and argv[0] == program:
                argv[0] = contained.program
        return argv, folders

    def _checked_call(
        self,
        tool: Tool,
        env: Mapping[str, str],
        held: HeldPaths,
        checks: CheckedPolicy,
        workspace: Path | None,
        code: Sequence[Path],
    ) -> tuple[Path | None, dict[str, str], list[Path], list[Path]]:
        """What every layer checks and holds first for one call: the workspace (checked and
        held; :class:`SandboxWorkspaceError`), the ``fs`` prefixes (refused:
        :class:`SandboxUnavailableError`), the sandbox's environment, the held ``fs`` prefixes
        and the held system and code folders."""
        if workspace is not None:
            workspace = self._checked_workspace(tool, workspace, held, checks)
        refused = self.fs_refusal(tool, code, checks=checks)
        if refused is not None:
            raise SandboxUnavailableError(f"Tool {tool.id} did not run: {refused}")
        declared = tuple(dict.fromkeys((*tool.env, *tool.sandbox.permissions.env)))
        fs_paths = self._held_fs(tool, code, held, checks)
        code_paths = hold(tool, held, [*map(Path, self.config.system_paths), *code])
        return workspace, sandbox_environment(declared, env), fs_paths, code_paths

    def _checked_workspace(
        self, tool: Tool, workspace: Path, held: HeldPaths, checks: CheckedPolicy
    ) -> Path:
        """:func:`~toolgate.sandbox.held_binds.checked_workspace` through the public check (the
        one the pipeline runs), with this call's path checks."""
        preparing = _PREPARING.set(checks)
        try:
            return checked_workspace(tool, workspace, held, checks, self.workspace_refusal)
        finally:
            _PREPARING.reset(preparing)

    def _held_fs(
        self, tool: Tool, code: Sequence[Path], held: HeldPaths, checks: CheckedPolicy
    ) -> list[Path]:
        """The declared ``fs`` prefixes that exist, opened in ``held``: their real paths, each
        checked (:func:`~toolgate.path_policy.prefix_problem`) as what was opened."""
        if not tool.sandbox.permissions.fs:
            return []
        own = [*code, *own_folder(tool)]
        where = f"{tool.source.location or tool.id}: permissions.fs"
        return self.held_prefixes(
            tool.id, tool.sandbox.permissions.fs, held, own=own, where=where, checks=checks
        )

    def held_prefixes(
        self,
        tool_id: str,
        prefixes: Sequence[str],
        held: HeldPaths,
        *,
        own: Sequence[Path],
        where: str,
        policy: PathPolicy | None = None,
        checks: CheckedPolicy | None = None,
    ) -> list[Path]:
        """The ``prefixes`` (granted at ``where``) that exist, opened in ``held``: their real
        paths, each checked as what was opened, by the path rule
        (:func:`~toolgate.path_policy.prefix_problem`) and by identity
        (:mod:`toolgate.sandbox.identity`). Raises :class:`SandboxUnavailableError`.
        ``checks`` (or ``policy``, default :meth:`paths` now): what they are checked against."""
        checks = checks or self.checks(policy)
        return held_prefixes(tool_id, prefixes, held, checks, own=own, where=where)

    def identity_guard(self, policy: PathPolicy) -> IdentityGuard:
        """The identities of ``policy``'s folders and of the protected paths (see
        :mod:`toolgate.sandbox.identity`), found now."""
        return IdentityGuard((*policy.state_folders, *policy.gateway_folders), self.protected)

    def _call_cgroup(self, host: HostCapabilities, *, network: bool) -> CallCgroup | None:
        """A fresh pids cgroup for one call, or ``None`` when the host has no usable one.

        Its ``pids.max`` is the process limit plus what bubblewrap (and the egress bridge)
        keep running. Raises :class:`SandboxUnavailableError` when it cannot be made and
        nothing else would limit the process count.
        """
        overhead = BWRAP_TASKS + (BRIDGE_TASKS if network else 0)
        return self._call_cgroup_of(host.pids_cgroup, host.nproc_enforced, overhead=overhead)

    def _call_cgroup_of(
        self, hierarchy: PidsHierarchy | None, nproc_enforced: bool, *, overhead: int
    ) -> CallCgroup | None:
        """:meth:`_call_cgroup` in ``hierarchy`` with ``overhead`` tasks over the limit."""
        if hierarchy is None:
            return None
        try:
            return CallCgroup.create(hierarchy, self.limits.processes + overhead)
        except OSError as exc:
            if nproc_enforced:
                return None  # RLIMIT_NPROC still holds (the gateway is not root)
            raise SandboxUnavailableError(
                f"cannot create the call's pids cgroup in {hierarchy.parent}: {exc.strerror or exc}"
            ) from None


def _landlock_process_problem(caps: LandlockCapabilities | None) -> str | None:
    """Why the Landlock layer cannot enforce the process count here (``None``: it can)."""
    if caps is None or caps.process_limit is not None:
        return None
    return (
        "the process count of a sandbox cannot be enforced here: the gateway runs as root, "
        "which the kernel exempts from RLIMIT_NPROC, and no pids cgroup is usable "
        f"({caps.cgroup_problem or 'none found'}). Run the gateway as an ordinary user (a "
        "container's 'runAsNonRoot'), give it a writable pids cgroup (sandbox.pids_cgroup), or "
        "accept it with 'sandbox: {allow_unlimited_processes: true}' in toolgate.yaml"
    )


def _weaker_reason(tool: Tool, layer: LayerChoice, weaker: Sequence[str]) -> str:
    """Why ``tool`` is unavailable under ``layer``, which does not enforce ``weaker``."""
    name = layer.name
    assert name is not None
    hows = "; ".join(f"{aspect}: {ENFORCEMENT[name][aspect][1]}" for aspect in weaker)
    namespace = tool.id.partition(":")[0]
    return (
        f"{tool.id} runs in sandbox mode 'compartment', but the sandbox layer in use here "
        f"({name}; bubblewrap is not: {layer.why_not_bubblewrap}) does not enforce its declared "
        f"{', '.join(weaker)} permission ({hows}). It does not run with less unless the "
        f'operator accepts the layer for it: \'sandbox: {{accept_weaker: {{"{tool.id}": '
        f'{name}}}}}\' (or "{namespace}/*") in toolgate.yaml, or give the gateway user '
        "namespaces so bubblewrap works (docs/guides/sandboxing-containers.md)"
    )


def _egress() -> Any:
    """The egress module, or ``None`` when it is not part of this installation."""
    try:
        return importlib.import_module("toolgate.sandbox.egress")
    except ImportError:
        return None
