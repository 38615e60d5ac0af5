"""One rule for the host folders a sandbox may show a tool: a call's workspace and the ``fs``
prefixes a declaration asks for.

A sandboxed tool sees, besides its own code and the system's programs, two kinds of host
folders: the *workspace* the caller (an agent) names per call — bound read-write for a tool whose
side-effect level writes — and the *``fs`` prefixes* its declaration lists, bound read-only.
Both are chosen by someone the gateway does not trust (an agent, the author of a plugin), so both
pass the same checks. A folder is refused when its path, normalised and again with its symbolic
links resolved:

* **is, lies inside or contains a kernel filesystem**: ``/proc``, ``/sys``, ``/dev`` and the mount
  point of every pseudo filesystem (:data:`PSEUDO_FILESYSTEMS`: cgroup hierarchies, ``proc``,
  ``sysfs``...). A bind there would cover the sandbox's own ``/proc`` and ``/dev`` with the host's;
* **is, lies inside or contains a system configuration folder** (:data:`CONFIG_FOLDERS`:
  ``/etc``, ``/boot``, ``/run``, ``/var/lib``, ``/var/log``...): ``/etc/shadow``, service sockets,
  databases;
* **is or contains a home folder**: the gateway user's home, ``/root``, ``/home`` and every folder
  directly in ``/home``. A folder *inside* a home (``~/projects/x``) is allowed, unless...
* **one of its parts is a credential folder** (:data:`CREDENTIAL_NAMES`: ``.ssh``, ``.aws``,
  ``.config``, ``.gnupg``, ``.kube``...), wherever it is;
* **is, lies inside or contains one of the gateway's own folders**: ``$TOOLGATE_HOME`` (with its
  ``tools``, ``plugins``, ``.env`` and databases), every tool-folder root, every ``sources:``
  path, the folder of ``toolgate.yaml``, the installed ``toolgate`` package and every
  ``sys.path`` entry outside the system folders (where the gateway's Python code is imported
  from). A tool that could write there would add a tool, a plugin or a module the gateway then
  loads on the host. This holds for every ``fs`` prefix and every *writable* workspace (a tool
  whose side-effect level writes); a read-only workspace may hold them (``toolgate call`` from
  the project folder that holds ``toolgate.yaml`` and ``tools/``): the tool can only read that
  code, and the gateway's state (``.env``, databases, secrets, ``toolgate.yaml``) is hidden in
  every sandbox. An ``fs`` prefix inside the tool's *own* folder is its own code (bound
  read-only anyway) and stays allowed.

The system's program folders (:data:`PROGRAM_FOLDERS`: ``/usr``, ``/bin``, ``/lib``...) are
visible read-only in every sandbox: an ``fs`` prefix inside them is allowed (it adds nothing),
but a workspace there is refused (it could be writable).

``fs`` prefixes are normalised first (:func:`normalise_prefix`): a relative prefix is taken
against the folder that declares it (the tool folder, the plugin folder, the source's folder) and
must stay inside it; ``~`` forms and ``..`` parts are refused (write the absolute path meant).

What is known when a declaration is loaded (the kernel, system and credential folders, the home
folders) is checked then, so ``toolgate validate``, loading and ``toolgate plugins install`` say
so with the file and the field; the gateway's own folders are known only to the running gateway,
so the sandbox checks everything again each time it prepares a call.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

__all__ = [
    "CONFIG_FOLDERS",
    "CREDENTIAL_NAMES",
    "KERNEL_FOLDERS",
    "PROGRAM_FOLDERS",
    "PSEUDO_FILESYSTEMS",
    "SYSTEM_FOLDERS",
    "PathPolicy",
    "code_folders",
    "normalise_prefix",
    "prefix_problem",
    "workspace_problem",
]

#: The kernel's filesystems at their usual places (their mount points are found too).
KERNEL_FOLDERS: Final = ("/proc", "/sys", "/dev")

#: The system's programs and libraries: read-only in every sandbox already.
PROGRAM_FOLDERS: Final = (
    "/bin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/sbin",
    "/usr",
)

#: The system's configuration, state and service folders.
CONFIG_FOLDERS: Final = (
    "/boot",
    "/etc",
    "/run",
    "/snap",
    "/var/backups",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/run",
    "/var/spool",
)

#: Every system folder: never a workspace, nor inside or above one.
SYSTEM_FOLDERS: Final = tuple(sorted((*KERNEL_FOLDERS, *PROGRAM_FOLDERS, *CONFIG_FOLDERS)))

#: Folder (and file) names that hold credentials: refused as any part of a path.
CREDENTIAL_NAMES: Final = frozenset(
    {
        ".aws",
        ".azure",
        ".config",
        ".docker",
        ".git-credentials",
        ".gnupg",
        ".kube",
        ".netrc",
        ".npmrc",
        ".password-store",
        ".pgpass",
        ".pypirc",
        ".ssh",
        ".toolgate",
    }
)

#: Kernel filesystems whose mount points (and everything below them) are never shown.
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

Use = Literal["workspace", "fs"]


@dataclass(frozen=True, slots=True)
class PathPolicy:
    """What the checks compare against: the gateway user's home and the gateway's own folders.

    ``home`` ``None``: :meth:`Path.home` (none when it cannot be found). ``gateway_folders``:
    the folders the gateway loads code or configuration from; :meth:`with_code` adds the
    Python ones (the ``toolgate`` package and the ``sys.path`` entries outside the system).
    """

    home: Path | None = None
    gateway_folders: tuple[Path, ...] = ()

    def with_code(self) -> PathPolicy:
        """This policy with the gateway's Python code folders among its own folders."""
        return PathPolicy(self.home, (*self.gateway_folders, *code_folders()))

    def user_home(self) -> Path | None:
        """The gateway user's home folder, real path (``None``: there is none)."""
        try:
            return Path(os.path.realpath(self.home or Path.home()))
        except RuntimeError:  # no home folder can be found for this user
            return None


