"""The helpers a ``protocol: worker`` tool can copy next to its script (``toolgate tools new
NAME --protocol worker`` does): ``toolgate_worker.py`` for Python and ``toolgate_worker.mjs``
for Node.js and Bun. Each is a few lines, with no dependency, that read one JSON line per call,
call the tool's handler and write its answer as one JSON line."""

from __future__ import annotations

from pathlib import Path

__all__ = ["HELPERS"]

_HERE = Path(__file__).resolve().parent

#: The helper file of each runtime that has one.
HELPERS: dict[str, Path] = {
    "python": _HERE / "toolgate_worker.py",
    "node": _HERE / "toolgate_worker.mjs",
    "bun": _HERE / "toolgate_worker.mjs",
}
