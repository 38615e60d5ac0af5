"""The one harness that runs the documentation's examples: a fenced block marked
``<!-- MARKER -->`` on the line above it, in the README or any page under ``docs/``.

The tests take the blocks from where a reader sees them, so an example that stops working fails a
test, and no test keeps a copy of it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def documentation_files() -> list[Path]:
    """The README and every Markdown page of the docs site."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def doc_block(marker: str) -> str:
    """The content of the one fenced block marked ``<!-- marker -->``."""
    pattern = re.compile(rf"<!-- {re.escape(marker)} -->\n```[\w-]*\n(.*?)```", re.DOTALL)
    found = [
        (path, match.group(1))
        for path in documentation_files()
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert found, f"no documented block marked {marker!r} in the README or docs/"
    assert len(found) == 1, f"{marker!r} marks {len(found)} blocks: {[str(p) for p, _ in found]}"
    return found[0][1]


def marked_blocks(suffix: str) -> dict[str, str]:
    """Every fenced block whose marker ends with ``suffix``, by marker."""
    pattern = re.compile(rf"<!-- ([\w.:-]*{re.escape(suffix)}) -->\n```[\w-]*\n(.*?)```", re.DOTALL)
    return {
        match.group(1): match.group(2)
        for path in documentation_files()
        for match in pattern.finditer(path.read_text(encoding="utf-8"))
    }
