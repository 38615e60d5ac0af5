"""toolgate's worker protocol for Python tools: one JSON line in, one JSON line out, per call.

Use it from a tool folder whose tool.md says ``protocol: worker``::

    from toolgate_worker import serve

    def handle(request):
        # request: the tool's arguments, plus workspacePath and sessionId
        return {"message": "Hello, " + request.get("name", "world") + "!"}

    serve(handle)

The process stays up between calls, so imports and caches are paid once. Each input line carries
``_call``, which the answer must carry back (``serve`` does it; the handler never sees it).
``serve`` answers one call at a time until stdin closes. A handler that raises, or returns
something that is not a dict, answers ``{"error": ...}`` for that call; the worker keeps
serving. Everything else written to stdout (``print``, C code, child processes) goes to stderr,
so it cannot break the protocol.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["serve"]


def serve(handle: Callable[[dict[str, Any]], Any]) -> None:
    """Answer each JSON line on stdin with ``handle``'s result as one JSON line on stdout."""
    # Answers get a descriptor of their own; file descriptor 1 itself (what print, C code and
    # child processes write to) now leads to stderr, so nothing stray can become an answer.
    sys.stdout.flush()
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        call = request.pop("_call", None)  # the gateway's call number, echoed with the answer
        try:
            answer = handle(request)
            if not isinstance(answer, dict):
                answer = {"error": f"the tool returned {type(answer).__name__}, not an object"}
            text = json.dumps({**answer, "_call": call}, default=str)
        except Exception as exc:  # noqa: BLE001 - the call's error, never the worker's end
            text = json.dumps({"error": f"{type(exc).__name__}: {exc}", "_call": call})
        answers.write(text + "\n")
        answers.flush()
