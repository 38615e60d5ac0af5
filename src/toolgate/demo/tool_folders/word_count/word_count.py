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
        full = path if os.path.isabs(path) else os.path.join(workspace, path)
        counted = count(full, path)
        if "error" in counted:
            result = counted
        else:
            words = counted["words"]
            note = f"Counted {words} word{'' if words == 1 else 's'} in {path}."
            result = {"path": path, **counted, "_visualization": {"type": "none", "message": note}}
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
