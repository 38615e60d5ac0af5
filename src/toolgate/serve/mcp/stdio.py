"""MCP over stdio: what ``toolgate mcp`` runs for desktop and IDE agents.

Nothing but protocol reaches stdout: the SDK's stdio transport serves the wire from a private
duplicate of the original stdout and points file descriptor 1 at stderr while it runs, so a
Python tool that prints, or a child process that writes to its inherited stdout, lands on stderr
instead of corrupting the stream. Logging goes to stderr.

Each line is read here rather than by the SDK, so that :func:`~toolgate._json.loads_strict` sees
it before the SDK's parser does (which keeps the last of duplicate keys): a line with a duplicate
key anywhere, that is not JSON, or that nests deeper than :data:`LINE_MAX_DEPTH` levels gets a
JSON-RPC parse error (``-32700``) naming what is wrong, and goes no further. So does a line that
is not UTF-8 (the SDK would replace the bad bytes with U+FFFD and run the call) and a line longer
than :data:`MAX_LINE_BYTES`, which is read in chunks and dropped as it comes, never held whole. A
batch (a JSON array: the SDK takes one message a line and would not answer it) gets an invalid
request error (``-32600``). Other lines reach the SDK unchanged. Lines end at ``\n`` (a ``\r``
before it is JSON whitespace).

Reading stdin here means taking it away from child processes here too, the way the SDK does:
file descriptor 0 points at the null device while serving, and the wire is read from a private
duplicate.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager, suppress
from typing import Any, BinaryIO, Final, cast

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from ..._json import StrictJsonError, loads_strict
from ...gateway import Gateway
from .approval_link import ApprovalDirections
from .server import DEFAULT_PAGE_SIZE, build_mcp_server

__all__ = ["LINE_MAX_DEPTH", "MAX_LINE_BYTES", "serve_stdio"]

#: How deeply one line may nest, the JSON-RPC envelope included. Below what the SDK's parser
#: takes (about 200), above what arguments may (``MAX_DEPTH``, held by the validation stage, which
#: names the field): a line deeper than this gets ``-32700`` rather than no answer at all.
LINE_MAX_DEPTH = 128

#: The longest line (one JSON-RPC message, its ``\n`` not counted) read from stdin: 16 MiB. A
#: longer one gets ``-32700`` naming this limit; no more than this and one chunk of it is held.
MAX_LINE_BYTES: Final = 16 << 20

#: How much of stdin is read at a time.
_CHUNK: Final = 64 << 10


class _TooLong:
    """A line longer than :data:`MAX_LINE_BYTES` (dropped as it was read)."""


_TOO_LONG: Final = _TooLong()


class _LineReader:
    """The lines of the wire as bytes, each at most ``limit`` long: a longer one is read to its
    end in chunks and dropped as it comes (:data:`_TOO_LONG` stands for it). Each byte is looked
    at once. Blocking: called in a worker thread."""

    def __init__(self, wire: BinaryIO, limit: int = MAX_LINE_BYTES) -> None:
        self._wire = wire
        self._limit = limit
        self._buffer = bytearray()
        self._scanned = 0  # no newline in the buffer before this
        self._eof = False

    def _fill(self) -> bool:
        if self._eof:
            return False
        read1 = getattr(self._wire, "read1", None)
        chunk = read1(_CHUNK) if read1 is not None else self._wire.read(_CHUNK)
        if not chunk:
            self._eof = True
            return False
        self._buffer += chunk
        return True

    def read_line(self) -> bytes | _TooLong | None:
        """The next line (its ``\n`` included), :data:`_TOO_LONG`, or ``None`` at end of file."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                if end > self._limit:
                    return self._drop(end)
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if self._scanned > self._limit:
                return self._drop(-1)
            if not self._fill():
                if not self._buffer:
                    return None
                line = bytes(self._buffer)  # the last line, with no newline after it
                self._buffer.clear()
                self._scanned = 0
                return line

    def _drop(self, end: int) -> _TooLong:
        """Drop the line too long up to and including its newline (read to it when ``end < 0``)."""
        while end < 0:
            self._buffer.clear()
            if not self._fill():
                break
            end = self._buffer.find(b"\n")
        if end >= 0:
            del self._buffer[: end + 1]
        else:
            self._buffer.clear()
        self._scanned = 0
        return _TOO_LONG


def _dup_above_std(fd: int) -> int:
    if sys.platform == "win32":  # pragma: no cover
        duplicate = os.dup(fd)
        if duplicate <= 2:
            os.close(duplicate)
            raise OSError(f"duplicate of fd {fd} landed in the standard range")
        return duplicate
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _rebind_fd0() -> None:
    if sys.platform == "win32":  # pragma: no cover
        from mcp.os.win32.utilities import rebind_std_handle_to_fd

        with suppress(OSError):
            rebind_std_handle_to_fd(0)


