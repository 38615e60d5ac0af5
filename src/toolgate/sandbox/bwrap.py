"""The bubblewrap command line of one sandboxed call: what the tool sees of the host.

A sandboxed process sees a filesystem assembled from scratch (bubblewrap starts from an empty
tmpfs root), mounted in this order (later mounts cover earlier ones):

=========================  ======================================================================
path                       what
=========================  ======================================================================
``/usr``, ``/bin``,        the system's programs and libraries, read-only. On merged-/usr systems
``/sbin``, ``/lib*``       ``/bin`` and ``/lib*`` are the same symlinks as on the host.
``/etc`` (a few files)     only what the dynamic loader and runtimes need: ``ld.so.cache``,
                           ``localtime``, ``alternatives``; with a ``network``
                           permission also the CA certificates (``ssl``, ``ca-certificates``).
                           Never ``passwd``, ``shadow``, ``hosts`` or ``resolv.conf``.
runtime / code folders     the interpreter when it lives outside ``/usr`` (its installation root),
                           the tool's own folder, configured ``system_paths``: read-only
``fs`` prefixes            the tool's declared ``permissions.fs``: read-only, at their real path
workspace                  at its real path; writable only when the side-effect level writes
                           (``read_only`` tools get a read-only bind)
protected paths            the gateway's state (database, ``.env``, secrets) found under any bind
                           is covered again: an empty tmpfs over a folder, ``/dev/null`` over a
                           file
``/tmp``                   a private tmpfs of a fixed size
``/run/toolgate-home``     the tool's ``HOME``: a private tmpfs of the same size, new for every
                           call, under ``/run``, where no workspace or prefix is ever bound
``/proc``, ``/dev``        a fresh procfs of the sandbox's own PID namespace; a minimal ``/dev``:
                           null, zero, full, random, urandom and the ``fd``/``std*`` symlinks
                           (no terminal, no ``/dev/shm``). Mounted after every bind, and no
                           bind is ever made of a path that is, contains or lies under
                           ``/proc``, ``/sys`` or ``/dev`` (:data:`KERNEL_ROOTS`): whatever a
                           declaration names, the tool sees only its own processes and devices,
                           and never the host's ``/sys``
=========================  ======================================================================

What is bound is what was checked: the runner opens each workspace, ``fs`` prefix and code
folder once (:class:`HeldPaths`: ``O_PATH``), checks the real path of what the descriptor points
to, and bubblewrap binds the descriptor itself (``--bind-fd`` / ``--ro-bind-fd``), never the path
again. A path bound by name is resolved a second time when bubblewrap mounts it, and a symbolic
link swapped in between (``renameat2(RENAME_EXCHANGE)`` of a folder and a link to the gateway's
home, in a loop) would give the tool a folder that was never checked. bubblewrap itself turns
the descriptor into a path once more (it cannot mount a descriptor of another user namespace),
mounts it, then compares the mount with the descriptor (``fstat``) and exits with "Race
condition binding dirfd" when they differ: a swap there makes the call fail, never binds
another folder. Every bubblewrap with ``--bind-fd`` has that check (they came in the same
change); :func:`~toolgate.sandbox.host.probe_host` makes compartments unavailable without it.
bubblewrap closes the descriptors before it starts the command, so the tool never holds one (an
``O_PATH`` descriptor of a host folder would lead out of the sandbox with ``openat(fd, "..")``).

The kernel enforces the mounts: a symlink inside an allowed prefix that points to ``/etc/shadow``
resolves inside the sandbox's mount namespace, where ``/etc/shadow`` does not exist.

Namespaces: ``--unshare-all`` (user, mount, PID, network, IPC, UTS, cgroup), so the tool has no
network interface but loopback unless the egress bridge gives it a route; ``--die-with-parent``
(killing ``bwrap`` kills the whole sandbox: its PID 1 dies and the kernel kills the namespace);
``--new-session`` (no terminal injection through ``TIOCSTI``).

Capabilities: ``--cap-drop ALL``. bubblewrap always sets ``no_new_privs``, but started by root
(CI, most containers) it *keeps every capability* inside the sandbox unless told otherwise
(``CapEff 000001fffeffffff``): the tool could then ``umount`` the ``/dev/null`` cover of a
protected file, or ``mount -o remount,bind,rw`` a read-only bind and write the host's ``/usr``.
With ``--cap-drop ALL`` the effective, permitted and bounding sets are empty (``CapEff 0``)
whoever starts the sandbox; :func:`~toolgate.sandbox.host.probe_host` checks it on the host.
"""

