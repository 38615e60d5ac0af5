"""Streamable HTTP responses of an upstream MCP server, read no further than the message limit.

The SDK reads a JSON answer whole (``response.aread()``) and buffers each SSE event; this
transport wraps the connection's own (the SSRF guard) and stops reading
the body as soon as one message passed :class:`~toolgate.backends.mcp_limits.MessageLimit`: it
reports :class:`~toolgate.backends.mcp_limits.MessageTooLarge` to the connection and raises
:class:`BodyTooLarge`, so no more of it is read and only that request fails. Imported with the
HTTP client, on the first connection to an HTTP server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx2

from .mcp_limits import MessageLimit, MessageTooLarge

__all__ = ["BodyTooLarge", "CappedTransport"]


class BodyTooLarge(httpx2.StreamError):
    """Raised from a response body past the limit. A ``StreamError``, which the SDK turns into
    an error answer for the one request (any other exception would end its whole transport)."""


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that stops past the limit: the whole body of a
    JSON answer, each event of an event stream (events end at a blank line)."""

    def __init__(
        self,
        inner: httpx2.AsyncByteStream,
        limit: MessageLimit,
        events: bool,
        on_oversize: Callable[[MessageTooLarge], None],
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._events = events
        self._on_oversize = on_oversize

    async def __aiter__(self) -> AsyncIterator[bytes]:
        count = 0
        tail = b""
        async for chunk in self._inner:
            if self._events:
                # Count from the last event boundary; the tail joins a boundary split between
                # two chunks.
                joined = tail + chunk
                cut = max(joined.rfind(b"\n\n"), joined.rfind(b"\r\n\r\n"))
                count = len(joined) - cut - 2 if cut >= 0 else count + len(chunk)
                tail = joined[-3:]
            else:
                count += len(chunk)
            if count > self._limit.max_bytes:
                error = MessageTooLarge(self._limit, count)
                self._on_oversize(error)
                raise BodyTooLarge(str(error))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx2.AsyncBaseTransport):
    """Wraps an MCP client's HTTP transport so no response body or SSE event from the server is
    read past the limit (the SDK reads JSON answers whole)."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport,
        limit: MessageLimit,
        on_oversize: Callable[[MessageTooLarge], None],
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._on_oversize = on_oversize

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _CappedStream(stream, self._limit, events, self._on_oversize)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()
