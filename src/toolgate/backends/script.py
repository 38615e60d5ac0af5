"""Runs script tools (tool folders) as child processes, per the format's execution model.

1. The script gets one JSON object on stdin: the arguments plus ``workspacePath`` and
   ``sessionId``.
2. It writes one JSON object to stdout and exits 0. An ``error`` field, or a non-zero exit, is a
   ``tool_error`` (with the ``error`` value, or the tail of stderr).
3. Its working directory is the workspace when one is given, otherwise the gateway's. The
   runtime is started so that it reads no configuration or code from there (a workspace is
   written by other tools and by the agent): see :mod:`toolgate.runtimes`.
4. Its environment is built by :class:`~toolgate.backends.environment.ScriptEnvironment`: never the
   gateway's own.

The process tree is killed on timeout, on cancellation and when the output passes the cap; nothing
a script starts outlives its call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._json import StrictJsonError, loads_strict
from ..call_state import CallState
from ..errors import ToolError
from ..model import SandboxMode, ScriptEntry, Tool
from ..model.permission_rules import env_refusal
from ..registry import RegisteredTool
from ..runtimes import RUNTIMES, Runtime, runtime_for_extension
from ..sandbox.runner import Sandbox, SandboxedCommand, SandboxUnavailableError
from .base import BackendUnavailableError, ToolTimeoutError
from .environment import ScriptEnvironment
from .fast_exit import shimmed_argv
from .prestart import PoolKey, PrestartPool, PrestartSettings, Starter
from .processes import (
    DEFAULT_MAX_OUTPUT,
    ProcessResult,
    ProcessStartError,
    StartedProcess,
    reap_pending,
    run_process,
    spawn_process,
)
from .workers import WorkerPool, WorkerSettings

__all__ = [
    "ScriptBackend",
    "ScriptCommand",
    "checked_answer",
    "decode_tail",
    "interpret_result",
    "run_sandboxed",
    "run_started",
    "script_input",
    "security_runtime",
    "start_process",
]

_STDERR_TAIL = 2_000
_STDOUT_START = 300
#: A model cannot use a megabyte of error text; the rest is cut.
_MAX_ERROR_CHARS = 2_000
# The pipeline's deadline is authoritative (it cancels the run, which kills the tree); this is a
# backstop in case a cancellation is swallowed somewhere.
_BACKSTOP_MARGIN = 5.0


def decode_tail(data: bytes, limit: int = _STDERR_TAIL) -> str:
    """The last ``limit`` characters of a stream, decoded leniently."""
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def _bounded(text: str, limit: int = _MAX_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text):,} characters, cut)"


def script_input(state: CallState, *, cwd: Path) -> dict[str, Any]:
    """What a script reads on stdin: the arguments plus ``workspacePath`` and ``sessionId``."""
    payload = dict(state.arguments)
    payload["workspacePath"] = str(state.workspace or cwd)
    payload["sessionId"] = state.session_id or "default"
    return payload


def security_runtime(tool: Tool, script: Path) -> Runtime:
    """A security script's runtime: its extension's (``security.ts`` → bun), else the tool's."""
    fallback = tool.entry.runtime if isinstance(tool.entry, ScriptEntry) else "binary"
    return RUNTIMES[runtime_for_extension(script.name) or fallback]


@dataclass(frozen=True, slots=True)
class ScriptCommand:
    """A script ready to start: its command line, environment and working directory."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    settings: Mapping[str, str] = field(default_factory=dict)
    """The runtime's own variables (:attr:`~toolgate.runtimes.Runtime.settings`), already in
    ``env``; a sandbox builds its environment anew, so they are added to it again."""

    def sandboxed_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A sandbox's environment ``env`` for this command, with the runtime's settings."""
        return {**env, **self.settings}

    @classmethod
    def prepare(
        cls,
        script: Path,
        runtime: Runtime,
        *,
        tool: Tool,
        environment: ScriptEnvironment,
        cwd: Path,
    ) -> ScriptCommand:
        """Resolve the runtime on the script's own ``PATH``; raise if it cannot run here."""
        env = environment.build(tool.env, tool_id=tool.id)
        settings = dict(runtime.settings)
        env.update(settings)
        program = runtime.locate(env.get("PATH"))
        if program is None:
            reason = runtime.unavailable_reason(script, env.get("PATH"))
            raise BackendUnavailableError(reason or f"runtime '{runtime.name}' is missing")
        return cls(runtime.argv(script, resolved=program or None), env, cwd, settings)