from __future__ import annotations

import contextlib
import functools
import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "KERNEL_ROOTS",
    "SYSTEM_ROOTS",
    "BwrapSpec",
    "HeldPaths",
    "bwrap_argv",
    "held_path",
    "install_root",
    "kernel_bind_problem",
    "nested_userns_flags",
    "user_namespaces_off",
]

#: Top-level system folders bound read-only (or re-created as the host's symlinks).
SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: Files and folders of /etc a runtime needs: the dynamic loader's cache (``ld.so.conf`` is
#: read only by ``ldconfig``), the time zone, Debian's alternatives (``awk``, ``editor``...).
ETC_BASE = (
    "/etc/ld.so.cache",
    "/etc/localtime",
    "/etc/alternatives",
)
#: The device nodes of the sandbox's /dev (bound from the host; all harmless).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
#: The usual /dev symlinks into /proc (bash's process substitution uses /dev/fd).
DEV_LINKS = (
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
)
#: Added for tools with a network permission: TLS needs the CA certificates.
ETC_NETWORK = ("/etc/ssl", "/etc/ca-certificates", "/etc/pki")
#: The kernel's filesystems: the sandbox has its own ``/proc`` and ``/dev`` and no ``/sys``; a
#: bind that is, contains or lies under one of these is never made (see
#: :func:`kernel_bind_problem`).
KERNEL_ROOTS = ("/proc", "/sys", "/dev")


def kernel_bind_problem(path: Path) -> str | None:
    """Why ``path`` is never bound into a sandbox, or ``None`` when it may be.

    A bind is recursive and follows symbolic links, so both the path as given and its real path
    count, and a folder that *contains* a kernel filesystem (``/``) is refused with it.
    """
    for spelling in dict.fromkeys((Path(os.path.abspath(path)), Path(os.path.realpath(path)))):
        for root in map(Path, KERNEL_ROOTS):
            if _under(spelling, root):
                return f"{spelling} is, or lies under, the kernel filesystem {root}"
            if spelling in root.parents:
                return f"{spelling} contains the kernel filesystem {root}"
    return None


def install_root(program: str) -> list[Path]:
    """The folders to bind for a runtime program that lives outside the system roots.

    ``/opt/node/bin/node`` → ``/opt/node`` (its ``lib`` is next to ``bin``); a program not in a
    ``bin`` folder → its own folder. Both the path as given and its real path count: a virtual
    environment's ``python3`` is a symlink into ``/usr``, but the interpreter finds its
    environment (``pyvenv.cfg``, ``site-packages``) through the path it was started as. Empty
    when everything is under ``/usr`` and co.
    """
    roots: list[Path] = []
    for path in dict.fromkeys((Path(os.path.abspath(program)), Path(os.path.realpath(program)))):
        if any(_under(path, Path(root)) for root in SYSTEM_ROOTS):
            continue
        parent = path.parent
        roots.append(parent.parent if parent.name == "bin" else parent)
    return roots


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def held_path(fd: int) -> Path:
    """The real path of what the descriptor ``fd`` points to now.

    Raises :class:`OSError` when it has no path any more (deleted, or moved out of this mount
    namespace's reach): such a folder cannot be checked, so it is not bound.
    """
    text = os.readlink(f"/proc/self/fd/{fd}")
    path = Path(text)
    if not path.is_absolute():  # "anon_inode:…", a path outside our root
        raise OSError(f"the descriptor points to {text!r}, not to a path")
    try:
        found, opened = os.stat(path), os.fstat(fd)
    except OSError as exc:  # "… (deleted)"
        raise OSError(f"{text} is gone: {exc.strerror or exc}") from None
    if (found.st_dev, found.st_ino) != (opened.st_dev, opened.st_ino):
        raise OSError(f"{text} was replaced while it was opened")
    return path


