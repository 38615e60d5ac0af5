"""The command a backend starts for a sandboxed call, and the sandbox's environment.

:meth:`~toolgate.sandbox.runner.Sandbox.prepare` yields a :class:`SandboxedCommand`: the argv
(``bwrap`` and its wrappers, or the host command unchanged), the environment
(:func:`sandbox_environment`: fixed sandbox values plus the declared keys), the working folder
and what the outcome records (:meth:`SandboxedCommand.describe`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ToolError
from ..model.permission_rules import env_refusal

__all__ = [
    "SANDBOX_ENV",
    "SANDBOX_HOME",
    "UNSANDBOXED_LABEL",
    "SandboxUnavailableError",
    "SandboxWorkspaceError",
    "SandboxedCommand",
    "no_call",
    "sandbox_environment",
]

#: The label every outcome of a compartment tool run on an unsandboxed host carries.
UNSANDBOXED_LABEL = "unsandboxed-host"

#: The sandbox's home folder: an empty tmpfs of its own that ``bwrap_argv`` mounts. It lies
#: under ``/run``, a system folder no workspace or ``fs`` prefix may be, is or contain.
SANDBOX_HOME = "/run/toolgate-home"

#: The fixed variables of every sandbox (sandbox values, not the gateway's).
SANDBOX_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    # Its own small tmpfs (see toolgate.sandbox.bwrap): under /run, where no workspace or fs
    # prefix is ever bound, so no folder a caller chose is ever $HOME/.local or the like.
    "HOME": SANDBOX_HOME,
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
}


class SandboxUnavailableError(ToolError):
    """A compartment tool cannot run: the host cannot sandbox, or a permission cannot be given."""


@dataclass(frozen=True, slots=True)
class SandboxedCommand:
    """The command a backend starts."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    """The working directory of ``bwrap`` (the sandbox's own is set with ``--chdir``) or of the
    host process."""
    workspace: Path
    """The tool's working directory as the tool sees it (``workspacePath`` of script input)."""
    sandboxed: bool
    label: str | None = None
    """``"unsandboxed-host"`` when a compartment tool runs on the host by operator choice."""
    egress_events: Sequence[Any] = ()
    """The egress proxy's connection records (allowed and refused), filled during the call."""
    not_enforced: tuple[str, ...] = ()
    """Limits the operator accepted are not enforced here (``("processes",)``)."""
    bind_call: Callable[[str], None] = field(
        default=lambda call_id: None, repr=False, compare=False
    )
    """Name the call the sandbox serves, when it was prepared before the call (warm): the
    egress proxy records its connections under that call id."""
    pass_fds: tuple[int, ...] = ()
    """Descriptors the process that runs :attr:`argv` must inherit (``pass_fds``): what the
    sandbox binds (``--bind-fd``), open until the ``prepare`` context exits."""
    layer: str = "bubblewrap"
    """The sandbox layer (``bubblewrap`` or ``landlock``; :mod:`toolgate.sandbox.layers`)."""

    def describe(self) -> dict[str, Any] | None:
        """What the outcome's ``metadata["sandbox"]`` says (``None`` for host-mode tools)."""
        if self.sandboxed:
            egress = [_event(event) for event in self.egress_events]
            described = {"mode": "compartment", "enforced": True, "egress": egress}
            if self.layer != "bubblewrap":
                described["layer"] = self.layer
            if self.not_enforced:
                described["not_enforced"] = list(self.not_enforced)
            return described
        if self.label is not None:
            return {"mode": "compartment", "enforced": False, "label": self.label}
        return None


def sandbox_environment(declared: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """The sandbox's environment: :data:`SANDBOX_ENV` plus the declared keys found in ``env``.

    Values starting with ``()`` (bash function import, Shellshock) or holding NUL are dropped.
    A declared key that makes a runtime load or run code (``BASH_ENV``, ``LD_PRELOAD``,
    ``PATH``…, :mod:`toolgate.model.permission_rules`) raises :class:`SandboxUnavailableError`:
    the processes that start first in a sandbox are toolgate's own (the join shell or
    ``prlimit`` that sets the limits, the egress bridge, the Python worker), and such a key
    would run other code inside them.
    """
    refusal = env_refusal("this tool", declared)
    if refusal is not None:
        raise SandboxUnavailableError(refusal)
    result = dict(SANDBOX_ENV)
    for name in declared:
        value = env.get(name)
        if value is not None and not value.startswith("()") and "\0" not in value:
            result[name] = value
    return result


def no_call(call_id: str) -> None:
    """A sandbox without an egress proxy records nothing per call."""


class SandboxWorkspaceError(ToolError):
    """The call's workspace cannot be bound into a sandbox (see :mod:`.workspaces`)."""


def _event(event: Any) -> Any:
    """An egress record as JSON-ready data (the proxy's records are dataclasses)."""
    if dataclasses.is_dataclass(event) and not isinstance(event, type):
        return dataclasses.asdict(event)
    return event
