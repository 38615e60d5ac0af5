"""The file system as declarations meet it, without exceptions: what a path is, and why not."""

from __future__ import annotations

import stat
from enum import Enum
from pathlib import Path

__all__ = ["PathKind", "os_reason", "path_kind"]


class PathKind(Enum):
    """What a path names, as far as a declaration cares."""

    FILE = "file"
    FOLDER = "folder"
    OTHER = "other"
    """A socket, FIFO, device…: never read."""
    MISSING = "missing"


def os_reason(exc: BaseException) -> str:
    """The OS's reason for a failure, without the path (diagnostics name the path)."""
    reason = exc.strerror if isinstance(exc, OSError) else None
    return reason or str(exc)


def path_kind(path: Path) -> PathKind | str:
    """What ``path`` is (symlinks followed), or why it cannot be checked (the OS's reason).

    Unlike ``Path.is_file()`` and friends, which raise ``PermissionError`` and other OS errors on
    Python 3.11 (for example inside a folder of mode 000), this never raises: a path that cannot
    be checked is a reason to report, not a missing file.
    """
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return PathKind.MISSING
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        return os_reason(exc)
    if stat.S_ISREG(mode):
        return PathKind.FILE
    if stat.S_ISDIR(mode):
        return PathKind.FOLDER
    return PathKind.OTHER
