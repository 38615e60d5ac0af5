"""Which folders may be bound into a sandbox as a call's workspace.

The workspace is the one host folder a sandboxed tool sees besides its code and declared ``fs``
prefixes, and a tool whose side-effect level writes gets it read-write. The caller (an agent)
chooses it per call, so it must not become a way around the sandbox: binding ``/`` or ``/etc``
would hand the tool the host's files, and binding a cgroup folder would let a tool running as
root (in the sandbox's user namespace, root outside too) move itself out of its pids cgroup.

A workspace is refused when its real path (symbolic links resolved) is, or lies inside:

* a system folder (:data:`SYSTEM_FOLDERS`: ``/etc``, ``/usr``, ``/proc``, ``/sys``, ``/dev``…);
* the mount point of a kernel pseudo filesystem (:data:`PSEUDO_FILESYSTEMS`, wherever mounted:
  cgroup hierarchies, ``proc``, ``sysfs``…);

or when it *contains* one of those folders or the gateway user's home folder (``/``, ``/var``,
``/home``, the home folder itself: a workspace there would expose ``~/.ssh`` and the like).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Final

__all__ = ["PSEUDO_FILESYSTEMS", "SYSTEM_FOLDERS", "workspace_problem"]

#: Folders of the operating system: never a workspace, nor inside or above one.
SYSTEM_FOLDERS: Final = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/snap",
    "/sys",
    "/usr",
    "/var/backups",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/run",
    "/var/spool",
)

#: Kernel filesystems whose mount points (and everything below them) are never a workspace.
PSEUDO_FILESYSTEMS: Final = frozenset(
    {
        "autofs",
        "binfmt_misc",
        "bpf",
        "cgroup",
        "cgroup2",
        "configfs",
        "debugfs",
        "devpts",
        "devtmpfs",
        "efivarfs",
        "fusectl",
        "hugetlbfs",
        "mqueue",
        "nsfs",
        "proc",
        "pstore",
        "rpc_pipefs",
        "securityfs",
        "sysfs",
        "tracefs",
    }
)


def workspace_problem(workspace: Path, *, home: Path | None = None) -> str | None:
    """Why ``workspace`` cannot be bound into a sandbox, or ``None`` when it can.

    ``home`` is the gateway user's home folder (default: :meth:`Path.home`).
    """
    real = Path(os.path.realpath(workspace))
    where = "" if real == workspace else f" (the real path of {workspace})"
    system = (*map(Path, SYSTEM_FOLDERS), *_pseudo_mounts())
    for folder in system:
        if real == folder or folder in real.parents:
            return f"{real}{where} is a system folder, or inside one ({folder})"
    try:
        home = Path(os.path.realpath(home or Path.home()))
    except RuntimeError:  # no home folder can be found for this user
        home = None
    for folder in (*system, *([home] if home is not None else [])):
        if real in folder.parents:  # a bind is recursive: the folder would come with it
            what = "the home folder of the gateway's user" if folder == home else "a system folder"
            return f"{real}{where} contains {what} ({folder})"
        if real == folder:
            return f"{real}{where} is the home folder of the gateway's user"
    return None


@functools.lru_cache(maxsize=1)
def _pseudo_mounts() -> tuple[Path, ...]:
    """Mount points of kernel pseudo filesystems, from ``/proc/self/mountinfo`` (read once)."""
    try:
        text = Path("/proc/self/mountinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ()
    points: list[Path] = []
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail.split():
            continue
        if tail.split()[0] in PSEUDO_FILESYSTEMS:
            point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            points.append(Path(point))
    return tuple(dict.fromkeys(points))
