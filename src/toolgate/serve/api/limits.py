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
from .problems import HttpErrorCode, crash_response, problem_response

__all__ = ["BODY_SCOPE_KEY", "ApiLimits", "RequestLimitsMiddleware", "too_large_detail"]

log = logging.getLogger("toolgate.serve")

#: Where the body read is left for the application (bytes), see :mod:`.calls`.
BODY_SCOPE_KEY: Final = "toolgate.body"

#: Most bytes of a body over the limit still read (and dropped) before the ``413`` is sent, so
#: that a client still sending it reads the answer (see :func:`_drop_rest`).
DROP_MAX_BYTES: Final = 64 * 1024 * 1024
#: Most seconds spent reading them.
DROP_SECONDS: Final = 30.0

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

    def __init__(self, size: int | None, read: int = 0) -> None:
        super().__init__(size)
        self.size = size
        self.read = read


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
        reasonable (:func:`_drop_rest`), so that the client reads the answer."""
        read = None
        if exc.size is None or exc.size <= DROP_MAX_BYTES:
            read = await _drop_rest(scope, receive, exc.read)
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
                raise _TooLarge(None, size)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _expects_continue(scope: Scope) -> bool:
    """Whether the client waits for ``100 Continue`` before sending its body."""
    return any(
        name == b"expect" and value.strip().lower() == b"100-continue"
        for name, value in scope.get("headers", ())
    )


async def _drop_rest(scope: Scope, receive: Receive, read: int) -> int | None:
    """Read the rest of a body refused for its size (``read`` bytes of it were read already)
    and drop it: the body's size, or ``None`` when it was not read to its end — over
    :data:`DROP_MAX_BYTES`, longer than :data:`DROP_SECONDS`, a client that waits for
    ``100 Continue`` (it has sent nothing), or one that went away.

    A client still sending the body when the server answers and closes the connection gets a
    reset connection instead of the answer (curl does not, as it waits for ``100 Continue``;
    most HTTP libraries do); read to its end, the body leaves the answer readable, and the
    connection reusable."""
    if _expects_continue(scope):
        return None
    size = read
    try:
        async with asyncio.timeout(DROP_SECONDS):
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return None
                size += len(message.get("body", b""))
                if size > DROP_MAX_BYTES:
                    return None
                if not message.get("more_body", False):
                    return size
    except TimeoutError:
        return None


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
