"""Build ``diff`` visualizations from two texts with :mod:`difflib`."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

__all__ = ["TextDiff", "diff_texts", "guess_language"]

_LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".tsx": "tsx",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".md": "markdown",
    ".sh": "bash",
    ".go": "go",
    ".rs": "rust",
    ".toml": "toml",
    ".html": "html",
    ".css": "css",
    ".txt": "text",
}

#: Lines of unchanged context around each change, as in ``diff -u``.
CONTEXT_LINES = 3


def guess_language(path: str) -> str | None:
    """The highlighting language for a file name, from its extension (``None`` when unknown)."""
    return _LANGUAGES.get(PurePosixPath(path).suffix.lower())


@dataclass(frozen=True, slots=True)
class TextDiff:
    """The difference between two texts: a unified diff and its visualization."""

    unified: str
    """``diff -u`` text (what the model reads)."""
    additions: int
    deletions: int
    visualization: dict[str, Any]
    """A ``diff`` visualization (camelCase keys)."""


def _hunk(group: list[tuple[str, int, int, int, int]], old: list[str], new: list[str]) -> Any:
    first, last = group[0], group[-1]
    old_lines, new_lines = last[2] - first[1], last[4] - first[3]
    changes: list[dict[str, Any]] = []
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            for offset in range(i2 - i1):
                changes.append(
                    {
                        "type": "context",
                        "content": old[i1 + offset],
                        "oldLineNumber": i1 + offset + 1,
                        "newLineNumber": j1 + offset + 1,
                    }
                )
            continue
        for i in range(i1, i2):
            changes.append({"type": "removed", "content": old[i], "oldLineNumber": i + 1})
        for j in range(j1, j2):
            changes.append({"type": "added", "content": new[j], "newLineNumber": j + 1})
    return {
        # ``diff -u`` convention: an empty range starts at the line before it.
        "oldStart": first[1] + 1 if old_lines else first[1],
        "oldLines": old_lines,
        "newStart": first[3] + 1 if new_lines else first[3],
        "newLines": new_lines,
        "changes": changes,
    }


def diff_texts(old: str, new: str, path: str) -> TextDiff:
    """Compare ``old`` with ``new`` (the contents of ``path``) line by line."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    groups = matcher.get_grouped_opcodes(CONTEXT_LINES)
    hunks = [_hunk(group, old_lines, new_lines) for group in groups]
    additions = sum(1 for h in hunks for c in h["changes"] if c["type"] == "added")
    deletions = sum(1 for h in hunks for c in h["changes"] if c["type"] == "removed")
    unified = "\n".join(
        difflib.unified_diff(
            old_lines, new_lines, f"a/{path}", f"b/{path}", lineterm="", n=CONTEXT_LINES
        )
    )
    visualization: dict[str, Any] = {
        "type": "diff",
        "path": path,
        "hunks": hunks,
        "additions": additions,
        "deletions": deletions,
    }
    language = guess_language(path)
    if language is not None:
        visualization["language"] = language
    return TextDiff(unified, additions, deletions, visualization)