class HeldPaths:
    """Host paths opened once for one sandboxed call: what its binds show.

    :meth:`hold` opens a path (``O_PATH | O_CLOEXEC``, following links) and returns the real path
    of what it opened; check *that* path, then bind the descriptor (:attr:`BwrapSpec.held`), so a
    link swapped in after the check changes nothing. The descriptors stay open until
    :meth:`close` (the end of the call) and are passed to bubblewrap (:attr:`fds`). A few
    syscalls per path.
    """

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def hold(self, path: Path, *, directory: bool = False) -> Path:
        """Open ``path`` and return the real path it now stands for (raises :class:`OSError`)."""
        flags = os.O_PATH | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
        fd = os.open(path, flags)
        try:
            real = held_path(fd)
        except BaseException:
            os.close(fd)
            raise
        if real in self._fds:  # the same folder twice (a prefix and a code folder): one bind
            os.close(fd)
        else:
            self._fds[real] = fd
        return real

    def fd(self, real: Path) -> int:
        """The descriptor held for ``real`` (a path :meth:`hold` returned)."""
        return self._fds[real]

    @property
    def held(self) -> dict[Path, int]:
        """Real path → descriptor, for :attr:`BwrapSpec.held`."""
        return dict(self._fds)

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptors the process that starts ``bwrap`` must inherit (``pass_fds``)."""
        return tuple(self._fds.values())

    def close(self) -> None:
        fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> HeldPaths:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class BwrapSpec:
    """Everything that decides the bubblewrap command line of one call."""

    command: Sequence[str]
    """The command run inside the sandbox (with its ``prlimit`` / bridge prefixes)."""
    workspace: Path | None
    """Bound at the same path and used as working directory; ``None``: ``/tmp``."""
    workspace_writable: bool
    ro_paths: Sequence[Path] = ()
    """Code and runtime folders plus the declared ``fs`` prefixes (read-only, same path)."""
    protected: Sequence[Path] = ()
    """The gateway's state: hidden again wherever a bind would expose it."""
    network: bool = False
    """The tool has a network permission (the CA certificates are bound)."""
    extra_binds: Sequence[tuple[Path, Path]] = ()
    """``(host, sandbox)`` read-write binds (the egress socket's folder)."""
    tmp_size: int = 256 * 1024 * 1024
    hostname: str = "toolgate"
    held: Mapping[Path, int] = field(default_factory=dict)
    """Real path → ``O_PATH`` descriptor (:class:`HeldPaths`). The workspace and a read-only
    path found here are bound from the descriptor (``--bind-fd`` / ``--ro-bind-fd``), at that
    path; the starter of ``bwrap`` must pass these descriptors (:attr:`pass_fds`)."""
    require_held: bool = False
    """Refuse (:class:`ValueError`) a workspace or read-only path not in :attr:`held`: a call's
    sandbox binds nothing by name that a caller or a declaration chose."""

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors ``bwrap`` inherits (``subprocess``'s ``pass_fds``)."""
        return tuple(self.held.values())


def bwrap_argv(bwrap: str, spec: BwrapSpec) -> list[str]:
    """The complete ``bwrap`` command line for ``spec`` (see the module documentation).

    Read-only paths and extra binds that :func:`kernel_bind_problem` refuses are left out (the
    loaders refuse such ``fs`` prefixes already; this is the second layer); a workspace it
    refuses raises :class:`ValueError` (the runner refuses those before it gets here), since
    a sandbox without its workspace would run the tool somewhere else.
    """
    if spec.workspace is not None and (problem := kernel_bind_problem(spec.workspace)):
        raise ValueError(
            f"the workspace {spec.workspace} cannot be bound into a sandbox: {problem}"
        )
    argv = [
        bwrap,
        "--unshare-all",
        *nested_userns_flags(bwrap),
        "--die-with-parent",
        "--new-session",
        # Started by root, bubblewrap keeps every capability in the sandbox unless told so.
        "--cap-drop",
        "ALL",
        "--hostname",
        spec.hostname,
        # First, so that binds of folders under /tmp (a workspace there) land on top of it.
        "--size",
        str(spec.tmp_size),
        "--tmpfs",
        "/tmp",
        # The sandbox's HOME (runner.SANDBOX_HOME): its own tmpfs under /run, where no
        # workspace or fs prefix is ever bound (none is $HOME/.local, $HOME/.node_modules...).
        "--size",
        str(spec.tmp_size),
        "--tmpfs",
        "/run/toolgate-home",
    ]
    for root in SYSTEM_ROOTS:
        if os.path.islink(root):
            argv += ["--symlink", os.readlink(root), root]
        elif os.path.isdir(root):
            argv += ["--ro-bind", root, root]
    etc = ETC_BASE + (ETC_NETWORK if spec.network else ())
    for name in etc:
        if os.path.lexists(name):
            argv += ["--ro-bind", name, name]
    bound: list[Path] = []
    for path in _dedupe(p for p in spec.ro_paths if kernel_bind_problem(p) is None):
        argv += _bind(spec, path, writable=False)
        bound.append(path)
    if spec.workspace is not None:
        argv += _bind(spec, spec.workspace, writable=spec.workspace_writable)
        bound.append(spec.workspace)
    for host, inside in spec.extra_binds:
        if kernel_bind_problem(host) is None and kernel_bind_problem(inside) is None:
            argv += ["--bind", str(host), str(inside)]
    argv += _cover_protected(spec.protected, bound)
    # After every bind, so the sandbox's own /proc and /dev win whatever was bound.
    argv += ["--proc", "/proc"]
    # A minimal /dev: the harmless character devices and the fd symlinks. Cheaper than
    # bubblewrap's --dev (no devpts mount, no /dev/shm), which costs ~1.5 ms per call.
    for device in DEVICES:
        argv += ["--dev-bind", device, device]
    for name, target in DEV_LINKS:
        argv += ["--symlink", target, name]
    # The root itself is bubblewrap's tmpfs: read-only, so only /tmp and a writable workspace
    # take writes.
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", str(spec.workspace) if spec.workspace is not None else "/tmp"]
    argv += ["--", *spec.command]
    return argv


@functools.cache
def nested_userns_flags(bwrap: str) -> tuple[str, ...]:
    """``--unshare-user --disable-userns`` when ``bwrap`` has them (bubblewrap 0.8.0 and later)
    and this host makes user namespaces at all, else nothing.

    Without them a tool may create user namespaces of its own inside the sandbox. That does not
    undo the sandbox (its mounts stay locked in the new namespace), but it reaches the kernel's
    namespace code, the usual first step of a kernel exploit, which container runtimes keep
    away from their workloads too; ``sandbox check`` says which holds. Asked once per program
    (``bwrap --help``).

    Where user namespaces are off (:func:`user_namespaces_off`), ``--unshare-all`` makes none
    (bubblewrap's ``--unshare-user-try``) and a root gateway's sandbox works without one; an
    explicit ``--unshare-user`` would make every sandbox fail to start there. A tool cannot make
    one either then, so nothing is lost."""
    if user_namespaces_off() is not None:
        return ()
    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    if b"--disable-userns" not in done.stdout + done.stderr:
        return ()
    return ("--unshare-user", "--disable-userns")


def user_namespaces_off() -> str | None:
    """Why this host makes no user namespaces (the checks of bubblewrap's
    ``--unshare-user-try``), or ``None`` when it may."""
    if not os.path.exists("/proc/self/ns/user"):
        return "the kernel has no user namespaces"
    with contextlib.suppress(OSError):
        if Path("/sys/module/user_namespace/parameters/enable").read_text().strip() in {"N", "0"}:
            return "user_namespace.enable is off"
    with contextlib.suppress(OSError):
        if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
            return "user.max_user_namespaces is 0"
    return None


def _bind(spec: BwrapSpec, path: Path, *, writable: bool) -> list[str]:
    """The bind of ``path`` at the same path: from its descriptor when :attr:`BwrapSpec.held`
    has one (what was opened and checked), else by name."""
    fd = spec.held.get(path)
    if fd is not None:
        return ["--bind-fd" if writable else "--ro-bind-fd", str(fd), str(path)]
    if spec.require_held:
        raise ValueError(f"{path} was not opened and checked before the sandbox was prepared")
    return ["--bind" if writable else "--ro-bind", str(path), str(path)]


def _dedupe(paths: Iterable[Path]) -> list[Path]:
    """Drop duplicates and paths inside another path of the list (bound once, by the parent)."""
    unique = sorted({Path(os.path.abspath(p)) for p in paths}, key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(_under(path, other) for other in kept):
            kept.append(path)
    return kept


def _cover_protected(protected: Sequence[Path], bound: Sequence[Path]) -> list[str]:
    """Mounts that hide each protected path lying under a bound folder (both spellings: the
    path as given and its real path, since a bind follows symlinks)."""
    argv: list[str] = []
    for item in protected:
        for path in {Path(os.path.abspath(item)), Path(os.path.realpath(item))}:
            if not path.exists() or not any(_under(path, b) for b in bound):
                continue
            if path.is_dir():
                argv += ["--tmpfs", str(path)]
            else:
                argv += ["--ro-bind", "/dev/null", str(path)]
    return argv