@contextmanager
def _take_stdin() -> Iterator[BinaryIO]:
    """The wire, read from a private duplicate of fd 0 while fd 0 points at the null device.

    What the SDK's ``stdio_server()`` does for stdin when it reads it itself: tools and their
    child processes read end-of-file, never the protocol. Best effort, like the SDK: when
    descriptors cannot be duplicated or diverted, stdin is read in place.
    """
    try:
        in_place = sys.stdin.buffer.fileno() != 0
    except (AttributeError, OSError, ValueError):
        in_place = True
    if in_place:
        yield sys.stdin.buffer
        return
    try:
        private_fd = _dup_above_std(0)
    except OSError:
        yield sys.stdin.buffer
        return
    try:
        null_fd = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null_fd, 0)
        finally:
            os.close(null_fd)
    except OSError:
        # fd 0 still carries the wire (or failed mid-way: point it back); read it in place.
        with suppress(OSError):
            os.dup2(private_fd, 0)
        _rebind_fd0()
        yield sys.stdin.buffer
        return
    _rebind_fd0()
    try:
        # closefd=False: a worker thread may still block reading it after the transport exits.
        yield os.fdopen(private_fd, "rb", closefd=False)
    finally:
        with suppress(OSError):
            os.dup2(private_fd, 0)
            _rebind_fd0()


def _request_id(line: str) -> types.RequestId | None:
    """The id of a refused line when it names one unambiguously, else ``None`` (``"id": null``)."""
    try:
        pairs = json.loads(line, object_pairs_hook=lambda items: items)
    except (ValueError, RecursionError):
        return None
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) for p in pairs):
        return None
    ids = [value for key, value in pairs if key == "id"]
    if len(ids) != 1:
        return None
    (found,) = ids
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return found
    return None


def _error(code: int, message: str, request_id: types.RequestId | None) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


def _refusal(line: str) -> types.JSONRPCError | None:
    """The error answering ``line``, or ``None`` when the SDK may parse it."""
    if not line.strip():
        return None  # not a message: the SDK skips it, as it always has
    try:
        # NaN and Infinity pass: the validation stage refuses them in arguments, naming where.
        value = loads_strict(line, max_depth=LINE_MAX_DEPTH, allow_nan=True)
    except StrictJsonError as exc:
        return _error(types.PARSE_ERROR, f"Parse error: {exc}", _request_id(line))
    if isinstance(value, list):
        return _error(types.INVALID_REQUEST, "Invalid request: batches are not supported", None)
    return None


def _checked(raw: bytes | _TooLong) -> tuple[str | None, types.JSONRPCError | None]:
    """A line read from the wire: its text for the SDK, or the error answering it."""
    if isinstance(raw, _TooLong):
        limit = f"{MAX_LINE_BYTES} bytes ({MAX_LINE_BYTES >> 20} MiB)"
        return None, _error(types.PARSE_ERROR, f"Parse error: line longer than {limit}", None)
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"Parse error: not UTF-8 (byte {exc.start} of the line: {exc.reason})"
        return None, _error(types.PARSE_ERROR, message, _request_id(raw.decode("utf-8", "replace")))
    refusal = _refusal(line)
    return (line, None) if refusal is None else (None, refusal)


class _Replies:
    """Where a refused line's error goes: the SDK's write stream, once there is one."""

    def __init__(self) -> None:
        self._ready = anyio.Event()
        self._stream: Any = None

    def attach(self, write_stream: Any) -> None:
        self._stream = write_stream
        self._ready.set()

    async def send(self, error: types.JSONRPCError) -> None:
        await self._ready.wait()
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self._stream.send(SessionMessage(error))


async def _strict_lines(reader: _LineReader, replies: _Replies) -> AsyncIterator[str]:
    """The lines of the wire the SDK may parse; each refused one is answered and dropped."""
    while True:
        raw = await anyio.to_thread.run_sync(reader.read_line)
        if raw is None:
            return
        line, refusal = _checked(raw)
        if line is not None:
            yield line
        elif refusal is not None:
            await replies.send(refusal)


async def serve_stdio(
    gateway: Gateway,
    *,
    agent: str | None = None,
    approvals_url: str | None = None,
    elicitation: bool = True,
    page_size: int = DEFAULT_PAGE_SIZE,
    approval_command: str = "toolgate",
) -> None:
    """Serve ``gateway`` over this process's stdin and stdout until the client closes stdin.

    Watches the tool folders (hot reload) while serving, and tells the client when the tool list
    changes. Every call is made as ``agent`` (``None``: the default agent). ``tools/list``
    answers pages of ``page_size`` tools (``serve.mcp_page_size``). A call pending approval
    links to ``approvals_url`` only while a toolgate server answers there, and always names
    ``approval_command approvals approve ID`` (see :mod:`toolgate.serve.mcp.approval_link`).
    """
    surface = build_mcp_server(
        gateway,
        agent=agent,
        approvals_url=approvals_url,
        elicitation=elicitation,
        page_size=page_size,
        directions=ApprovalDirections(approvals_url, checked=True, command=approval_command),
        # One client per process: its calls share one session (overflow files, scripts' sessionId).
        session_id=f"mcp-{uuid.uuid4().hex[:12]}",
    )
    server = surface.server
    await gateway.start()
    surface.start()
    try:
        with _take_stdin() as wire:
            replies = _Replies()
            lines = _strict_lines(_LineReader(wire), replies)
            # Given stdin, the SDK claims only stdout (fd 1 to stderr) and parses what it reads.
            stdin = cast("anyio.AsyncFile[str]", lines)
            async with stdio_server(stdin=stdin) as (read_stream, write_stream):
                replies.attach(write_stream)
                await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await surface.tasks.aclose()  # running tasks recorded cancelled before the process ends
        surface.stop()
