"""The ``sandbox:`` section of ``toolgate.yaml``: which tools run in a compartment, and how.

.. code-block:: yaml

    sandbox:
      bwrap_path: bwrap            # the bubblewrap program (a name on PATH or a path)
      default:                     # compartment by default for every tool of a format
        tool-folder: compartment
        resource: compartment
      namespaces:                  # the operator's word per namespace (wins over the rest)
        weather: compartment
        legacy: host               # explicit opt-out: these tools run on the host
      unsandboxed_host: false      # true: run compartment tools on the host, labelled
      pids_cgroup: null            # a cgroup folder for the per-call pids cgroups (default: found)
      allow_unlimited_processes: false  # true: run as root without a process limit, labelled
      limits:
        cpu_seconds: 60
        memory_mb: 2048
        file_size_mb: 256
        processes: 256
        tmp_size_mb: 256
      system_paths: [/opt/node]    # extra read-only folders a runtime needs
      layer: auto                  # auto | bubblewrap | landlock (sandboxing-containers.md)
      accept_weaker:               # tools that may run under a layer that enforces less
        "web/*": landlock

How the mode of a tool is decided (:meth:`SandboxConfig.mode_for`), first match wins:

1. ``namespaces[<tool namespace>]``: the operator's explicit choice for that namespace;
2. the tool's own declaration, when it says ``compartment`` (a tool cannot be talked out of
   its own sandbox by a format default);
3. ``default[<source format>]``;
4. ``host``.
"""

from __future__ import annotations

import fnmatch
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..model import SandboxMode, SourceFormat, Tool, split_tool_id

__all__ = ["LAYERS", "SandboxConfig", "SandboxLimitsConfig"]

#: The sandbox layers, strongest first (:mod:`toolgate.sandbox.layers`).
LAYERS = ("bubblewrap", "landlock")


class _Section(BaseModel):
    # Attribute docstrings describe the fields in the published configuration schema.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class SandboxLimitsConfig(_Section):
    """``sandbox.limits``: resource limits of one sandboxed call (rlimits inside the sandbox)."""

    cpu_seconds: int = Field(default=60, ge=1)
    """CPU seconds (RLIMIT_CPU) per process."""
    memory_mb: int = Field(default=2048, ge=16)
    """Address space per process in MiB (RLIMIT_AS). Runtimes that reserve large virtual
    ranges (Bun, Node, Go) may need more."""
    file_size_mb: int = Field(default=256, ge=1)
    """Largest file a process may write, in MiB (RLIMIT_FSIZE)."""
    processes: int = Field(default=256, ge=1)
    """Processes and threads of the sandbox: ``pids.max`` of the call's own pids cgroup when
    the gateway can make one, and RLIMIT_NPROC inside the sandbox's user namespace (which the
    kernel does not apply to root). ``toolgate sandbox check`` says which holds here."""
    tmp_size_mb: int = Field(default=256, ge=1)
    """Size of the private ``/tmp`` (a tmpfs), in MiB."""


class SandboxConfig(_Section):
    """``sandbox:``: the process sandbox (bubblewrap) for compartment-mode tools."""

    bwrap_path: str = Field(default="bwrap", min_length=1)
    """The bubblewrap program: a name looked up on PATH, or a path."""
    default: dict[SourceFormat, SandboxMode] = Field(default_factory=dict)
    """The mode of tools of a declaration format that declare none (``tool-folder``,
    ``resource``, ``plugin``...)."""
    namespaces: dict[str, SandboxMode] = Field(default_factory=dict)
    """The mode of every tool of a namespace; wins over declarations and format defaults."""
    unsandboxed_host: bool = False
    """``true``: the operator accepts that this host cannot sandbox; compartment tools then run
    on the host and every outcome says so. ``false`` (default): they are unavailable."""
    pids_cgroup: str | None = None
    """The cgroup folder in which every sandboxed call gets its own pids cgroup (a cgroup v1
    ``pids`` folder, or a cgroup v2 folder with the pids controller available and no processes
    of its own, writable by the gateway). ``None`` (default): the gateway's own cgroup, v2 first,
    then the v1 ``pids`` hierarchy; ``toolgate sandbox check`` says what was found."""
    allow_unlimited_processes: bool = False
    """``true``: the operator accepts that the process count of a sandbox is not enforced. This
    only matters when the gateway runs as root (the kernel exempts root from RLIMIT_NPROC) and
    no pids cgroup is usable: compartment tools then run sandboxed but without a process limit
    (a fork bomb is stopped only by the call's timeout), and ``sandbox check``, ``tools show``
    and every outcome say so. ``false`` (default): such a host makes them unavailable, with the
    reason and how to fix it (run the gateway as an ordinary user, or give it a writable pids
    cgroup)."""
    limits: SandboxLimitsConfig = Field(default_factory=SandboxLimitsConfig)
    system_paths: tuple[str, ...] = ()
    """Extra host folders bound read-only into every sandbox (a runtime installed in /opt)."""
    layer: Literal["auto", "bubblewrap", "landlock"] = "auto"
    """The sandbox layer of compartment tools. ``auto`` (default): bubblewrap when it starts
    here, else Landlock + seccomp when the kernel has Landlock ABI 6 or later (a container whose
    seccomp profile refuses user namespaces), else none (compartment tools are unavailable unless
    ``unsandboxed_host``). ``bubblewrap`` or ``landlock``: that layer only; when it does not work
    here, compartment tools are unavailable with the reason. ``toolgate sandbox check`` names the
    layer in use and what it enforces."""
    accept_weaker: dict[str, Literal["landlock"]] = Field(default_factory=dict)
    """Per tool id or namespace pattern (``web/*``, ``files:read``): the weaker layer the operator
    accepts for those tools when it cannot enforce all their declared permissions (Landlock
    cannot filter the network by address, only by port). Without it such a tool is unavailable
    under that layer; with it the tool runs and every outcome lists what was not enforced."""

    @field_validator("system_paths")
    @classmethod
    def _absolute(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"system_paths must be absolute paths, not {path!r}")
        return value

    @field_validator("pids_cgroup")
    @classmethod
    def _absolute_cgroup(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"pids_cgroup must be an absolute path, not {value!r}")
        return value

    def accepts_weaker(self, tool_id: str, layer: str) -> bool:
        """Whether :attr:`accept_weaker` accepts ``layer`` for ``tool_id`` (a pattern matches
        the id, or its namespace as ``<namespace>/*``)."""
        namespace = tool_id.partition(":")[0]
        for pattern, accepted in self.accept_weaker.items():
            if accepted != layer:
                continue
            if pattern == tool_id or fnmatch.fnmatchcase(tool_id, pattern):
                return True
            if pattern.endswith("/*") and pattern[:-2] == namespace:
                return True
        return False

    def mode_for(self, tool: Tool) -> SandboxMode:
        """The mode ``tool`` runs in under this configuration (see the module docs)."""
        try:
            namespace, _ = split_tool_id(tool.id)
        except ValueError:
            namespace = ""
        if namespace in self.namespaces:
            return self.namespaces[namespace]
        if tool.sandbox.mode is SandboxMode.COMPARTMENT:
            return SandboxMode.COMPARTMENT
        return self.default.get(tool.source.format, SandboxMode.HOST)
