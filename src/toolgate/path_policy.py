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
* **is or lies inside a dot-folder of a home** (a folder directly in a home whose name starts
  with ``.``: ``~/.local``, ``~/.node_modules``, ``~/.bun``, ``~/.npm``, ``~/.cache``...): a
  home's dot-folders hold the configuration and code its user's programs load (a ``.pth`` file
  in Python's user site folder runs at every start of Python on the host). Likewise **a
  runtime's user folder** (:func:`runtime_user_folders`: this interpreter's user base and user
  site folder, every ``GOPATH`` entry and ``~/go``), which the path is, lies inside or contains;
  and, for a workspace, **any part named** ``node_modules`` (``require()`` looks for packages in
  the ``node_modules`` of every folder above a script). These hold for every ``fs`` prefix and
  every writable workspace (:attr:`PathPolicy.guards_code`), not for a read-only workspace;
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
  read-only anyway) and stays allowed. The gateway's own folders also hold every program it
  runs on the host (:func:`program_folders`: each ``PATH`` entry of the gateway process, the
  install roots of those entries and of the runtimes found on it, the Python interpreter's
  prefixes) and the folder of every Python file it has imported (:func:`module_folders`,
  however the file was loaded: ``python:`` sources, ``function:`` handlers, extensions,
  capabilities);
* **is, lies inside or contains one of the gateway's state folders**: ``$TOOLGATE_HOME``, the
  gateway's run folder (:func:`run_folder`: the egress proxies' sockets, MCP server logs) and the
  spill folder of long outputs. This holds for *every* use, read-only workspaces included: the
  state there changes while a call runs (a file replaced during the call is not hidden by the
  covers made when the sandbox was prepared), and other calls' sockets and outputs live there.
  The run folder and the default spill folder lie in the temporary folder, so the temporary
  folder itself (``/tmp``) is refused, while its other subfolders stay allowed.

A path whose links cannot be followed (``/proc/<pid>/root/...`` of another user's process) is
refused ("cannot be resolved"), never an exception.

So there are two tiers of the gateway's folders: *code* folders (refused for writing and for
``fs`` prefixes, readable as a read-only workspace) and *state* folders (refused for every use).

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
import shutil
import stat
import sys
import tempfile
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
    "RUNTIME_PROGRAMS",
    "SYSTEM_FOLDERS",
    "PathPolicy",
    "code_folders",
    "module_folders",
    "normalise_prefix",
    "outside_system",
    "prefix_problem",
    "private_folder_check",
    "program_folders",
    "run_folder",
    "run_folder_path",
    "runtime_user_folders",
    "spill_root",
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

#: The runtimes the gateway starts on the host (found on ``PATH``, see
#: :mod:`toolgate.sandbox.programs`): their install roots are the gateway's own folders.
RUNTIME_PROGRAMS: Final = ("python3", "python", "node", "bun", "deno", "go")

Use = Literal["workspace", "fs"]


@dataclass(frozen=True, slots=True)
class PathPolicy:
    """What the checks compare against: the gateway user's home and the gateway's own folders.

    ``home`` ``None``: :meth:`Path.home` (none when it cannot be found). ``gateway_folders``:
    the folders the gateway loads code or configuration from; :meth:`with_code` adds the
    Python ones and the program folders (:func:`code_folders`). ``state_folders``: the folders
    of the gateway's state, refused for every use (read-only workspaces too); :meth:`with_code`
    adds the run folder and the default spill folder.
    """

    home: Path | None = None
    gateway_folders: tuple[Path, ...] = ()
    state_folders: tuple[Path, ...] = ()
    guards_code: bool = True
    """The code folders of the user's programs are refused (a home's dot-folders, the
    runtimes' user folders, ``node_modules``): ``False`` for a read-only workspace only."""

    def with_code(self) -> PathPolicy:
        """This policy with the gateway's code and program folders among its own folders, and
        its run and default spill folders among its state folders."""
        return PathPolicy(
            self.home,
            (*self.gateway_folders, *code_folders()),
            (*self.state_folders, run_folder_path(), spill_root()),
            self.guards_code,
        )

    def read_only(self) -> PathPolicy:
        """The policy of a read-only workspace: the state folders only (code may be read)."""
        return PathPolicy(self.home, (), self.state_folders, guards_code=False)

    def user_home(self) -> Path | None:
        """The gateway user's home folder, real path (``None``: there is none)."""
        try:
            return Path(os.path.realpath(self.home or Path.home()))
        except (RuntimeError, OSError):  # no home folder can be found for this user
            return None