def code_folders() -> tuple[Path, ...]:
    """Where the gateway's Python code is imported from: the installed ``toolgate`` package and
    every ``sys.path`` entry outside the system folders, existing or not (a virtual environment,
    a source checkout, the folder of ``toolgate.yaml`` when it has ``python:`` sources)."""
    return _code_folders(tuple(sys.path), os.getcwd())


@functools.lru_cache(maxsize=8)
def _code_folders(entries: tuple[str, ...], cwd: str) -> tuple[Path, ...]:
    """:func:`code_folders` for one ``sys.path`` (and current folder, for its ``''`` entry)."""
    found = [Path(__file__).resolve().parent]
    for entry in entries:
        path = Path(os.path.realpath(entry or cwd))
        if not _within(path, map(Path, PROGRAM_FOLDERS)):  # missing ones too: made later
            found.append(path)
    return tuple(dict.fromkeys(found))


def normalise_prefix(text: str, folder: Path) -> tuple[str | None, str | None]:
    """``(absolute prefix, None)``, or ``(None, why it is refused)`` — before any folder rule.

    Relative prefixes are taken against ``folder`` (the declaring folder); ``~`` forms, ``..``
    parts and NUL characters are refused.
    """
    if "\0" in text:
        return None, "a path prefix must not contain a NUL character"
    if text.startswith("~"):
        return None, (
            f"{text!r}: '~' is not expanded in a path prefix (whose home would it be?); "
            "write the absolute path of the folder the tool reads"
        )
    parts = text.replace("\\", "/").split("/")
    if ".." in parts:
        return None, (
            f"{text!r} climbs out with '..': write the path it means without '..' (a relative "
            f"prefix is taken against {folder} and must stay inside it)"
        )
    path = Path(text)
    absolute = Path(os.path.normpath(path if path.is_absolute() else folder / path))
    return str(absolute), None


