"""A cheap fingerprint of a tool folder: what any change to the folder changes.

Starting a gateway must serve the folders as they are on disk at that moment, not as they were
when it was built (a folder removed or tightened in between must not stay callable in its old
form). Reading every folder again costs seconds at 10,000 folders; taking their fingerprints
costs a few ``stat`` calls each. A folder whose fingerprint is unchanged is not read again.

The fingerprint covers every entry under the folder (symbolic links followed, as the loader
follows them) with its inode, device, size, mode and modification and change times, plus the
folder itself. A write, a rename, a ``chmod`` or a replaced file changes at least one of them
(the change time is set by the kernel and cannot be set back by a user). Whatever cannot be
fingerprinted cheaply — an unreadable entry, a broken link, a folder with more than
:data:`MAX_ENTRIES` entries — has no fingerprint, and such a folder is always read again.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["MAX_ENTRIES", "Fingerprint", "fingerprint"]

#: Past this many entries a folder is read again rather than fingerprinted (a tool folder holds
#: a declaration and a script or two; a huge tree is not worth walking twice).
MAX_ENTRIES: Final = 256

Fingerprint = tuple[object, ...]
"""An opaque, comparable value: equal fingerprints mean the folder did not change."""


def _entry(path: str, info: os.stat_result) -> tuple[object, ...]:
    return (
        path,
        info.st_dev,
        info.st_ino,
        info.st_mode,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    )


def fingerprint(folder: Path) -> Fingerprint | None:
    """The fingerprint of ``folder``, or ``None`` when it cannot be taken cheaply (then the
    folder must be read again)."""
    try:
        root = os.path.realpath(folder, strict=True)
        entries = [_entry(str(folder), os.stat(folder)), _entry(root, os.stat(root))]
        pending = [root]
        while pending:
            with os.scandir(pending.pop()) as listing:
                for item in listing:
                    info = item.stat()  # follows links, as the loader does
                    entries.append(_entry(item.path, info))
                    if len(entries) > MAX_ENTRIES:
                        return None
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(item.path)
    except (OSError, ValueError):  # gone, unreadable, a broken or looping link
        return None
    entries.sort(key=repr)
    return tuple(entries)
