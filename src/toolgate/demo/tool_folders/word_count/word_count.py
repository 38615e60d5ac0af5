"""word_count: count the words, lines and characters of a file (a toolgate demo tool folder).

Reads one JSON object on stdin (``path`` plus ``workspacePath`` and ``sessionId``) and writes one
JSON object to stdout: ``{"path", "words", "lines", "characters"}`` with a ``none``
``_visualization`` (a one-line note for people), or ``{"error": ...}``.
"""

import json
import os
import sys
from typing import Any

MAX_BYTES = 10 * 1024 * 1024


class Refused(Exception):
    """A path the demo does not read (its message is the ``error``)."""


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


def count(path: str, shown: str) -> dict[str, Any]:
    """Count ``path``; messages name it as ``shown`` (the path as the caller gave it)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {"error": f"no such file: {shown}"}
    except IsADirectoryError:
        return {"error": f"{shown} is a folder, not a file"}
    except OSError as exc:
        return {"error": f"cannot read {shown}: {exc.strerror or exc}"}
    if len(raw) > MAX_BYTES:
        return {"error": f"{shown} is larger than {MAX_BYTES} bytes; count a smaller file"}
    text = raw.decode("utf-8", errors="replace")
    return {
        "words": len(text.split()),
        "lines": len(text.splitlines()),
        "characters": len(text),
    }


def main() -> None:
    request = json.load(sys.stdin)
    path = request.get("path")
    if not isinstance(path, str) or not path:
        result: dict[str, Any] = {"error": "'path' must be a non-empty string"}
    else:
        workspace = request.get("workspacePath") or os.getcwd()
        try:
            counted = count(inside(workspace, path), path)
        except Refused as refused:
            counted = {"error": str(refused)}
        if "error" in counted:
            result = counted
        else:
            words = counted["words"]
            note = f"Counted {words} word{'' if words == 1 else 's'} in {path}."
            result = {"path": path, **counted, "_visualization": {"type": "none", "message": note}}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