def workspace_problem(
    workspace: Path,
    policy: PathPolicy | None = None,
    *,
    home: Path | None = None,
    writable: bool = True,
) -> str | None:
    """Why ``workspace`` cannot be bound into a sandbox, or ``None`` when it can.

    ``home`` (when no ``policy`` is given) is the gateway user's home folder. ``writable``:
    the tool may write there (its side-effect level writes); a read-only workspace may hold the
    gateway's folders (their code is only read, and its state is hidden in every sandbox)."""
    policy = policy or PathPolicy(home=home)
    if not writable:
        policy = PathPolicy(policy.home)
    return _problem(Path(workspace), policy, "workspace", ())


def prefix_problem(
    prefix: Path | str, policy: PathPolicy | None = None, *, own: Iterable[Path] = ()
) -> str | None:
    """Why the ``fs`` prefix cannot be shown to a sandbox, or ``None`` when it can.

    ``own``: the tool's own folders (a prefix inside one is its own code, always allowed)."""
    text = str(prefix)
    if not text.startswith("/"):
        return f"{text!r} is not an absolute path"
    policy = policy or PathPolicy()
    return _problem(Path(os.path.normpath(text)), policy, "fs", tuple(own))


def _problem(path: Path, policy: PathPolicy, use: Use, own: Sequence[Path]) -> str | None:
    real = Path(os.path.realpath(path))
    for candidate in dict.fromkeys((Path(os.path.normpath(path)), real)):
        where = "" if candidate == path else f" (the real path of {path})"
        problem = _folder_problem(candidate, policy, use, own)
        if problem is not None:
            return f"{candidate}{where} {problem}"
    return None


def _folder_problem(path: Path, policy: PathPolicy, use: Use, own: Sequence[Path]) -> str | None:
    """What ``path`` is (``"is a system folder..."``), or ``None`` when it passes."""
    kernel = (*map(Path, KERNEL_FOLDERS), *_pseudo_mounts())
    system = (*map(Path, CONFIG_FOLDERS), *kernel)
    if use == "workspace":
        system = (*map(Path, PROGRAM_FOLDERS), *system)
    for folder in system:
        if _within(path, (folder,)):
            what = "a kernel filesystem" if folder in kernel else "a system folder"
            return f"is {what}, or inside one ({folder})"
    for folder in (*system, *map(Path, PROGRAM_FOLDERS)):
        if path in folder.parents:  # a bind is recursive: the folder would come with it
            return f"contains a system folder ({folder})"
    credential = next((part for part in path.parts if part in CREDENTIAL_NAMES), None)
    if credential is not None:
        return f"is a credential folder, or inside one ({credential})"
    user_home = policy.user_home()
    homes = [*([user_home] if user_home is not None else []), *_homes()]
    for folder in dict.fromkeys(homes):
        what = "the home folder of the gateway's user" if folder == user_home else "a home folder"
        if path == folder:
            return f"is {what}"
        if path in folder.parents:
            return f"contains {what} ({folder})"
    for folder in _real(policy.gateway_folders):
        if use == "fs" and _within(path, own):
            break
        if _within(path, (folder,)):
            return f"is one of the gateway's own folders, or inside one ({folder})"
        if path in folder.parents:
            return f"contains one of the gateway's own folders ({folder})"
    return None


def _within(path: Path, folders: Iterable[Path]) -> bool:
    return any(path == folder or folder in path.parents for folder in folders)


def _real(folders: Iterable[Path]) -> tuple[Path, ...]:
    found: list[Path] = []
    for folder in folders:
        found.append(Path(os.path.normpath(folder)))
        found.append(Path(os.path.realpath(folder)))
    return tuple(dict.fromkeys(found))


def _homes() -> tuple[Path, ...]:
    """``/root``, ``/home`` and every folder directly in ``/home``."""
    found = [Path("/root"), Path("/home")]
    with contextlib.suppress(OSError):
        found += [Path(entry.path) for entry in os.scandir("/home") if entry.is_dir()]
    return tuple(found)


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
