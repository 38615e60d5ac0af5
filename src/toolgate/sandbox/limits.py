"""Resource limits of a sandboxed call, applied *inside* the sandbox with ``prlimit``.

The limits are rlimits set by ``prlimit`` (util-linux), the first program bubblewrap starts;
the tool's command is exec'd by it and inherits them. They are set inside the sandbox, not on
``bwrap`` itself, for ``RLIMIT_NPROC``: the kernel counts processes per user *in a user
namespace*, so inside the sandbox's fresh user namespace the count covers only the sandbox's
own processes, not every process of the gateway's user. (Set before ``bwrap`` creates the
namespace, the limit would also become the ceiling of the parent namespace's count, which
includes the gateway itself.)

The process count has a second, stronger guard: a pids cgroup per call
(:mod:`toolgate.sandbox.cgroups`), whose ``pids.max`` is :attr:`ResourceLimits.processes` plus
the few tasks bubblewrap (and the egress bridge) keep. ``toolgate sandbox check`` says which
applies here:

* ``pids cgroup v1/v2``: whenever the gateway can make cgroups in a pids hierarchy (root in a
  container with the v1 ``pids`` hierarchy, a delegated v2 subtree...), whoever it runs as;
* ``RLIMIT_NPROC`` in the sandbox's user namespace: when the gateway's real user is not root.
  The kernel never applies ``RLIMIT_NPROC`` to processes whose real user is root, so it alone
  cannot stop a fork bomb of a gateway running as root;
* neither (root, no usable pids cgroup): the process count is not enforced, and compartment
  tools are unavailable unless the operator sets ``sandbox.allow_unlimited_processes: true``
  (a fork bomb is then still confined to the sandbox's PID namespace and killed with it at the
  timeout, but can use host PIDs until then).

``RLIMIT_AS`` limits address space per process, not the memory of the whole sandbox; with the
process limit it bounds the total.

Where a pids cgroup enforces the process count and ``RLIMIT_NPROC`` means nothing anyway (the
gateway runs as root, which the kernel exempts from it), the other limits are set one step
earlier, without the ``prlimit`` program: the POSIX shell that joins the call's cgroup
(:meth:`~toolgate.sandbox.cgroups.CallCgroup.wrap`) runs ``ulimit`` (:data:`ULIMIT_SCRIPT`, with
:func:`shell_limit_args`) before it becomes ``bwrap``, so bubblewrap, the sandbox and the tool
inherit them (soft and hard, equal) and one program start per call is saved (about 1 ms on the
2-core development machine, more under load). Shells count some limits in blocks of their own
choosing, so :func:`~toolgate.sandbox.cgroups.probe_pids_cgroup` sets test limits that way once
and reads them back from ``/proc/self/limits``; a shell that does not set exactly what was asked
is never used for it (``prlimit`` sets them, inside, as before). A tool with a ``network``
permission keeps ``prlimit`` inside too: its egress bridge, toolgate's own, starts first in the
sandbox and must not share the tool's CPU and memory limits.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ULIMIT_SCRIPT", "ResourceLimits", "prlimit_argv", "shell_limit_args"]

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ResourceLimits:
    """The rlimits of one sandboxed call."""

    cpu_seconds: int = 60
    memory_bytes: int = 2048 * _MIB
    file_size_bytes: int = 256 * _MIB
    processes: int = 256
    tmp_size_bytes: int = 256 * _MIB

    @classmethod
    def from_megabytes(
        cls,
        *,
        cpu_seconds: int,
        memory_mb: int,
        file_size_mb: int,
        processes: int,
        tmp_size_mb: int,
    ) -> ResourceLimits:
        """Limits from the configuration's MiB figures."""
        return cls(
            cpu_seconds=cpu_seconds,
            memory_bytes=memory_mb * _MIB,
            file_size_bytes=file_size_mb * _MIB,
            processes=processes,
            tmp_size_bytes=tmp_size_mb * _MIB,
        )


def prlimit_argv(prlimit: str, limits: ResourceLimits) -> list[str]:
    """The ``prlimit`` prefix that applies ``limits`` and then executes the command after it.

    Soft and hard limits are equal, so the tool cannot raise them again. Core dumps are off (a
    dump of a tool's memory could hold secrets and fill the disk).
    """
    return [
        prlimit,
        f"--cpu={limits.cpu_seconds}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}",
        f"--nproc={limits.processes}",
        "--core=0",
        "--",
    ]


#: The shell lines that set the limits given as ``$1`` (CPU seconds), ``$2`` (address space,
#: KiB) and ``$3`` (file size, 512-byte blocks), core dumps off, then drop those three words.
#: One limit per ``ulimit`` (dash takes only the last option of several); neither ``-H`` nor
#: ``-S``: both soft and hard. A limit that cannot be set stops the command (exit 126).
ULIMIT_SCRIPT = (
    'ulimit -t "$1" && ulimit -v "$2" && ulimit -f "$3" && ulimit -c 0 || '
    '{ echo "toolgate: cannot set the call\'s resource limits" >&2; exit 126; }\n'
    "shift 3\n"
)

#: The block size shells count ``ulimit -f`` in (POSIX; ``-v`` is in KiB).
_SHELL_BLOCK = 512


def shell_limit_args(limits: ResourceLimits) -> list[str] | None:
    """The three words :data:`ULIMIT_SCRIPT` reads for ``limits``, or ``None`` when a shell
    cannot say them exactly (a size that is not a whole number of its units: the settings are
    in MiB, so only limits made otherwise)."""
    if limits.memory_bytes % 1024 or limits.file_size_bytes % _SHELL_BLOCK:
        return None
    return [
        str(limits.cpu_seconds),
        str(limits.memory_bytes // 1024),
        str(limits.file_size_bytes // _SHELL_BLOCK),
    ]
