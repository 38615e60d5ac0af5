"""The size limit of one message from an upstream MCP server, and how its breach is worded.

A server that answers with one enormous message (a 100 MB line on stdout, a huge JSON body or
SSE event) must not make the gateway buffer it whole: the transports stop reading at
:attr:`MessageLimit.max_bytes` (stdio: :mod:`.mcp_stdio`; streamable HTTP:
:mod:`.mcp_http_cap`), the call in flight fails with :meth:`MessageLimit.explain`, and a stdio
connection — whose stream is out of step once a line was cut — is reset.

The default, 16 MiB, is four times the largest results real servers send: screenshots and PDFs
as base64 image or resource blocks are a few MB (a 4K PNG is 3–8 MB as base64), text results a
few KB to a few hundred. It bounds the gateway's memory per connection while leaving room for
them; an operator raises it per server (``spec.maxMessageBytes``) or for all
(``mcp.max_message_bytes`` in toolgate.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_MESSAGE",
    "MessageLimit",
    "MessageTooLarge",
    "size_text",
]

#: Bytes of one message from an upstream MCP server (module docs for the choice).
DEFAULT_MAX_MESSAGE = 16 * 1024 * 1024


def size_text(size: int) -> str:
    """``16 MiB (16777216 bytes)``, ``1500 bytes``: a size for people."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit} ({size} bytes)"
    return f"{size} bytes"


@dataclass(frozen=True)
class MessageLimit:
    """The cap of one server's messages and where the operator sets it."""

    server: str
    max_bytes: int = DEFAULT_MAX_MESSAGE

    def explain(self, *, reset: bool) -> str:
        """The message of a call that failed because the server's answer was too large."""
        after = (
            "toolgate stopped reading it and reset the connection (the next call reconnects)"
            if reset
            else "toolgate stopped reading it"
        )
        return (
            f"The MCP server {self.server} sent a message larger than "
            f"{size_text(self.max_bytes)}, the limit of one message from this server, so "
            f"{after}; the result of this call is lost. If its results really are this large, "
            f"the operator can raise spec.maxMessageBytes of the MCPServer {self.server} "
            "(or mcp.max_message_bytes in toolgate.yaml for every server)."
        )


class MessageTooLarge(Exception):
    """A message from an upstream server passed its :class:`MessageLimit`."""

    def __init__(self, limit: MessageLimit, seen: int) -> None:
        super().__init__(limit.explain(reset=False))
        self.limit = limit
        self.seen = seen
        """Bytes read when reading stopped (more than the limit)."""
