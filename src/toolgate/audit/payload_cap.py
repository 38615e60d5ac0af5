"""Bounded audit records: an oversized payload is replaced by a marker, optionally kept in a file.

One call's arguments, result, visualization or detail can be megabytes (a 910 KB argument was
seen); kept whole in every record it bloats the log, every query and every export. Past
:attr:`PayloadCap.max_bytes` (of its compact JSON, 8 KiB by default) a payload is replaced by::

    {"_truncated": true, "original_size": 1048602, "preview": "{\\"text\\": \\"xxxx…",
     "full": "/tmp/toolgate/audit/call_ab12.args.json"}

``original_size`` is the payload's size in bytes of JSON, ``preview`` its first
:data:`PREVIEW_CHARS` characters, ``full`` (only with :attr:`PayloadCap.keep_full`) the file
holding the whole value. ``message`` and ``detail`` are text, so they keep their first bytes and
end with a note saying the same. The record stays valid JSON and is read back like any other.

The values capped here are the record's, already redacted (:func:`~toolgate.audit.record.
record_from`): a masked secret is masked in the file too. The files are written in the audit
folder of the spill root (``overflow.dir``, default ``<tmp>/toolgate``), private to this user
(folder 0700, files 0600, never through a planted link).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..path_policy import private_folder_check
from .record import AuditRecord
from .sqlite_rows import dump

__all__ = ["DEFAULT_MAX_PAYLOAD", "PREVIEW_CHARS", "PayloadCap"]

#: Bytes of one payload's JSON kept in a record: arguments and results of ordinary calls fit
#: (they are a few hundred bytes), a pasted document or a base64 file does not.
DEFAULT_MAX_PAYLOAD = 8 * 1024
#: Characters of an oversized payload's JSON kept as its preview.
PREVIEW_CHARS = 256
#: The payload fields of a record, and its text fields (an error's message can be as large as
#: the exception a tool raised).
_FIELDS = ("args", "result", "visualization")
_TEXT_FIELDS = ("message", "detail")

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class PayloadCap:
    """How large a payload an audit record keeps, and whether the rest goes to a file."""

    max_bytes: int | None = DEFAULT_MAX_PAYLOAD
    """Bytes of one payload's compact JSON (``None``: no limit)."""
    keep_full: bool = False
    """Write each oversized payload whole to a file under :attr:`folder`, named by the record."""
    folder: Path | None = None
    """Where the full payloads go (required with :attr:`keep_full`)."""

    def apply(self, record: AuditRecord) -> AuditRecord:
        """``record`` with every payload over the limit replaced by its marker."""
        limit = self.max_bytes
        if limit is None:
            return record
        changes: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(record, name)
            if value is None:
                continue
            text = dump(value)
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > limit:
                changes[name] = self._marker(record.call_id, name, text, size)
        for name in _TEXT_FIELDS:
            text = getattr(record, name)
            if text is not None:
                data = text.encode("utf-8", "surrogatepass")
                if len(data) > limit:
                    changes[name] = self._cut_text(record.call_id, name, text, data, limit)
        return dataclasses.replace(record, **changes) if changes else record

    def _cut_text(self, call_id: str, name: str, text: str, data: bytes, limit: int) -> str:
        """A text field's first ``limit`` bytes and a note saying what was cut."""
        full, error = self._keep(call_id, f"{name}.txt", text)
        where = f"; the full {name} is in {full}" if full else ""
        where += f"; it could not be kept: {error}" if error else ""
        kept = data[:limit].decode("utf-8", "ignore")
        return (
            f"{kept}\n[truncated by toolgate: the {name} has {len(data)} bytes, the first "
            f"{limit} are kept{where}]"
        )

    def _marker(self, call_id: str, name: str, text: str, size: int) -> dict[str, Any]:
        marker: dict[str, Any] = {
            "_truncated": True,
            "original_size": size,
            "preview": text[:PREVIEW_CHARS],
        }
        full, error = self._keep(call_id, f"{name}.json", text)
        if full is not None:
            marker["full"] = full
        if error is not None:
            marker["full_error"] = error
        return marker

    def _keep(self, call_id: str, suffix: str, text: str) -> tuple[str | None, str | None]:
        """Write ``text`` to the call's file: (its path, or why it could not be written); both
        ``None`` when full payloads are not kept. The record is written either way."""
        if not self.keep_full or self.folder is None:
            return None, None
        try:
            return self._write(call_id, suffix, text), None
        except OSError as exc:
            return None, f"{type(exc).__name__}: {exc}"

    def _write(self, call_id: str, suffix: str, text: str) -> str:
        folder = self.folder
        assert folder is not None
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
        private_folder_check(folder)  # never into a link or another user's folder
        path = folder / f"{_SAFE.sub('_', call_id)[:80]}.{suffix}"
        # O_EXCL: never follow a planted link or overwrite another record's payload.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        return str(path)
