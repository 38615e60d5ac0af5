"""Request limits of the HTTP API: the body size and the time a request may take.

One pure ASGI middleware (no per-request framework objects: it sits on the hot path of every
tool call). It reads the whole body first, refusing it with ``413`` as soon as it is over the
limit — before the body is parsed, and without keeping any of it when ``Content-Length``
already says so — then hands it to the application. The ``413`` gives the body's size, the
limit and the setting that raises it; the rest of a refused body is read and dropped first (up
to :data:`DROP_MAX_BYTES`), so that a client still sending it can read the answer. The whole
exchange runs under a deadline; a request past it is answered ``504`` (when no response has
started yet) and its handler is cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...config.schema import DEFAULT_MAX_BODY_BYTES, DEFAULT_REQUEST_TIMEOUT
from ...errors import ErrorCode
from ..oversized import DROP_MAX_BYTES, drop_rest
from .problems import HttpErrorCode, crash_response, problem_response

__all__ = ["BODY_SCOPE_KEY", "ApiLimits", "RequestLimitsMiddleware", "too_large_detail"]

log = logging.getLogger("toolgate.serve")

#: Where the body read is left for the application (bytes), see :mod:`.calls`.
BODY_SCOPE_KEY: Final = "toolgate.body"

#: Seconds a tool call may take beyond its own timeout before the request times out (the
#: security check, the approval stage and the audit write happen around the tool).
CALL_MARGIN: Final = 10.0


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """Limits of every API request."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Larger bodies are refused with ``413``."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    """Seconds before a request is answered ``504`` (a tool call, or approving one: at least
    the tool's timeout plus :data:`CALL_MARGIN`)."""

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.request_timeout <= 0:
            raise ValueError("max_body_bytes and request_timeout must be positive")


class _TooLarge(Exception):
    """The body is over the limit: ``size`` bytes by its ``Content-Length`` (``None``: sent
    without one), of which ``read`` were read before it was refused."""

    def __init__(self, size: int | None, read: int = 0, *, ended: bool = False) -> None:
        super().__init__(size)
        self.size = size
        self.read = read
        self.ended = ended
        """Whether the whole body arrived already (nothing is left to read)."""


def too_large_detail(size: int | None, limit: int) -> str:
    """What a ``413`` says: the body's size (when known), the limit and the setting that
    raises it."""
    said = "over" if size is None else f"{size:,} bytes, over"
    return (
        f"the request body is {said} this server's limit of {limit:,} bytes (set by "
        "serve.max_body_bytes in toolgate.yaml)"
    )


class _BadLength(Exception):
    pass


class RequestLimitsMiddleware:
    """Bounds the body size and the duration of every HTTP request to ``app``.

    ``budget(scope)`` may give a request more time than ``limits.request_timeout`` (the call
    route gives its tool's timeout plus a margin); ``None`` keeps the default.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: ApiLimits,
        budget: Callable[[Scope], float | None] | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            seconds = self.limits.request_timeout
            if self.budget is not None:
                extra = self.budget(scope)
                if extra is not None:
                    seconds = max(seconds, extra)
            declared = _content_length(scope)
        except _BadLength as exc:
            await problem_response(400, HttpErrorCode.INVALID_REQUEST, str(exc))(
                scope, receive, send
            )
            return
        except Exception:  # a bug: the same 500 problem the framework's handler answers
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            await crash_response()(scope, receive, send)
            return
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                if declared is not None and declared > self.limits.max_body_bytes:
                    raise _TooLarge(declared)
                body = await self._read_body(receive)
                if body is None:
                    return  # the client went away
                scope[BODY_SCOPE_KEY] = body  # for the fast path of tool calls
                await self.app(scope, _replay(body, receive), tracked_send)
        except _TooLarge as exc:
            if not started:
                await self._refuse_size(scope, receive, send, exc)
        except TimeoutError:
            if not deadline.expired():
                raise  # the application's own timeout, not this deadline
            if not started:
                await problem_response(
                    504,
                    ErrorCode.TIMEOUT,
                    f"the request did not finish within {seconds:g} seconds",
                )(scope, receive, send)
        except Exception:
            # A bug in front of the framework (the framework answers its own, then re-raises).
            if started:
                raise  # too late for a problem: the server ends the response
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            await crash_response()(scope, receive, send)

    async def _refuse_size(
        self, scope: Scope, receive: Receive, send: Send, exc: _TooLarge
    ) -> None:
        """Answer ``413`` to a body over the limit, after reading the rest of it when that is
        reasonable (:func:`~toolgate.serve.oversized.drop_rest`), so that the client reads
        the answer. A body whose last part arrived already is not waited for."""
        read = exc.read if exc.ended else None
        if not exc.ended and (exc.size is None or exc.size <= DROP_MAX_BYTES):
            read = await drop_rest(scope, receive, exc.read)
        await problem_response(
            413,
            HttpErrorCode.PAYLOAD_TOO_LARGE,
            too_large_detail(
                exc.size if exc.size is not None else read, self.limits.max_body_bytes
            ),
            headers={"Connection": "close"} if read is None else None,
        )(scope, receive, send)

    async def _read_body(self, receive: Receive) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limits.max_body_bytes:
                raise _TooLarge(None, size, ended=not message.get("more_body", False))
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            if not text.isdigit():
                raise _BadLength(f"Content-Length must be a number of bytes, not {text!r}")
            return int(text)
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands over the body already read, then waits on the client."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
