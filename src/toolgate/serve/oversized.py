"""Bodies refused for their size: read the rest and drop it, so the client reads the ``413``.

A client still sending its body when the server answers and closes the connection gets a reset
connection instead of the answer (most HTTP libraries do; curl waits for ``100 Continue``).
Read to its end — within :data:`DROP_MAX_BYTES` and :data:`DROP_SECONDS` — the body leaves the
answer readable and the connection reusable. Shared by the HTTP API and the MCP endpoint.
"""

from __future__ import annotations

from typing import Final

import anyio
from starlette.types import Receive, Scope

__all__ = ["DROP_MAX_BYTES", "DROP_SECONDS", "drop_rest", "expects_continue"]

#: Most bytes of a body over the limit still read (and dropped) before the 413 is sent.
DROP_MAX_BYTES: Final = 64 * 1024 * 1024
#: Most seconds spent reading them.
DROP_SECONDS: Final = 30.0


def expects_continue(scope: Scope) -> bool:
    """Whether the client waits for ``100 Continue`` before sending its body."""
    return any(
        name == b"expect" and value.strip().lower() == b"100-continue"
        for name, value in scope.get("headers", ())
    )


async def drop_rest(scope: Scope, receive: Receive, read: int = 0) -> int | None:
    """Read the rest of a body (``read`` bytes of it were read already, not its end) and drop
    it: the body's size, or ``None`` when it was not read to its end — over
    :data:`DROP_MAX_BYTES`, longer than :data:`DROP_SECONDS`, a client that waits for
    ``100 Continue`` (it has sent nothing), or one that went away."""
    if expects_continue(scope):
        return None
    size = read
    with anyio.move_on_after(DROP_SECONDS):
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            size += len(message.get("body", b""))
            if size > DROP_MAX_BYTES:
                return None
            if not message.get("more_body", False):
                return size
    return None
