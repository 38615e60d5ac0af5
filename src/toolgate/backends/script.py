"""Runs script tools (tool folders) as child processes, per the Jean2 execution model.

1. The script gets one JSON object on stdin: the arguments plus ``workspacePath`` and
   ``sessionId``.
2. It writes one JSON object to stdout and exits 0. An ``error`` field, or a non-zero exit, is a
   ``tool_error`` (with the ``error`` value, or the tail of stderr).
3. Its working directory is the workspace when one is given, otherwise the gateway's.
4. Its environment is built by :class:`~toolgate.backends.environment.ScriptEnvironment`: never the
   gateway's own.

The process tree is killed on timeout, on cancellation and when the output passes the cap; nothing
a script starts outlives its call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ToolError
from ..invocation import Invocation
from ..model import ScriptEntry, Tool
from ..registry import RegisteredTool
from ..runtimes import RUNTIMES, Runtime
from .base import BackendUnavailableError
from .environment import ScriptEnvironment
from .processes import ProcessResult, ProcessStartError, run_process

__all__ = ["DEFAULT_MAX_OUTPUT", "ScriptBackend", "decode_tail", "script_input"]

DEFAULT_MAX_OUTPUT = 10 * 1024 * 1024
_STDERR_TAIL = 2_000
_STDOUT_START = 300
# The pipeline's deadline is authoritative (it cancels the run, which kills the tree); this is a
# backstop in case a cancellation is swallowed somewhere.
_BACKSTOP_MARGIN = 5.0


def decode_tail(data: bytes, limit: int = _STDERR_TAIL) -> str:
    """The last ``limit`` characters of a stream, decoded leniently."""
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def script_input(invocation: Invocation, *, cwd: Path) -> dict[str, Any]:
    """What a script reads on stdin: the arguments plus ``workspacePath`` and ``sessionId``."""
    payload = dict(invocation.arguments)
    payload["workspacePath"] = str(invocation.workspace or cwd)
    payload["sessionId"] = invocation.session_id or "default"
    return payload


def _entry(tool: Tool) -> tuple[ScriptEntry, Runtime]:
    entry = tool.entry
    if not isinstance(entry, ScriptEntry) or entry.runtime not in RUNTIMES:
        raise BackendUnavailableError(f"{tool.id} has no runnable script declaration")
    return entry, RUNTIMES[entry.runtime]


class ScriptBackend:
    """Runs ``script`` tools; at most ``concurrency`` processes per tool at once."""

    def __init__(
        self,
        *,
        environment: ScriptEnvironment,
        max_output: int = DEFAULT_MAX_OUTPUT,
        concurrency: int = 32,
        cwd: Path | None = None,
    ) -> None:
        self.environment = environment
        self.max_output = max_output
        self.concurrency = concurrency
        self.cwd = cwd
        self._slots: dict[str, asyncio.Semaphore] = {}

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        return False

    def unavailable_reason(self, tool: Tool) -> str | None:
        """Why this script tool cannot run on this host now (e.g. its runtime is missing)."""
        try:
            entry, runtime = _entry(tool)
        except BackendUnavailableError as exc:
            return str(exc)
        path = self.environment.build(tool.env).get("PATH")
        return runtime.unavailable_reason(Path(entry.path), path)

    def run_inline(self, invocation: Invocation) -> Any:
        raise RuntimeError("script tools run on the event loop; call_sync never inlines them")

    def _slot(self, tool_id: str) -> asyncio.Semaphore:
        slot = self._slots.get(tool_id)
        if slot is None:
            slot = self._slots[tool_id] = asyncio.Semaphore(self.concurrency)
        return slot

    async def run(self, invocation: Invocation) -> Any:
        tool = invocation.tool
        entry, runtime = _entry(tool)
        env = self.environment.build(tool.env)
        program = runtime.locate(env.get("PATH"))
        if program is None:
            raise BackendUnavailableError(runtime.unavailable_reason(Path(entry.path), None) or "")
        cwd = invocation.workspace or self.cwd or Path.cwd()
        stdin = json.dumps(script_input(invocation, cwd=cwd)).encode("utf-8")
        async with self._slot(tool.id):
            try:
                result = await run_process(
                    runtime.argv(Path(entry.path), resolved=program or None),
                    stdin=stdin,
                    env=env,
                    cwd=cwd,
                    timeout=tool.timeout + _BACKSTOP_MARGIN,
                    max_output=self.max_output,
                )
            except ProcessStartError as exc:
                raise ToolError(f"Tool {tool.id} could not be started: {exc}") from None
        return interpret_result(tool.id, result, self.max_output)


def interpret_result(tool_id: str, result: ProcessResult, max_output: int) -> Mapping[str, Any]:
    """Turn a finished process into the tool's result, or raise ``ToolError`` saying why not."""
    if result.output_exceeded is not None:
        raise ToolError(
            f"Tool {tool_id} wrote more than {max_output:,} bytes to {result.output_exceeded} "
            "and was stopped. Ask for less output (a narrower request)."
        )
    if result.timed_out:
        raise ToolError(f"Tool {tool_id} did not finish in time and was stopped.")
    text = result.stdout.decode("utf-8", errors="replace").strip()
    parsed: Any = None
    if text:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
    if result.exit_code != 0:
        reason = (
            f"was killed by signal {result.signal}"
            if result.signal
            else f"exited with code {result.exit_code}"
        )
        if isinstance(parsed, dict) and parsed.get("error"):
            raise ToolError(f"{parsed['error']} (tool {tool_id} {reason})")
        stderr = decode_tail(result.stderr)
        detail = f": {stderr}" if stderr else " and wrote nothing to stderr"
        raise ToolError(f"Tool {tool_id} {reason}{detail}")
    if not isinstance(parsed, dict):
        shown = text[:_STDOUT_START] + ("…" if len(text) > _STDOUT_START else "")
        what = "nothing" if not text else f"this, which is not a JSON object: {shown!r}"
        raise ToolError(
            f"Tool {tool_id} must print one JSON object on stdout, but it printed {what}"
        )
    error = parsed.get("error")
    if error not in (None, "", False):
        raise ToolError(error if isinstance(error, str) else json.dumps(error))
    return parsed