def _entry(tool: Tool) -> tuple[ScriptEntry, Runtime]:
    entry = tool.entry
    if not isinstance(entry, ScriptEntry) or entry.runtime not in RUNTIMES:
        raise BackendUnavailableError(f"{tool.id} has no runnable script declaration")
    return entry, RUNTIMES[entry.runtime]


class ScriptBackend:
    """Runs ``script`` tools.

    How many processes of one tool run at once is the gateway's per-tool concurrency limit
    (:mod:`toolgate.pipeline.concurrency`, ``concurrency:`` in toolgate.yaml; the older
    ``scripts.concurrency`` is its running limit for script tools): the limit holds a call's
    slot until its process tree is killed and reaped (a pre-started process answered from its
    shim's status: killed, and reaped in the background), so this backend keeps no count of
    its own.

    Host-mode tools may have processes started ahead of their calls (``prestart``, see
    :mod:`~toolgate.backends.prestart`); ``protocol: worker`` tools run on long-lived workers
    (:mod:`~toolgate.backends.workers`).
    """

    def __init__(
        self,
        *,
        environment: ScriptEnvironment,
        max_output: int = DEFAULT_MAX_OUTPUT,
        cwd: Path | None = None,
        sandbox: Sandbox | None = None,
        prestart: PrestartSettings | None = None,
        workers: WorkerSettings | None = None,
    ) -> None:
        self.environment = environment
        self.sandbox = sandbox
        """Runs compartment-mode tools under bubblewrap; ``None``: every tool on the host."""
        self.max_output = max_output
        self.cwd = cwd
        self.prestart = prestart or PrestartSettings()
        """Which tools get pre-started processes (by default: those that declare it)."""
        self.workers = workers or WorkerSettings()
        # Processes belong to one loop: async callers and call_sync's private loop each get
        # their own, so neither can deadlock or break the other.
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, PrestartPool] = (
            weakref.WeakKeyDictionary()
        )
        self._worker_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WorkerPool] = (
            weakref.WeakKeyDictionary()
        )

    def prestarts(self, tool: Tool) -> bool:
        """Whether calls of ``tool`` run on pre-started processes: a one-shot script that it
        or the operator asked it for, on the host or in a sandbox prepared ahead (warm)."""
        entry = tool.entry
        return (
            isinstance(entry, ScriptEntry)
            and entry.protocol == "oneshot"
            and (self._on_host(tool) or self._warm_sandboxes())
            and self.prestart.wants(tool.id, declared=entry.prestart)
        )

    def _warm_sandboxes(self) -> bool:
        # Only where bubblewrap really runs: an unsandboxed host (the operator's choice) runs
        # compartment tools fresh, labelled, as before.
        return self.sandbox is not None and self.sandbox.host().works

    def runs_as_worker(self, tool: Tool) -> bool:
        """Whether calls of ``tool`` go to a long-lived worker (``protocol: worker`` on the
        host; forced into a sandbox by the operator, it runs one process per call)."""
        entry = tool.entry
        return isinstance(entry, ScriptEntry) and entry.protocol == "worker" and self._on_host(tool)

    def _on_host(self, tool: Tool) -> bool:
        return self.sandbox is None or self.sandbox.mode_for(tool) is SandboxMode.HOST

    def pool(self) -> PrestartPool:
        """The pre-started processes of the running event loop."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = PrestartPool(self.prestart)
        return pool

    def worker_pool(self) -> WorkerPool:
        """The workers of the running event loop."""
        loop = asyncio.get_running_loop()
        pool = self._worker_pools.get(loop)
        if pool is None:
            pool = self._worker_pools[loop] = WorkerPool(self.workers)
        return pool

    async def prestart_processes(self, tools: Iterable[Tool], *, wait: bool = False) -> int:
        """Start the processes of every tool of ``tools`` that pre-starts, for calls without a
        workspace, in the running event loop; return how many tools. With ``wait``, return once
        they are started."""
        pool = None
        count = 0
        for tool in tools:
            if not self.prestarts(tool):
                continue
            entry, runtime = _entry(tool)
            cwd = self.cwd or Path.cwd()
            try:
                command = ScriptCommand.prepare(
                    Path(entry.path), runtime, tool=tool, environment=self.environment, cwd=cwd
                )
            except BackendUnavailableError:
                continue  # its calls say why
            pool = pool or self.pool()
            if self._on_host(tool):
                pool.fill(self._host_key(tool, command, cwd))
            else:
                key, starter = self._warm_sandbox(tool, command, self.cwd)
                pool.fill(key, starter)
            count += 1
        if wait and pool is not None:
            await pool.settled()
        return count

    async def aclose(self) -> None:
        """Kill the running event loop's pre-started processes and idle workers, and wait until
        they are reaped; then :meth:`close` the others."""
        loop = asyncio.get_running_loop()
        await reap_pending()
        if (pool := self._pools.pop(loop, None)) is not None:
            await pool.aclose()
        if (workers := self._worker_pools.pop(loop, None)) is not None:
            await workers.aclose()
        self.close()

    def close(self) -> None:
        """Kill every pre-started process and idle worker, in whatever event loop they live:
        a loop running in another thread does it itself (warm sandboxes' cgroups and egress
        proxies are released there), waited for up to 5 seconds."""
        closers: list[tuple[asyncio.AbstractEventLoop, Any]] = [
            *self._pools.items(),
            *self._worker_pools.items(),
        ]
        self._pools.clear()
        self._worker_pools.clear()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, closer in closers:
            closer.close()  # signals and file descriptors: now, from any thread
            if loop.is_closed():
                continue
            if loop is running:
                loop.create_task(closer.aclose())  # reaped and released once this returns
            elif loop.is_running():
                done = asyncio.run_coroutine_threadsafe(closer.aclose(), loop)
                with contextlib.suppress(Exception):
                    done.result(timeout=5)

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        return False

    def unavailable_reason(self, tool: Tool) -> str | None:
        """Why this script tool cannot run on this host now (its runtime, or its security
        check's runtime, is missing; a binary is not executable)."""
        try:
            entry, runtime = _entry(tool)
        except BackendUnavailableError as exc:
            return str(exc)
        refusal = env_refusal(tool.id, tool.env)
        if refusal is not None:
            return refusal
        env = self.environment.build(tool.env, tool_id=tool.id)
        path = env.get("PATH")
        reason = runtime.unavailable_reason(Path(entry.path), path)
        programs = [runtime.locate(path) or ""]
        if reason is None and tool.security_check and tool.security_check.script:
            script = Path(tool.security_check.script)
            checker = security_runtime(tool, script)
            programs.append(checker.locate(path) or "")
            if checker.executable is not None and checker.locate(path) is None:
                reason = "its security check cannot run: " + (
                    checker.unavailable_reason(script, path) or f"'{checker.name}' is missing"
                )
        if reason is None and self.sandbox is not None:
            # A runtime a sandbox cannot contain (a shim whose manager lives in the home folder
            # that is never bound…) is said here, at load, not as an exit 127 at call time.
            runnable = [program for program in dict.fromkeys(programs) if program]
            code = [Path(entry.path).parent]
            reason = self.sandbox.unavailable_reason(tool, programs=runnable, env=env, code=code)
        return reason

    def run_inline(self, state: CallState) -> Any:
        raise RuntimeError("script tools run on the event loop; call_sync never inlines them")

    async def run(self, state: CallState) -> Any:
        tool = state.tool
        entry, runtime = _entry(tool)
        cwd = state.workspace or self.cwd or Path.cwd()
        command = ScriptCommand.prepare(
            Path(entry.path), runtime, tool=tool, environment=self.environment, cwd=cwd
        )
        if self.runs_as_worker(tool):
            key = PoolKey.of(tool, command.argv, command.env, cwd)
            state.metadata["process"] = "worker"
            answer = await self.worker_pool().call(
                key,
                script_input(state, cwd=cwd),
                timeout=tool.timeout + _BACKSTOP_MARGIN,
                max_output=self.max_output,
            )
            return checked_answer(tool.id, answer)
        if self._on_host(tool):
            # A host-mode tool's command is the same with or without a sandbox service.
            stdin = json.dumps(script_input(state, cwd=cwd)).encode("utf-8")
            if not self.prestarts(tool):
                result = await start_process(
                    tool, command.argv, stdin, command.env, cwd, self.max_output
                )
                return interpret_result(tool.id, result, self.max_output)
            pool = self.pool()
            key = self._host_key(tool, command, cwd)
            process = pool.take(key)
            try:
                if process is not None:
                    state.metadata["process"] = "prestarted"
                    result = await run_started(tool, process, stdin, self.max_output)
                else:
                    # Started now, but as the pool's processes are: the same shim, if any.
                    result = await start_process(
                        tool,
                        list(key.argv),
                        stdin,
                        command.env,
                        cwd,
                        self.max_output,
                        status=key.status,
                    )
            finally:
                pool.replenish(key)  # after the call: starting one blocks the loop a bit
            return interpret_result(tool.id, result, self.max_output)
        # The sandbox seam: the same command, wrapped (a compartment-mode tool).
        assert self.sandbox is not None  # else it would run on the host, above
        if self.prestarts(tool):
            result = await self._run_warm(state, command)
            return interpret_result(tool.id, result, self.max_output)
        result = await run_sandboxed(
            self.sandbox,
            state,
            command.argv,
            env=command.env,
            workspace=state.workspace or self.cwd,
            code=[Path(entry.path).parent],
            max_output=self.max_output,
            settings=command.settings,
        )
        return interpret_result(tool.id, result, self.max_output)

    def _host_key(self, tool: Tool, command: ScriptCommand, cwd: Path) -> PoolKey:
        """The pool key of a pre-started host tool's calls in ``cwd``: its command, run through
        its runtime's shim when it has one and :attr:`PrestartSettings.fast_exit` is on."""
        entry, _ = _entry(tool)
        shimmed = shimmed_argv(entry.runtime, command.argv) if self.prestart.fast_exit else None
        if shimmed is None:
            return PoolKey.of(tool, command.argv, command.env, cwd)
        return PoolKey.of(tool, shimmed, command.env, cwd, status=True)

    def _warm_sandbox(
        self, tool: Tool, command: ScriptCommand, workspace: Path | None
    ) -> tuple[PoolKey, Starter]:
        """The pool key of a compartment tool's calls in ``workspace``, and the starter that
        prepares a sandbox for one (cgroup, egress proxy, mounts) and starts the script in it."""
        sandbox = self.sandbox
        assert sandbox is not None
        entry, _ = _entry(tool)
        key = PoolKey.of(tool, command.argv, command.env, workspace or Path("/"), where="sandbox")

        async def start() -> StartedProcess:
            stack = contextlib.AsyncExitStack()
            try:
                sandboxed = await stack.enter_async_context(
                    sandbox.prepare(
                        tool,
                        command.argv,
                        env=command.env,
                        workspace=workspace,
                        code=[Path(entry.path).parent],
                        programs=command.argv[:1],
                    )
                )
                process = await spawn_process(
                    sandboxed.argv,
                    env=command.sandboxed_env(sandboxed.env),
                    cwd=sandboxed.cwd,
                    pass_fds=sandboxed.pass_fds,
                )
            except BaseException:
                await stack.aclose()
                raise
            process.attach(sandboxed, stack.aclose)
            return process

        return key, start

    async def _run_warm(self, state: CallState, command: ScriptCommand) -> ProcessResult:
        """Run a compartment tool's call in a sandbox prepared ahead (or, if none is ready, in
        one prepared now, as always), recording what the sandbox enforced as usual."""
        tool = state.tool
        entry, _ = _entry(tool)
        workspace = state.workspace or self.cwd
        key, starter = self._warm_sandbox(tool, command, workspace)
        pool = self.pool()
        process = pool.take(key)
        try:
            if process is None:
                assert self.sandbox is not None
                return await run_sandboxed(
                    self.sandbox,
                    state,
                    command.argv,
                    env=command.env,
                    workspace=workspace,
                    code=[Path(entry.path).parent],
                    max_output=self.max_output,
                    settings=command.settings,
                )
            sandboxed: SandboxedCommand = process.setup
            sandboxed.bind_call(state.call_id)
            state.metadata["process"] = "prestarted"
            if (described := sandboxed.describe()) is not None:
                state.metadata["sandbox"] = described
            payload = json.dumps(script_input(state, cwd=sandboxed.workspace))
            try:
                return await run_started(tool, process, payload.encode("utf-8"), self.max_output)
            finally:
                if described is not None:  # now with the call's egress records
                    state.metadata["sandbox"] = sandboxed.describe()
                # The process tree is gone; removing its cgroup and stopping its egress proxy
                # need not hold up the answer.
                pool.release_later(process)
        finally:
            pool.replenish(key, starter)


async def start_process(
    tool: Tool,
    argv: list[str],
    stdin: bytes,
    env: dict[str, str],
    cwd: Path,
    max_output: int,
    pass_fds: Sequence[int] = (),
    *,
    status: bool = False,
) -> ProcessResult:
    """Run a tool's process (script or ``os`` command) under its timeout, plus a backstop; a
    process that cannot start is a :class:`ToolError` naming the tool. ``status``: it runs
    through a shim of :mod:`~toolgate.backends.fast_exit` and gets its status pipe."""
    try:
        return await run_process(
            argv,
            stdin=stdin,
            env=env,
            cwd=cwd,
            timeout=tool.timeout + _BACKSTOP_MARGIN,
            max_output=max_output,
            pass_fds=pass_fds,
            status=status,
        )
    except ProcessStartError as exc:
        raise ToolError(f"Tool {tool.id} could not be started: {exc}") from None


async def run_started(
    tool: Tool, process: StartedProcess, stdin: bytes, max_output: int
) -> ProcessResult:
    """Run a pre-started process of ``tool`` with ``stdin``, exactly as :func:`start_process`
    runs a fresh one (the same timeout and backstop, output caps and process-tree kill)."""
    return await process.run(stdin, timeout=tool.timeout + _BACKSTOP_MARGIN, max_output=max_output)


async def run_sandboxed(
    sandbox: Sandbox,
    state: CallState,
    argv: list[str],
    *,
    env: dict[str, str],
    workspace: Path | None,
    code: Sequence[Path] = (),
    max_output: int,
    settings: Mapping[str, str] | None = None,
) -> ProcessResult:
    """Run a tool's process through ``sandbox`` (wrapped, or unchanged for a host-mode tool),
    with the script's JSON input on stdin, recording what the sandbox enforced (and the egress
    records of the call) in the outcome's ``metadata["sandbox"]``. A sandbox that cannot run the
    tool makes it unavailable. ``settings``: the runtime's own variables, put into the sandbox's
    environment too (:attr:`ScriptCommand.settings`)."""
    tool = state.tool
    try:
        async with sandbox.prepare(
            tool,
            argv,
            env=env,
            workspace=workspace,
            code=code,
            programs=argv[:1],
            call_id=state.call_id,
        ) as sandboxed:
            if (described := sandboxed.describe()) is not None:
                state.metadata["sandbox"] = described
            payload = json.dumps(script_input(state, cwd=sandboxed.workspace))
            try:
                return await start_process(
                    tool,
                    sandboxed.argv,
                    payload.encode("utf-8"),
                    {**sandboxed.env, **(settings or {})},
                    sandboxed.cwd,
                    max_output,
                    sandboxed.pass_fds,
                )
            finally:
                # Now with the egress records of the call — also when it timed out or was
                # cancelled, so the connections it made are still audited.
                if described is not None:
                    state.metadata["sandbox"] = sandboxed.describe()
    except SandboxUnavailableError as exc:
        raise BackendUnavailableError(str(exc)) from None


def _error_text(value: Any) -> str:
    return _bounded(value if isinstance(value, str) else json.dumps(value, default=str))


def _reports_error(value: Any) -> bool:
    # The format: "include an error field". null, false and "" mean there is none; anything else
    # (0 included) is an error the script reported.
    return value is not None and value is not False and value != ""


def interpret_result(tool_id: str, result: ProcessResult, max_output: int) -> Mapping[str, Any]:
    """Turn a finished process into the tool's result, or raise ``ToolError`` saying why not."""
    if result.output_exceeded is not None:
        raise ToolError(
            f"Tool {tool_id} wrote more than {max_output:,} bytes to {result.output_exceeded} "
            "and was stopped. Ask for less output (a narrower request)."
        )
    if result.timed_out:
        raise ToolTimeoutError(f"Tool {tool_id} did not finish in time and was stopped.")
    text = result.stdout.decode("utf-8", errors="replace").strip()
    parsed: Any = None
    refused: str | None = None
    if text:
        try:
            parsed = loads_strict(text)
        except StrictJsonError as exc:
            refused = None if exc.malformed else str(exc)
    if result.exit_code != 0:
        reason = (
            f"was killed by signal {result.signal}"
            if result.signal
            else f"exited with code {result.exit_code}"
        )
        if isinstance(parsed, dict) and _reports_error(parsed.get("error")):
            raise ToolError(f"{_error_text(parsed['error'])} (tool {tool_id} {reason})")
        stderr = decode_tail(result.stderr)
        detail = f": {stderr}" if stderr else " and wrote nothing to stderr"
        raise ToolError(f"Tool {tool_id} {reason}{detail}")
    if refused is not None:
        raise ToolError(
            f"Tool {tool_id} printed JSON the gateway does not accept: {refused}. "
            "Its result was discarded (a fault of the tool, not of the arguments)."
        )
    if not isinstance(parsed, dict):
        shown = text[:_STDOUT_START] + ("…" if len(text) > _STDOUT_START else "")
        what = "nothing" if not text else f"this, which is not a JSON object: {shown!r}"
        raise ToolError(
            f"Tool {tool_id} must print one JSON object on stdout, but it printed {what}"
        )
    return checked_answer(tool_id, parsed)


def checked_answer(tool_id: str, answer: Mapping[str, Any]) -> Mapping[str, Any]:
    """A script's (or worker's) JSON answer as the tool's result; its ``error`` field, if set,
    as a :class:`ToolError`."""
    if _reports_error(answer.get("error")):
        raise ToolError(_error_text(answer["error"]))
    return answer
