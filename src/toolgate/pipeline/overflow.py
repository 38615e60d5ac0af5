"""Context overflow protection: the overflow rule (50,000/10,000 characters).

Content over the limit (50,000 characters by default) is written in full to a file in a
per-session temp folder; the model gets the first 10,000 characters and a note with the path.

Binary content blocks (images, audio, embedded blobs) are never measured as text: one is kept
whole up to :data:`DEFAULT_BINARY_LIMIT` characters of base64, and one result up to
:data:`DEFAULT_BINARY_TOTAL` in all; beyond either, a block's bytes are written to a file in the
same folder (:meth:`OverflowSpiller.spill_bytes`) and the block replaced by a note with the path
(:mod:`toolgate.pipeline.content_shaping`).

The spill folder (default ``<tmp>/toolgate``, or ``overflow.dir``) is one of the gateway's state
folders: no sandbox is shown it (:mod:`toolgate.path_policy`). It and the session folders are
made without following a link planted in their place, and must be this user's (mode 0700).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..model import Overflow
from ..path_policy import private_folder_check, spill_root

__all__ = [
    "DEFAULT_BINARY_LIMIT",
    "DEFAULT_BINARY_TOTAL",
    "DEFAULT_OVERFLOW_LIMIT",
    "DEFAULT_PREVIEW_CHARS",
    "OverflowSpiller",
]

DEFAULT_OVERFLOW_LIMIT = 50_000
DEFAULT_PREVIEW_CHARS = 10_000
#: Characters of base64 a binary content block may carry inline (4 MiB of text, 3 MiB of bytes:
#: under the image limits of the model APIs); a larger block is spilled to a file.
DEFAULT_BINARY_LIMIT = 4 * 1024 * 1024
#: Characters of base64 all the binary blocks of one result may carry inline together (16 MiB of
#: text): blocks beyond it are spilled to files as a too-large block is.
DEFAULT_BINARY_TOTAL = 16 * 1024 * 1024
_SAFE_PART = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")

_SAFE_SESSION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _session_folder_name(session_id: str | None) -> str:
    # A session id comes from the caller; it must never steer the path (no "..", no "/").
    if session_id is None:
        return "no-session"
    if _SAFE_SESSION.match(session_id) and session_id not in {".", ".."}:
        return session_id
    return "s-" + hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Spilled:
    """The model-facing preview and where the full text went."""

    preview: str
    overflow: Overflow


class OverflowSpiller:
    """Decides when content is too large, and writes it out when it is."""

    def __init__(
        self,
        *,
        limit: int = DEFAULT_OVERFLOW_LIMIT,
        preview_chars: int = DEFAULT_PREVIEW_CHARS,
        root: Path | None = None,
        binary_limit: int = DEFAULT_BINARY_LIMIT,
        binary_total: int = DEFAULT_BINARY_TOTAL,
    ) -> None:
        if limit < 1 or preview_chars < 0 or preview_chars > limit:
            raise ValueError(
                f"overflow limits must satisfy 0 <= preview ({preview_chars}) <= limit ({limit})"
            )
        if binary_limit < 0:
            raise ValueError(f"overflow binary_limit must be >= 0, got {binary_limit}")
        if binary_total < 0:
            raise ValueError(f"overflow binary_total must be >= 0, got {binary_total}")
        self.limit = limit
        self.preview_chars = preview_chars
        self.binary_limit = binary_limit
        self.binary_total = binary_total
        self.root = Path(os.path.abspath(root if root is not None else spill_root()))

    def exceeds(self, text: str) -> bool:
        """True when ``text`` is over the limit (exactly ``limit`` characters still fits)."""
        return len(text) > self.limit

    def _path(self, session_id: str | None, call_id: str, part: str | None, suffix: str) -> Path:
        if part is not None and not _SAFE_PART.match(part):
            raise ValueError(f"overflow part {part!r} is not a safe file name part")
        self.root.parent.mkdir(parents=True, exist_ok=True)
        folder = self.root / _session_folder_name(session_id)
        for private in (self.root, folder):
            # Never through a link or into another user's folder planted in its place.
            with contextlib.suppress(FileExistsError):
                os.mkdir(private, 0o700)
            private_folder_check(private)
        name = call_id if part is None else f"{call_id}.{part}"
        return folder / f"{name}{suffix}"

    def spill_bytes(
        self, data: bytes, *, session_id: str | None, call_id: str, part: str, suffix: str
    ) -> Path:
        """Write ``data`` to ``<root>/<session>/<call_id>.<part><suffix>`` and return the path
        (a binary content block too large to pass inline)."""
        path = self._path(session_id, call_id, part, suffix)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return path

    def spill(
        self, text: str, *, session_id: str | None, call_id: str, part: str | None = None
    ) -> Spilled:
        """Write ``text`` to ``<root>/<session>/<call_id>.txt`` (``<call_id>.<part>.txt`` for
        one block of a result) and return the preview."""
        path = self._path(session_id, call_id, part, ".txt")
        # O_EXCL: never follow a planted symlink or overwrite another call's output.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        note = (
            f"\n\n[Output truncated by toolgate: the full result has {len(text):,} characters "
            f"and only the first {self.preview_chars:,} are shown above. The complete output was "
            f"saved to {path}; read that file if you need the rest.]"
        )
        return Spilled(
            preview=text[: self.preview_chars] + note,
            overflow=Overflow(path=str(path), original_size=len(text)),
        )