def run_folder_path() -> Path:
    """Where the gateway keeps its run-time files (egress sockets, MCP server logs):
    ``<temporary folder>/toolgate-run-<uid>``, one per user (see :func:`run_folder`)."""
    return Path(tempfile.gettempdir()) / f"toolgate-run-{os.getuid()}"


def run_folder() -> Path:
    """:func:`run_folder_path`, made now if missing (mode 0700) and checked: a real folder (not
    a symbolic link) owned by this user, closed to the others. Raises :class:`OSError` when
    another user (or a link) holds its place: nothing of the gateway is put there."""
    path = run_folder_path()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    private_folder_check(path)
    return path


def private_folder_check(path: Path) -> None:
    """Raise :class:`OSError` unless ``path`` is a folder (not a link) of this user; closes it
    to the others (mode 0700) when it is."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(
            f"{path} is not a folder of this user (a symbolic link, a file or another user's "
            "folder is in its place): toolgate puts nothing there. Remove it, or set TMPDIR"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        os.chmod(path, 0o700)


def spill_root() -> Path:
    """The default folder of spilled long outputs (``overflow.dir`` unset)."""
    return Path(tempfile.gettempdir()) / "toolgate"


def code_folders() -> tuple[Path, ...]:
    """Where the gateway's code comes from: the installed ``toolgate`` package, every
    ``sys.path`` entry outside the system folders, existing or not (a virtual environment, a
    source checkout, the folder of ``toolgate.yaml`` when it has ``python:`` sources), the
    program folders (:func:`program_folders`) and the folders of the imported Python files
    (:func:`module_folders`) outside those."""
    base = (
        *_code_folders(tuple(sys.path), os.getcwd()),
        *program_folders(),
    )
    return (*base, *_outside(module_folders(), base))


@functools.lru_cache(maxsize=8)
def _code_folders(entries: tuple[str, ...], cwd: str) -> tuple[Path, ...]:
    """:func:`code_folders` for one ``sys.path`` (and current folder, for its ``''`` entry)."""
    found = [Path(__file__).resolve().parent]
    for entry in entries:
        path = Path(os.path.realpath(entry or cwd))
        if not _within(path, map(Path, PROGRAM_FOLDERS)):  # missing ones too: made later
            found.append(path)
    return tuple(dict.fromkeys(found))


def program_folders(search_path: str | None = None) -> tuple[Path, ...]:
    """Where the programs the gateway runs on the host come from: every entry of
    ``search_path`` (default: the gateway process's ``PATH``; a ``python3`` written in one
    would run when a runtime is looked up), the install root of each entry and of each
    runtime found on it (:data:`RUNTIME_PROGRAMS`: ``~/.pyenv`` for ``~/.pyenv/shims``,
    ``~/.cargo`` for ``~/.cargo/bin``...) and the Python interpreter's prefixes; outside the
    system's program folders (read-only everywhere)."""
    if search_path is None:
        search_path = os.environ.get("PATH", os.defpath)
    return _program_folders(search_path, os.getcwd())


@functools.lru_cache(maxsize=8)
def _program_folders(search_path: str, cwd: str) -> tuple[Path, ...]:
    found: list[Path] = []
    folders = [Path(os.path.join(cwd, entry)) for entry in search_path.split(os.pathsep)]
    for name in RUNTIME_PROGRAMS:
        located = shutil.which(name, path=search_path)
        if located is not None:
            located = os.path.join(cwd, located)
            folders += [Path(located).parent, Path(os.path.realpath(located)).parent]
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        folders.append(Path(prefix))
    folders.append(Path(sys.executable).parent)
    for folder in folders:
        for spelling in (Path(os.path.normpath(folder)), Path(os.path.realpath(folder))):
            found.append(spelling)
            root = _install_root(spelling)
            if root is not None:
                found.append(root)
    programs = tuple(map(Path, PROGRAM_FOLDERS))
    return tuple(f for f in dict.fromkeys(found) if not _within(f, programs))


