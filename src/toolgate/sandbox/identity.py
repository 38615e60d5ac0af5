"""Folders compared by what they are (``st_dev``, ``st_ino``), not by how they are spelled.

The path rule (:mod:`toolgate.path_policy`) compares text. A bind mount gives one folder a
second name: ``mount --bind $TOOLGATE_HOME /tmp/x/bm`` makes ``/tmp/x/bm`` the gateway's home
under a name no rule knows, and the covers of its protected files (made by name, under the
home) miss it. What a held descriptor (:class:`~toolgate.sandbox.bwrap.HeldPaths`) points to is
therefore checked by identity too (:class:`IdentityGuard`):

* *inside*: the descriptor's folder, or one of its ancestors (found by opening ``..`` from the
  descriptor, up to the root: the kernel's walk, which crosses mounts), is a guarded folder;
* *contains*: the descriptor's folder is an ancestor of a guarded folder (its ancestors are
  found the same way, once per check);
* a protected file or folder (``.env``, the databases, the secrets folder) whose folder lies,
  by identity, under the bound folder at another path than its own: its cover is made by name
  and would miss it there, so the bind is refused.

A few dozen ``open``/``fstat`` calls per prepared call. Whatever cannot be opened or walked is
refused (an :class:`OSError` from :meth:`IdentityGuard.problem`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["Identity", "IdentityGuard", "ancestry", "identity"]

Identity = tuple[int, int]
#: More ancestors than any real path has: a loop is refused, not followed.
MAX_DEPTH = 4096
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC


def identity(fd: int) -> Identity:
    """``(st_dev, st_ino)`` of what ``fd`` points to."""
    info = os.fstat(fd)
    return info.st_dev, info.st_ino


def ancestry(fd: int, path: Path, *, stop: Iterable[Identity] = ()) -> list[Identity]:
    """The identities of ``fd`` (opened as ``path``, its real path) and of its ancestors up to
    the root, nearest first; the walk ends early at an identity in ``stop`` (not included). A
    folder's ancestors are found from the descriptor (``..``); a file's from its folder, opened
    by its real path and checked to hold that very file. Raises :class:`OSError`."""
    stops = set(stop)
    own = os.fstat(fd)
    chain: list[Identity] = []
    current = (own.st_dev, own.st_ino)
    if current in stops:
        return chain
    chain.append(current)
    if stat.S_ISDIR(own.st_mode):
        parent = os.open("..", _DIR, dir_fd=fd)
    else:
        parent = os.open(path.parent, _DIR)
        try:
            found = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except OSError:
            os.close(parent)
            raise
        if (found.st_dev, found.st_ino) != current:
            os.close(parent)
            raise OSError(f"{path} is no longer in {path.parent}")
    try:
        for _ in range(MAX_DEPTH):
            here = identity(parent)
            if here == chain[-1] or here in stops:  # the root's ".." is the root
                return chain
            chain.append(here)
            above = os.open("..", _DIR, dir_fd=parent)
            os.close(parent)
            parent = above
    finally:
        os.close(parent)
    raise OSError(f"{path} has more than {MAX_DEPTH} ancestors")


def _open_ancestry(path: Path) -> list[Identity] | None:
    """:func:`ancestry` of ``path`` (links followed), or ``None`` when it does not exist."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return ancestry(fd, Path(os.path.realpath(path)))
    except OSError:
        return None
    finally:
        os.close(fd)


class IdentityGuard:
    """The identities of the guarded folders, of their ancestors and of the protected paths'
    folders, found once (per prepared call); :meth:`problem` checks one held descriptor."""

    def __init__(self, guarded: Iterable[Path], protected: Iterable[Path] = ()) -> None:
        self.inside: dict[Identity, Path] = {}
        """A guarded folder's identity → its path."""
        self.above: dict[Identity, Path] = {}
        """An ancestor of a guarded folder → that guarded folder."""
        self.holding: dict[Identity, tuple[Path, Path]] = {}
        """A folder that holds a protected path (itself, or an ancestor of its folder) → (that
        folder's real path, the protected path)."""
        for folder in dict.fromkeys(guarded):
            chain = _open_ancestry(folder)
            if not chain:
                continue
            self.inside.setdefault(chain[0], folder)
            for ancestor in chain[1:]:
                self.above.setdefault(ancestor, folder)
        for item in dict.fromkeys(protected):
            real = Path(os.path.realpath(item))
            with contextlib.suppress(OSError):
                info = os.stat(real)
                if stat.S_ISDIR(info.st_mode):
                    self.inside.setdefault((info.st_dev, info.st_ino), item)
                for folder in real.parents:
                    found = os.stat(folder)
                    self.holding.setdefault((found.st_dev, found.st_ino), (folder, item))

    def problem(self, fd: int, real: Path, *, own: Sequence[Path] = ()) -> str | None:
        """Why the folder ``fd`` (opened as its real path ``real``) may not be bound, by
        identity, or ``None``. ``own``: folders whose insides are the tool's own code (a
        prefix there is checked only below them). Raises :class:`OSError` when the descriptor
        cannot be walked."""
        stops: set[Identity] = set()
        for folder in own:
            if real == folder or folder in real.parents:
                with contextlib.suppress(OSError):
                    info = os.stat(folder)
                    stops.add((info.st_dev, info.st_ino))
        chain = ancestry(fd, real, stop=stops)
        first = identity(fd)
        held = self.holding.get(first)
        if held is not None and held[0] != real:
            return (
                f"is {held[0]} under another name (a bind mount or another mount of it), which "
                f"holds the gateway's protected {held[1]}"
            )
        for ancestor in chain:
            guarded = self.inside.get(ancestor)
            if guarded is not None:
                return (
                    f"is one of the gateway's own folders ({guarded}), or inside one, under "
                    "another name (the same folder by identity: a bind mount)"
                )
        if not stops:
            contained = self.above.get(first)
            if contained is not None:
                return (
                    f"contains one of the gateway's own folders ({contained}) under another name "
                    "(by identity: a bind mount)"
                )
        return None
