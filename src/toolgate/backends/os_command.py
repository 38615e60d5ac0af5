"""Runs OS command tools (``type: os``): an argv, no shell, the contract of tool-folder scripts.

The command gets one JSON object on stdin (the arguments plus ``workspacePath`` and
``sessionId``) and writes one JSON object to stdout, exactly like a tool-folder script (see
:mod:`toolgate.backends.script`, whose result rules apply: an ``error`` field or a non-zero exit is
a ``tool_error``). It runs through :func:`~toolgate.backends.processes.run_process`: its own
environment (the safe system variables only), the workspace as working directory, capped output,
and nothing it starts outlives the call.

The resource specification calls these "sandboxed" commands. With a
:class:`~toolgate.sandbox.runner.Sandbox` in the binding, a compartment-mode command runs under
bubblewrap (see :mod:`toolgate.sandbox`); without one, it runs on the host.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..call_state import CallState
from ..model import OsCommandEntry, Tool
from ..model.permission_rules import env_refusal
from ..registry import RegisteredTool
from ..sandbox.runner import Sandbox
from .base import BackendUnavailableError
from .environment import ScriptEnvironment
from .processes import DEFAULT_MAX_OUTPUT
from .script import interpret_result, run_sandboxed, script_input, start_process

__all__ = ["OsCommandBackend", "OsCommandBinding", "command_unavailable_reason"]


@dataclass(frozen=True, slots=True)
class OsCommandBinding:
    """How one source runs its ``os`` tools (the operator opted in to host mode)."""

    environment: ScriptEnvironment
    """Builds the command's environment: never the gateway's own."""
    max_output: int = DEFAULT_MAX_OUTPUT
    """Bytes of stdout (and of stderr) the command may write before it is stopped."""
    sandbox: Sandbox | None = None
    """Runs compartment-mode commands under bubblewrap; ``None``: on the host."""


def command_unavailable_reason(tool: Tool, environment: ScriptEnvironment) -> str | None:
    """Why the command of ``tool`` cannot start here: its program is not found (on the
    command's own ``PATH`` for a bare name) or is not executable."""
    entry = tool.entry
    if not isinstance(entry, OsCommandEntry) or not entry.command:
        return f"{tool.id} has no command declaration"
    refusal = env_refusal(tool.id, tool.env)
    if refusal is not None:
        return refusal
    program = entry.command[0]
    if "/" in program:
        path = Path(program)
        if not path.is_file():
            return f"the program {program} does not exist"
        if shutil.which(str(path)) is None:
            return f"the program {program} is not executable (chmod +x)"
        return None
    if shutil.which(program, path=environment.build(tool.env, tool_id=tool.id).get("PATH")) is None:
        return f"the program {program!r} is not found on PATH"
    return None


class OsCommandBackend:
    """Runs ``os`` tools as child processes, with the binding their source gave them."""

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        return False

    def run_inline(self, state: CallState) -> Any:
        raise RuntimeError("os tools run on the event loop; call_sync never inlines them")

    async def run(self, state: CallState) -> Any:
        tool = state.tool
        entry = tool.entry
        binding = state.entry.binding
        if not isinstance(entry, OsCommandEntry) or not isinstance(binding, OsCommandBinding):
            raise BackendUnavailableError(f"{tool.id} is not bound to a command")
        env = binding.environment.build(tool.env, tool_id=tool.id)
        if binding.sandbox is None:
            cwd = state.workspace or Path.cwd()
            stdin = json.dumps(script_input(state, cwd=cwd)).encode("utf-8")
            result = await start_process(
                tool, list(entry.command), stdin, env, cwd, binding.max_output
            )
            return interpret_result(tool.id, result, binding.max_output)
        # The sandbox seam: the program by its full path (the sandbox has its own PATH).
        argv = list(entry.command)
        program = shutil.which(argv[0], path=env.get("PATH")) if "/" not in argv[0] else argv[0]
        argv[0] = program or argv[0]
        result = await run_sandboxed(
            binding.sandbox,
            state,
            argv,
            env=env,
            workspace=state.workspace,
            max_output=binding.max_output,
        )
        return interpret_result(tool.id, result, binding.max_output)
