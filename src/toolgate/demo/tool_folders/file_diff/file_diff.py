"""file_diff: a unified diff of two files in the workspace (a toolgate demo tool folder).

Reads one JSON object on stdin (``oldPath``, ``newPath``, optional ``context``, plus
``workspacePath`` and ``sessionId``) and writes one JSON object to stdout with the statistics,
the unified diff and a ``diff`` ``_visualization``; or ``{"error": ...}``.
"""

import difflib
import json
import os
import sys
from typing import Any

MAX_BYTES = 5 * 1024 * 1024
LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".json": "json",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".md": "markdown",
    ".sh": "bash",
    ".go": "go",
    ".toml": "toml",
    ".txt": "text",
}


class Refused(Exception):
    """A problem to report as ``{"error": ...}``."""


def inside(workspace: str, path: str) -> str:
    """The real path of ``path``, which must resolve inside ``workspace`` and name no hidden
    file or folder (``.ssh``, ``.env``, ``.git``): a demo that any client may call reads
    project files, not credentials, and never from a workspace that is the whole system."""
    root = os.path.realpath(workspace)
    if root == os.path.dirname(root):
        raise Refused(
            f"the workspace is {root}, the whole file system; the demo tools read files of a "
            "project folder (start toolgate in one, or pass a workspace)"
        )
    full = os.path.realpath(os.path.join(root, path))
    if os.path.commonpath([root, full]) != root:
        raise Refused(f"{path} is outside the workspace; use files inside {root}")
    if any(part.startswith(".") for part in os.path.relpath(full, root).split(os.sep)):
        raise Refused(f"{path} is a hidden file or inside a hidden folder; the demo reads none")
    if os.path.exists(full) and not os.path.isfile(full) and not os.path.isdir(full):
        raise Refused(f"{path} is not a regular file")  # a FIFO would block the read
    return full


def read(workspace: str, path: str) -> list[str]:
    """The lines of ``path``, which must be a project file of ``workspace`` (:func:`inside`)."""
    full = inside(workspace, path)
    try:
        with open(full, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise Refused(f"no such file: {path}") from None
    except IsADirectoryError:
        raise Refused(f"{path} is a folder, not a file") from None
    except OSError as exc:
        raise Refused(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise Refused(f"{path} is larger than {MAX_BYTES} bytes")
    return raw.decode("utf-8", errors="replace").splitlines()


def hunk(
    group: list[tuple[str, int, int, int, int]], old: list[str], new: list[str]
) -> dict[str, Any]:
    first, last = group[0], group[-1]
    old_lines, new_lines = last[2] - first[1], last[4] - first[3]
    changes: list[dict[str, Any]] = []
    for tag, i1, i2, j1, j2 in group:
        if tag == "equal":
            for k in range(i2 - i1):
                changes.append(
                    {
                        "type": "context",
                        "content": old[i1 + k],
                        "oldLineNumber": i1 + k + 1,
                        "newLineNumber": j1 + k + 1,
                    }
                )
            continue
        for i in range(i1, i2):
            changes.append({"type": "removed", "content": old[i], "oldLineNumber": i + 1})
        for j in range(j1, j2):
            changes.append({"type": "added", "content": new[j], "newLineNumber": j + 1})
    return {
        # diff -u convention: an empty range starts at the line before it.
        "oldStart": first[1] + 1 if old_lines else first[1],
        "oldLines": old_lines,
        "newStart": first[3] + 1 if new_lines else first[3],
        "newLines": new_lines,
        "changes": changes,
    }


def compare(request: dict[str, Any]) -> dict[str, Any]:
    workspace = request.get("workspacePath") or os.getcwd()
    old_path, new_path = request.get("oldPath"), request.get("newPath")
    if (
        not isinstance(old_path, str)
        or not isinstance(new_path, str)
        or not old_path
        or not new_path
    ):
        raise Refused("oldPath and newPath must be non-empty strings")
    context = request.get("context", 3)
    if not isinstance(context, int) or isinstance(context, bool) or not 0 <= context <= 20:
        raise Refused("context must be an integer from 0 to 20")
    old, new = read(workspace, old_path), read(workspace, new_path)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    hunks = [hunk(group, old, new) for group in matcher.get_grouped_opcodes(context)]
    additions = sum(1 for h in hunks for c in h["changes"] if c["type"] == "added")
    deletions = sum(1 for h in hunks for c in h["changes"] if c["type"] == "removed")
    unified = "\n".join(
        difflib.unified_diff(old, new, f"a/{old_path}", f"b/{new_path}", lineterm="", n=context)
    )
    visualization: dict[str, Any] = {
        "type": "diff",
        "path": new_path if old_path == new_path else f"{old_path} → {new_path}",
        "hunks": hunks,
        "additions": additions,
        "deletions": deletions,
    }
    language = LANGUAGES.get(os.path.splitext(new_path)[1].lower())
    if language:
        visualization["language"] = language
    return {
        "identical": not hunks,
        "additions": additions,
        "deletions": deletions,
        "hunks": len(hunks),
        "diff": unified,
        "_visualization": visualization,
    }


def main() -> None:
    request = json.load(sys.stdin)
    try:
        result = compare(request if isinstance(request, dict) else {})
    except Refused as exc:
        result = {"error": str(exc)}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
