"""toolgate's worker protocol for Python tools: one JSON line in, one JSON line out, per call.

Use it from a tool folder whose tool.md says ``protocol: worker``::

    from toolgate_worker import serve

    def handle(request):
        # request: the tool's arguments, plus workspacePath and sessionId
        return {"message": "Hello, " + request.get("name", "world") + "!"}

    serve(handle)

The process stays up between calls, so imports and caches are paid once. ``serve`` answers one
call at a time until stdin closes. A handler that raises, or returns something that is not a
dict, answers ``{"error": ...}`` for that call; the worker keeps serving. While the handler runs,
``print`` goes to stderr, so it cannot break the protocol.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["serve"]


def serve(handle: Callable[[dict[str, Any]], Any]) -> None:
    """Answer each JSON line on stdin with ``handle``'s result as one JSON line on stdout."""
    answers = sys.stdout
    sys.stdout = sys.stderr  # a stray print must not become an answer
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = handle(json.loads(line))
            if not isinstance(answer, dict):
                answer = {"error": f"the tool returned {type(answer).__name__}, not an object"}
        except Exception as exc:  # noqa: BLE001 - the call's error, never the worker's end
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer, default=str) + "\n")
        answers.flush()
