"""Which folders may be bound into a sandbox as a call's workspace.

The workspace is the one host folder a sandboxed tool sees besides its code and declared ``fs``
prefixes, and a tool whose side-effect level writes gets it read-write. The caller (an agent)
chooses it per call, so it must not become a way around the sandbox: binding ``/`` or ``/etc``
would hand the tool the host's files, binding a cgroup folder would let a tool running as root
move itself out of its pids cgroup, and binding ``$TOOLGATE_HOME`` or a tool folder would let it
write a tool the gateway then loads on the host.

The rule is the one of :mod:`toolgate.path_policy`, shared with the ``fs`` prefixes of
declarations; this module keeps the names the sandbox has always used.
"""

from __future__ import annotations

from ..path_policy import PSEUDO_FILESYSTEMS, SYSTEM_FOLDERS, PathPolicy, workspace_problem

__all__ = ["PSEUDO_FILESYSTEMS", "SYSTEM_FOLDERS", "PathPolicy", "workspace_problem"]
