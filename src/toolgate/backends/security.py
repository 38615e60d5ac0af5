"""Runs Jean2 security scripts and reads their verdicts. Every failure is a denial.

The script receives "the exact same input as the tool itself" (the arguments plus
``workspacePath`` and ``sessionId``). Security scripts written for that system in the wild also
read the arguments under an ``args`` key (``input.args.path``), so the arguments are given both at
the top level and under ``args`` — unless the tool has an argument named ``args`` itself.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..invocation import Invocation
from ..model import ScriptEntry, SecurityVerdict, parse_verdict
from ..runtimes import RUNTIMES, runtime_for_extension
from .environment import ScriptEnvironment
from .processes import ProcessStartError, run_process
from .script import decode_tail, script_input

__all__ = ["ScriptSecurityCheck", "SecurityCheckFailedError", "security_input"]

_MAX_VERDICT_OUTPUT = 1024 * 1024


class SecurityCheckFailedError(Exception):
    """The check could not produce a verdict (missing, crashed, timed out, or lied)."""


def security_input(invocation: Invocation, *, cwd: Path) -> dict[str, object]:
    """The tool's own input, plus the arguments under ``args`` for scripts that expect that."""
    payload: dict[str, object] = script_input(invocation, cwd=cwd)
    if "args" not in invocation.arguments:
        payload["args"] = dict(invocation.arguments)
    return payload


class ScriptSecurityCheck:
    """Runs a tool's security script with its own timeout (``securityTimeout``)."""

    def __init__(self, *, environment: ScriptEnvironment, cwd: Path | None = None) -> None:
        self.environment = environment
        self.cwd = cwd

    async def check(self, invocation: Invocation) -> SecurityVerdict:
        """The verdict; raises :class:`SecurityCheckFailedError` when there is none."""
        tool = invocation.tool
        spec = tool.security_check
        if spec is None or spec.script is None:
            raise SecurityCheckFailedError("the tool declares a security check but no script")
        script = Path(spec.script)
        if not script.is_file():
            raise SecurityCheckFailedError(f"the security script {script} does not exist")
        # The script's own extension says how to run it (security.ts → bun), else the tool's.
        fallback = tool.entry.runtime if isinstance(tool.entry, ScriptEntry) else "binary"
        runtime = RUNTIMES[runtime_for_extension(script.name) or fallback]
        env = self.environment.build(tool.env)
        program = runtime.locate(env.get("PATH"))
        if program is None:
            raise SecurityCheckFailedError(
                runtime.unavailable_reason(script, env.get("PATH")) or "runtime missing"
            )
        cwd = invocation.workspace or self.cwd or Path.cwd()
        try:
            result = await run_process(
                runtime.argv(script, resolved=program or None),
                stdin=json.dumps(security_input(invocation, cwd=cwd)).encode("utf-8"),
                env=env,
                cwd=cwd,
                timeout=spec.timeout,
                max_output=_MAX_VERDICT_OUTPUT,
            )
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
            return parse_verdict(json.loads(text))
        except ValueError as exc:
            raise SecurityCheckFailedError(
                f"the security script printed no valid verdict ({exc}): {text[:200]!r}"
            ) from None
