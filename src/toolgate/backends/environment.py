"""The environment a script tool runs with: never the gateway's own.

A script gets the safe system variables (``PATH``, ``HOME``, ``USER``, locale…) and exactly the
variables its declaration lists in ``env``, read from ``$TOOLGATE_HOME/.env`` — and from the
gateway's own environment only for names the operator allows. Secrets a tool did not ask for never
reach it, because it never receives variables it did not ask for.

A declared name that makes a runtime load or run code (``BASH_ENV``, ``LD_PRELOAD``,
``PYTHONPATH``…; the list is :mod:`toolgate.model.permission_rules`) is refused by every loader; if
one reaches :meth:`ScriptEnvironment.build` anyway, the environment is not built and the call is
refused (:class:`DeniedEnvironmentError`, an ``unavailable`` outcome naming the variables) rather
than run with the name silently dropped: the tool's author learns their declaration is wrong, and
nothing runs half-configured.

``PATH`` loses its empty and relative entries (``:/usr/bin``, ``.``, ``bin``): they name the
working directory — the workspace, which other tools and the agent write into — so a script or an
``os`` tool running ``cat`` or ``git`` would run one planted there.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dotenv import dotenv_values

from ..model import Tool
from ..model.permission_rules import env_name_refusal, env_refusal
from ..redaction import is_credential_name, url_credentials
from ..secrets import SecretResolver
from .base import BackendUnavailableError

__all__ = [
    "SAFE_SYSTEM_VARIABLES",
    "DeniedEnvironmentError",
    "ScriptEnvironment",
    "credential_values",
    "received_values",
]

#: Passed through from the gateway's environment to every script, when set.
SAFE_SYSTEM_VARIABLES = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
)


class DeniedEnvironmentError(BackendUnavailableError):
    """A declaration lists an environment variable that makes a runtime load or run code: the
    process is not started (the pipeline reports the call as ``unavailable``)."""


def _safe_value(value: str) -> bool:
    # Bash imports exported functions from values starting with "()" (Shellshock); refuse them.
    return not value.startswith("()") and "\0" not in value


@dataclass
class ScriptEnvironment:
    """Builds the complete environment of one script run."""

    env_file: Path | None = None
    """The ``.env`` file declared variables are read from (``$TOOLGATE_HOME/.env``)."""
    process_env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    """The gateway's own environment: the source of the safe system variables."""
    allow_from_process: Collection[str] | bool = ()
    """Declared names that may also come from the gateway's environment (``True``: all)."""
    _file_values: dict[str, str] | None = field(default=None, init=False, repr=False)
    _file_mtime: float | None = field(default=None, init=False, repr=False)

    def _from_file(self) -> dict[str, str]:
        if self.env_file is None:
            return {}
        try:
            mtime = self.env_file.stat().st_mtime
        except OSError:
            return {}
        if self._file_values is None or mtime != self._file_mtime:
            # Re-read when the file changes, so editing .env needs no restart.
            values = dotenv_values(self.env_file, interpolate=False)
            self._file_values = {k: v for k, v in values.items() if v is not None}
            self._file_mtime = mtime
        return self._file_values

    def _allowed_from_process(self, name: str) -> bool:
        if self.allow_from_process is True:
            return True
        if self.allow_from_process is False:
            return False
        return name in self.allow_from_process

    def build(self, declared: Collection[str], *, tool_id: str = "this tool") -> dict[str, str]:
        """The environment for a tool that declared ``declared`` variables.

        Raises :class:`DeniedEnvironmentError` when ``declared`` names a variable no declaration
        may pass (see :mod:`toolgate.model.permission_rules`)."""
        refusal = env_refusal(tool_id, declared)
        if refusal is not None:
            raise DeniedEnvironmentError(refusal)
        result = {
            name: self.process_env[name]
            for name in SAFE_SYSTEM_VARIABLES
            if name in self.process_env and _safe_value(self.process_env[name])
        }
        if "PATH" in result:
            result["PATH"] = absolute_path_entries(result["PATH"])
        if not declared:
            return result
        from_file = self._from_file()
        for name in declared:
            value = from_file.get(name)
            if value is None and self._allowed_from_process(name):
                value = self.process_env.get(name)
            if value is not None and _safe_value(value):
                result[name] = value
        return result


def absolute_path_entries(path: str) -> str:
    """``path`` (a ``PATH`` value) without its empty and relative entries: those name the
    working directory, the workspace, and would run a command planted there."""
    return os.pathsep.join(entry for entry in path.split(os.pathsep) if os.path.isabs(entry))


def received_values(
    tool: Tool, secrets: SecretResolver, environment: ScriptEnvironment
) -> tuple[str, ...]:
    """The secret and environment values a tool receives: redacted from what is recorded."""
    values = list(secrets.for_tool(tool).values())
    # A refused name is never passed (the call is refused), so there is nothing of it to redact.
    names = [name for name in tool.env if env_name_refusal(name) is None]
    if names:
        received = environment.build(names, tool_id=tool.id)
        values.extend(received[name] for name in names if name in received)
    return tuple(values)


def credential_values(
    tool: Tool, secrets: SecretResolver, environment: ScriptEnvironment
) -> tuple[str, ...]:
    """The credentials among what a tool receives, masked in what its caller gets back: every
    declared secret, each environment variable whose name says it holds one
    (:func:`~toolgate.redaction.is_credential_name`: ``GITHUB_TOKEN``, ``OPENAI_API_KEY``…), and
    the credentials inside any other variable that is a URL (``DATABASE_URL``'s password). Other
    environment values (a cache folder, a region) a tool may return; they are still masked in
    everything recorded (:func:`received_values`)."""
    values = list(secrets.for_tool(tool).values())
    names = [name for name in tool.env if env_name_refusal(name) is None]
    if names:
        received = environment.build(names, tool_id=tool.id)
        for name in names:
            value = received.get(name)
            if value is None:
                continue
            if is_credential_name(name):
                values.append(value)
            else:
                values.extend(url_credentials(value))
    return tuple(values)
