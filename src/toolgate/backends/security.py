"""Runs the security scripts of tool folders and reads their verdicts. Every failure is a denial.

The script receives "the exact same input as the tool itself" (the arguments plus
``workspacePath`` and ``sessionId``). Security scripts written for that system in the wild also
read the arguments under an ``args`` key (``input.args.path``) and may read ``allowedPaths``, so
the input also carries:

* ``args`` — the arguments again, unless the tool declares an argument named ``args`` itself;
* ``allowedPaths`` — the folders the call may touch: the workspace.

Both are always set by the gateway; a caller cannot supply them.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..call_state import CallState
from ..model import SecurityVerdict, parse_verdict
from ..python.binding import PythonBinding
from ..sandbox.runner import Sandbox, SandboxUnavailableError
from .base import BackendUnavailableError
from .environment import ScriptEnvironment
from .processes import ProcessResult, ProcessStartError, run_process
from .script import ScriptCommand, decode_tail, script_input, security_runtime

__all__ = [
    "PythonSecurityCheck",
    "ScriptSecurityCheck",
    "SecurityCheckFailedError",
    "SecurityChecks",
    "security_input",
]

_MAX_VERDICT_OUTPUT = 1024 * 1024
_MAX_MESSAGE_CHARS = 1_000


class SecurityCheckFailedError(Exception):
    """The check could not produce a verdict (missing, crashed, timed out, or lied)."""


def security_input(state: CallState, *, cwd: Path) -> dict[str, object]:
    """The tool's own input, plus ``args`` and ``allowedPaths`` for scripts that expect them."""
    payload: dict[str, object] = script_input(state, cwd=cwd)
    # The compatibility keys are set by the gateway, never taken from the caller: an extra
    # argument named ``args`` or ``allowedPaths`` (schemas often allow extra properties) must
    # not let a model hand the check a forged view of the call. Only a tool that declares such
    # an argument in its schema gets its own value there.
    declared = state.tool.input_schema.get("properties") or {}
    if "args" not in declared:
        payload["args"] = {k: v for k, v in state.arguments.items() if k != "args"}
    if "allowedPaths" not in declared:
        payload["allowedPaths"] = [payload["workspacePath"]]
    return payload


def _bounded_verdict(verdict: SecurityVerdict) -> SecurityVerdict:
    message = verdict.message
    if message is None or len(message) <= _MAX_MESSAGE_CHARS:
        return verdict
    return SecurityVerdict(
        allowed=verdict.allowed,
        requires_approval=verdict.requires_approval,
        permission_type=verdict.permission_type,
        permission_key=verdict.permission_key,
        message=message[:_MAX_MESSAGE_CHARS] + "…",
    )