def outside_system(folders: Iterable[Path]) -> list[Path]:
    """``folders`` (real paths) outside the system's program folders (read-only everywhere)."""
    programs = tuple(map(Path, PROGRAM_FOLDERS))
    found = (Path(os.path.realpath(folder)) for folder in folders)
    return [folder for folder in found if not _within(folder, programs)]


def _install_root(folder: Path) -> Path | None:
    """The folder a ``bin`` (``sbin``, ``shims``) folder belongs to, unless it is too wide to
    guard as a whole (``/``, a home folder, the temporary folder)."""
    if folder.name not in {"bin", "sbin", "shims"}:
        return None
    root = folder.parent
    wide = {Path("/"), Path(os.path.realpath(tempfile.gettempdir())), *_homes()}
    with contextlib.suppress(RuntimeError):
        wide.add(Path(os.path.realpath(Path.home())))
    return None if root in wide or len(root.parts) < 2 else root


def module_folders() -> tuple[Path, ...]:
    """The folder of every Python file the gateway has imported (``sys.modules``: a module's
    file, a package's search folders), outside the system's program folders; found again
    whenever a module is added or removed."""
    last = next(reversed(sys.modules), None) if sys.modules else None
    return _module_folders(len(sys.modules), last)


@functools.lru_cache(maxsize=1)
def _module_folders(count: int, last: str | None) -> tuple[Path, ...]:
    del count, last  # the cache key: which modules are loaded
    names: set[str] = set()
    for module in list(sys.modules.values()):
        attributes = getattr(module, "__dict__", None)
        if not isinstance(attributes, dict):
            continue
        file = attributes.get("__file__")
        if isinstance(file, str) and os.path.isabs(file):
            names.add(os.path.dirname(file))
        search = attributes.get("__path__")
        if isinstance(search, list):
            names.update(entry for entry in search if isinstance(entry, str) and entry)
    programs = tuple(map(Path, PROGRAM_FOLDERS))
    found: list[Path] = []
    for name in sorted(names):
        path = Path(os.path.realpath(name))
        if not _within(path, programs):
            found.append(path)
    return _outside(found, ())


def _outside(folders: Iterable[Path], guarded: Sequence[Path]) -> tuple[Path, ...]:
    """``folders`` without those inside another of them or inside ``guarded`` (a folder inside
    a guarded one adds nothing: what contains it lies inside or contains the outer one)."""
    ordered = sorted(dict.fromkeys(folders), key=lambda p: len(p.parts))
    kept: list[Path] = []
    outer = set(guarded)
    for folder in ordered:
        if folder in outer or any(parent in outer for parent in folder.parents):
            continue
        kept.append(folder)
        outer.add(folder)
    return tuple(kept)


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
    gateway's code folders (their code is only read), never its state folders."""
    policy = policy or PathPolicy(home=home)
    if not writable:
        policy = policy.read_only()
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
    try:
        # The gateway's folders, resolved once per check (their links, as they are now).
        state, gateway = _real(policy.state_folders), _real(policy.gateway_folders)
        normal = Path(os.path.normpath(path))
        # The path as written first: it needs no resolving (``/proc/1/root/...`` is refused as
        # a kernel filesystem before its links are followed).
        problem = _folder_problem(normal, policy, use, own, state, gateway)
        if problem is not None:
            return f"{normal} {problem}"
        real = Path(os.path.realpath(path))
        if real == normal:
            return None
        problem = _folder_problem(real, policy, use, own, state, gateway)
        if problem is not None:
            return f"{real} (the real path of {path}) {problem}"
    except OSError as exc:  # a link that cannot be followed (EACCES, ELOOP...)
        return f"{path} cannot be resolved: {exc.strerror or exc}"
    return None


