"""The stdio transport to an MCP server, with a bounded line length.

The SDK's ``stdio_client`` joins the server's stdout into lines with an unbounded string buffer:
a server that writes one 100 MB line (or an endless one) makes the gateway hold all of it. This
is the same transport — the SDK's process start and its shutdown sequence (stdin closed, then
SIGTERM and SIGKILL to the process group, every wait bounded and shielded) — with one change: the
reader keeps at most ``limit.max_bytes`` of a line. Past that it stops, reports
:class:`~toolgate.backends.mcp_limits.MessageTooLarge` to ``on_oversize`` and closes the session's
read stream: the requests in flight end with "connection closed" and the connection is rebuilt
(the rest of the line cannot be told from the next message). Until the process ends, its stdout
is drained and thrown away, so the server cannot block on a full pipe.

The SDK's process helpers are private names of ``mcp.client.stdio`` (``mcp>=2.3``); the tests of
the bounded transport run the real SDK, so a change there fails them rather than the gateway.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import anyio.lowlevel

from .mcp_limits import MessageLimit, MessageTooLarge

__all__ = ["bounded_stdio_client"]

log = logging.getLogger("toolgate.mcp")

#: Time the writer may take to flush accepted messages before stdin closes (as the SDK).
_WRITER_FLUSH = 0.5


@asynccontextmanager
async def bounded_stdio_client(
    command: str,
    args: list[str],
    env: dict[str, str],
    errlog: TextIO,
    limit: MessageLimit,
    on_oversize: Callable[[MessageTooLarge], None],
) -> AsyncGenerator[tuple[Any, Any], None]:
    """Start the server and yield the session's (read, write) streams, as ``stdio_client``.

    ``env`` is merged over the SDK's safe defaults; ``errlog`` receives the server's stderr."""
    from mcp.client import stdio as sdk
    from mcp.shared.message import SessionMessage

    process = await sdk._create_platform_compatible_process(
        command=await sdk._get_executable_command(command),
        args=args,
        env=sdk.get_default_environment() | env,
        errlog=errlog,
    )
    # No awaits between the spawn and the task group, or a cancellation would leak the process.
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()

    async def deliver(line: bytearray) -> None:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            await read_writer.send(exc)  # the session reports it, as a parse error
            return
        await read_writer.send(sdk._parse_line(text))

    async def stdout_reader() -> None:
        assert process.stdout is not None
        line = bytearray()
        try:
            async with read_writer:
                try:
                    async for chunk in process.stdout:
                        start = 0
                        while (end := chunk.find(b"\n", start)) >= 0:
                            line += chunk[start:end]
                            start = end + 1
                            if len(line) > limit.max_bytes:
                                break
                            await deliver(line)
                            line.clear()
                        else:
                            line += chunk[start:]
                        if len(line) > limit.max_bytes:
                            # Stop here: closing the read stream ends the session's requests;
                            # the rest of the line is never kept.
                            on_oversize(MessageTooLarge(limit, len(line)))
                            line.clear()
                            return
                finally:
                    await sdk._drain_stdout(process)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, ConnectionError):
            pass  # the session or our own shutdown closed a stream under the read

    async def stdin_writer() -> None:
        assert process.stdin is not None
        try:
            async with write_reader:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode("utf-8"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server may still be alive: end the session rather than hang a request.
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()  # unblocks the reader into its drain
        write_stream.close()
        with anyio.move_on_after(_WRITER_FLUSH):
            await writer_done.wait()
        await sdk._stop_server_process(process)
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await stream.aclose()
        await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            # Shielded and bounded inside: the server process must end even when cancelled.
            with anyio.CancelScope(shield=True):
                await shutdown()
            group.cancel_scope.cancel()