class ScriptSecurityCheck:
    """Runs a tool's security script with its own timeout (``securityTimeout``)."""

    def __init__(
        self,
        *,
        environment: ScriptEnvironment,
        cwd: Path | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.environment = environment
        self.cwd = cwd
        self.sandbox = sandbox
        """Runs the security script of a compartment tool in the tool's own sandbox."""

    async def check(self, state: CallState) -> SecurityVerdict:
        """The verdict; raises :class:`SecurityCheckFailedError` when there is none."""
        tool = state.tool
        spec = tool.security_check
        if spec is None or spec.script is None:
            raise SecurityCheckFailedError("the tool declares a security check but no script")
        script = Path(spec.script)
        if not script.is_file():
            raise SecurityCheckFailedError(f"the security script {script} does not exist")
        cwd = state.workspace or self.cwd or Path.cwd()
        try:
            command = ScriptCommand.prepare(
                script,
                security_runtime(tool, script),
                tool=tool,
                environment=self.environment,
                cwd=cwd,
            )
        except BackendUnavailableError as exc:
            raise SecurityCheckFailedError(str(exc)) from None
        try:
            if self.sandbox is None:
                result = await self._run(command.argv, command.env, command.cwd, state, cwd)
            else:
                # A compartment tool's check is its code too: it runs under the same sandbox as
                # the tool (host-mode tools get the command back unchanged).
                async with self.sandbox.prepare(
                    tool,
                    command.argv,
                    env=command.env,
                    workspace=state.workspace or self.cwd,
                    code=[script.parent],
                    programs=command.argv[:1],
                    call_id=state.call_id,
                ) as sandboxed:
                    result = await self._run(
                        sandboxed.argv,
                        command.sandboxed_env(sandboxed.env),
                        sandboxed.cwd,
                        state,
                        sandboxed.workspace or cwd,
                        sandboxed.pass_fds,
                    )
        except SandboxUnavailableError as exc:
            raise SecurityCheckFailedError(
                f"the security script cannot be sandboxed: {exc}"
            ) from None
        except ProcessStartError as exc:
            raise SecurityCheckFailedError(f"the security script could not start: {exc}") from None
        if result.timed_out:
            raise SecurityCheckFailedError(
                f"the security script did not answer within {spec.timeout:g} s"
            )
        if result.output_exceeded is not None:
            raise SecurityCheckFailedError("the security script printed too much output")
        if result.exit_code != 0:
            tail = decode_tail(result.stderr, 500)
            raise SecurityCheckFailedError(
                f"the security script exited with code {result.exit_code}"
                + (f": {tail}" if tail else "")
            )
        text = result.stdout.decode("utf-8", errors="replace").strip()
        try:
            return _bounded_verdict(parse_verdict(json.loads(text)))
        except ValueError as exc:
            raise SecurityCheckFailedError(
                f"the security script printed no valid verdict ({exc}): {text[:200]!r}"
            ) from None

    async def _run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path | None,
        state: CallState,
        workspace: Path,
        pass_fds: Sequence[int] = (),
    ) -> ProcessResult:
        spec = state.tool.security_check
        assert spec is not None
        return await run_process(
            argv,
            stdin=json.dumps(security_input(state, cwd=workspace)).encode("utf-8"),
            env=env,
            cwd=cwd,
            timeout=spec.timeout,
            max_output=_MAX_VERDICT_OUTPUT,
            pass_fds=pass_fds,
        )


class PythonSecurityCheck:
    """Runs a Python tool's ``security_check`` function: the same input and verdict as a script
    (a mapping, or a :class:`~toolgate.model.SecurityVerdict`), with the same timeout."""

    def __init__(self, *, cwd: Path | None = None) -> None:
        self.cwd = cwd

    async def check(self, state: CallState) -> SecurityVerdict:
        """The verdict; raises :class:`SecurityCheckFailedError` when there is none."""
        binding = state.entry.binding
        spec = state.tool.security_check
        if not isinstance(binding, PythonBinding) or binding.security_check is None or not spec:
            raise SecurityCheckFailedError("the tool declares a security check but no function")
        check = binding.security_check
        payload = security_input(state, cwd=state.workspace or self.cwd or Path.cwd())
        try:
            if inspect.iscoroutinefunction(check):
                answer = await asyncio.wait_for(check(payload), spec.timeout)
            else:
                answer = await asyncio.wait_for(asyncio.to_thread(check, payload), spec.timeout)
        except TimeoutError:
            raise SecurityCheckFailedError(
                f"the security check did not answer within {spec.timeout:g} s"
            ) from None
        except Exception as exc:  # noqa: BLE001 - a check that fails denies
            raise SecurityCheckFailedError(
                f"the security check raised {type(exc).__name__}: {exc}"
            ) from None
        if isinstance(answer, SecurityVerdict):
            return _bounded_verdict(answer)
        if not isinstance(answer, Mapping):
            raise SecurityCheckFailedError(
                f"the security check returned {type(answer).__name__}, not a verdict"
            )
        try:
            return _bounded_verdict(parse_verdict(answer))
        except ValueError as exc:
            raise SecurityCheckFailedError(
                f"the security check returned no valid verdict ({exc})"
            ) from None


class SecurityChecks:
    """Picks the check a tool declared: a Python function, else a security script."""

    def __init__(self, *, script: ScriptSecurityCheck, python: PythonSecurityCheck) -> None:
        self.script = script
        self.python = python

    @classmethod
    def build(
        cls, environment: ScriptEnvironment, cwd: Path | None, sandbox: Sandbox | None
    ) -> SecurityChecks:
        """Both kinds of check, scripts run in ``environment`` (and ``sandbox``)."""
        return cls(
            script=ScriptSecurityCheck(environment=environment, cwd=cwd, sandbox=sandbox),
            python=PythonSecurityCheck(cwd=cwd),
        )

    async def check(self, state: CallState) -> SecurityVerdict:
        """The verdict of the tool's own check."""
        if isinstance(state.entry.binding, PythonBinding):
            return await self.python.check(state)
        return await self.script.check(state)