def _folder_problem(
    path: Path,
    policy: PathPolicy,
    use: Use,
    own: Sequence[Path],
    state: Sequence[Path],
    gateway: Sequence[Path],
) -> str | None:
    """What ``path`` is (``"is a system folder..."``), or ``None`` when it passes."""
    kernel = (*map(Path, KERNEL_FOLDERS), *_pseudo_mounts())
    system = (*map(Path, CONFIG_FOLDERS), *kernel)
    if use == "workspace":
        system = (*map(Path, PROGRAM_FOLDERS), *system)
    for folder in system:
        if _inside(path, folder):
            what = "a kernel filesystem" if folder in kernel else "a system folder"
            return f"is {what}, or inside one ({folder})"
    for folder in (*system, *map(Path, PROGRAM_FOLDERS)):
        if _above(path, folder):  # a bind is recursive: the folder would come with it
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
        if _above(path, folder):
            return f"contains {what} ({folder})"
    if use == "fs" and _within(path, own):
        return None  # the tool's own code (bound read-only anyway)
    if policy.guards_code:
        problem = _user_code_problem(path, homes, use)
        if problem is not None:
            return problem
    for folder in state:
        if _inside(path, folder):
            return f"is one of the gateway's own folders, or inside one ({folder}, its state)"
        if _above(path, folder):
            return f"contains one of the gateway's own folders ({folder}, its state)"
    for folder in gateway:
        if _inside(path, folder):
            return f"is one of the gateway's own folders, or inside one ({folder})"
        if _above(path, folder):
            return f"contains one of the gateway's own folders ({folder})"
    return None


def _user_code_problem(path: Path, homes: Sequence[Path], use: Use) -> str | None:
    """Why ``path`` holds code the user's programs load (see the module documentation)."""
    for home in dict.fromkeys(homes):
        if path != home and _inside(path, home):
            first = path.relative_to(home).parts[0]
            if first.startswith("."):
                return (
                    f"is a dot-folder of a home, or inside one ({home / first}: the "
                    "configuration and code its user's programs load)"
                )
    if use == "workspace" and "node_modules" in path.parts:
        return (
            "is, or lies inside, a node_modules folder (a package written there is what a "
            "require() from below it loads)"
        )
    for folder in runtime_user_folders():
        if _inside(path, folder):
            return f"is a runtime's user code folder, or inside one ({folder})"
        if _above(path, folder):
            return f"contains a runtime's user code folder ({folder})"
    return None


def runtime_user_folders() -> tuple[Path, ...]:
    """Where the runtimes look for the user's own packages, as this process sees them (its
    ``HOME``, ``PYTHONUSERBASE``, ``GOPATH``): Python's user base and user site folder (of this
    interpreter), every ``GOPATH`` entry and Go's default ``~/go``. Found once per value of
    those variables."""
    return _runtime_user_folders(
        os.environ.get("HOME", ""),
        os.environ.get("PYTHONUSERBASE", ""),
        os.environ.get("GOPATH", ""),
    )


@functools.lru_cache(maxsize=8)
def _runtime_user_folders(home: str, user_base: str, gopath: str) -> tuple[Path, ...]:
    del user_base  # the cache key: site reads it
    import site

    names: list[str] = []
    with contextlib.suppress(Exception):  # site's answers need a home; none: nothing to add
        names += [site.getuserbase(), site.getusersitepackages()]
    names += [entry for entry in gopath.split(os.pathsep) if entry]
    with contextlib.suppress(RuntimeError, KeyError):
        names.append(os.path.join(home or str(Path.home()), "go"))
    found: list[Path] = []
    for name in names:
        if os.path.isabs(name):
            with contextlib.suppress(OSError):
                found += [Path(os.path.normpath(name)), Path(os.path.realpath(name))]
    return tuple(f for f in dict.fromkeys(found) if f != Path("/"))


def _inside(path: Path, folder: Path) -> bool:
    """``path`` is ``folder`` or lies inside it (both normalised: compared as text, quickly)."""
    text, outer = str(path), str(folder)
    return text == outer or text.startswith(outer if outer.endswith("/") else outer + "/")


def _above(path: Path, folder: Path) -> bool:
    """``folder`` lies inside ``path`` (and is not ``path``)."""
    return path != folder and _inside(folder, path)


def _within(path: Path, folders: Iterable[Path]) -> bool:
    return any(_inside(path, folder) for folder in folders)


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
