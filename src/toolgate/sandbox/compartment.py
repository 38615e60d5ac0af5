"""The gateway's side of the compartment worker (:mod:`toolgate.sandbox.compartment_child`).

Compartment-mode Python tools (plugin tools) never run in the gateway's process: each
call starts the worker under the sandbox, which imports the plugin's entry and calls
``execute``. This module builds the worker's command and request and reads its answer; the
process is started by :func:`run_worker` with the process runner it is given (the backends'
``run_process``; this package sits below the backends and does not import them), through
:meth:`~toolgate.sandbox.runner.Sandbox.prepare` like any other sandboxed command::

    request = WorkerRequest(folder, module_parts, tool.id, local_id, arguments, env)
    answer = await run_worker(sandbox, tool, request, runner=run_process, workspace=ws)
    value = answer["result"]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import ToolError
from ..model import Tool
from .runner import Sandbox

__all__ = [
    "WORKER",
    "ProcessRunner",
    "WorkerRequest",
    "WorkerTimeoutError",
    "run_worker",
    "worker_answer",
    "worker_argv",
]

#: The worker program (standard library only), bound read-only into the sandbox.
WORKER = Path(__file__).resolve().with_name("compartment_child.py")

_TAIL = 2000


def worker_argv(python: str | None = None) -> list[str]:
    """The worker's command line. ``-I``: no ``PYTHON*`` variables, no user site, and the
    worker's own folder is not put on ``sys.path``."""
    return [python or sys.executable, "-I", str(WORKER)]


@dataclass(frozen=True, slots=True)
class WorkerRequest:
    """One request to the worker (see :mod:`toolgate.sandbox.compartment_child` for the format)."""

    folder: Path
    """The plugin folder (bound read-only)."""
    module: Sequence[str]
    """The entry module's parts relative to the folder (``("tools", "weather")``)."""
    tool_id: str
    """The namespaced id, for messages and ``ctx.tool_id``."""
    local_id: str | None
    """The tool object's ``id``; ``None`` for a ``describe`` request."""
    arguments: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    """The declared environment variables (``ctx.env``)."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """The operator's plugin settings (``ctx.plugin_config``)."""
    time: bool = False
    random: bool = False

    def stdin(self) -> bytes:
        """The request as the worker reads it."""
        request = {
            "op": "describe" if self.local_id is None else "execute",
            "folder": str(self.folder),
            "module": list(self.module),
            "tool": self.local_id,
            "tool_id": self.tool_id,
            "input": dict(self.arguments),
            "env": dict(self.env),
            "config": dict(self.config),
            "grants": {"time": self.time, "random": self.random},
        }
        return json.dumps(request).encode("utf-8")

    def code_paths(self) -> list[Path]:
        """The folders the worker needs read-only: its own and the plugin's."""
        return [WORKER.parent, self.folder]


def worker_answer(
    tool_id: str, exit_code: int | None, stdout: bytes, stderr: bytes
) -> Mapping[str, Any]:
    """The worker's answer (``{"result": ...}`` or ``{"tools": ...}``), or ``ToolError``.

    Timeouts and output caps are the caller's to check first (as for script tools).
    """
    text = stdout.decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text) if text else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = stderr.decode("utf-8", "replace").strip()[-_TAIL:]
        how = f"exited with code {exit_code}" if exit_code is not None else "was killed"
        raise ToolError(
            f"Tool {tool_id} {how} without an answer"
            + (f": {tail}" if tail else " (nothing on stderr)")
        )
    if "error" in answer:
        raise ToolError(f"Tool {tool_id} failed: {answer['error']}")
    return answer


class _Finished(Protocol):
    """What the process runner returns (``toolgate.backends.processes.ProcessResult``)."""

    @property
    def exit_code(self) -> int | None: ...
    @property
    def stdout(self) -> bytes: ...
    @property
    def stderr(self) -> bytes: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def output_exceeded(self) -> str | None: ...


class ProcessRunner(Protocol):
    """``toolgate.backends.processes.run_process``."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes,
        env: Mapping[str, str],
        cwd: Path | None,
        timeout: float,
        max_output: int = ...,
        pass_fds: Sequence[int] = ...,
    ) -> Awaitable[_Finished]: ...


class WorkerTimeoutError(ToolError):
    """The worker was still running at the deadline and was killed (with everything it
    started)."""


async def run_worker(
    sandbox: Sandbox,
    tool: Tool,
    request: WorkerRequest,
    *,
    runner: ProcessRunner,
    workspace: Path | None = None,
    max_output: int = 10 * 1024 * 1024,
    metadata: MutableMapping[str, Any] | None = None,
    call_id: str | None = None,
) -> Mapping[str, Any]:
    """Run one worker request for ``tool`` under ``sandbox`` and return its answer.

    Raises :class:`~toolgate.sandbox.runner.SandboxUnavailableError` when the tool cannot run
    here, :class:`WorkerTimeoutError` at the tool's timeout, and ``ToolError`` for a failure of
    the plugin or an answer that is too large. ``metadata`` (the call's outcome metadata)
    receives ``sandbox``, as for script tools.
    """
    async with sandbox.prepare(
        tool,
        worker_argv(),
        env=dict(request.env),
        workspace=workspace,
        code=request.code_paths(),
        programs=[sys.executable],
        call_id=call_id,
    ) as command:
        if metadata is not None and (described := command.describe()) is not None:
            metadata["sandbox"] = described
        try:
            result = await runner(
                command.argv,
                stdin=request.stdin(),
                env=command.env,
                cwd=command.cwd,
                timeout=tool.timeout,
                max_output=max_output,
                pass_fds=command.pass_fds,
            )
        finally:
            # Now with the egress records of the call — also when it timed out or was
            # cancelled, so the connections it made are still audited.
            if metadata is not None and (described := command.describe()) is not None:
                metadata["sandbox"] = described
    if result.output_exceeded is not None:
        raise ToolError(
            f"Tool {tool.id} wrote more than {max_output:,} bytes to {result.output_exceeded} "
            "and was stopped."
        )
    if result.timed_out:
        raise WorkerTimeoutError(f"Tool {tool.id} did not finish in time and was stopped.")
    return worker_answer(tool.id, result.exit_code, result.stdout, result.stderr)
