"""How toolgate reaches an MCP server, and how it words a failure to, without leaking secrets.

Internal to :mod:`.mcp_connection`: the launch descriptions (a stdio command or a streamable
HTTP URL), the connection's time limits, failure descriptions with secret values masked, and the
bounded, anonymous file a stdio server's stderr goes to.

Network grants: every HTTP connection to a streamable HTTP server goes through
:class:`~toolgate.backends.rest_transport.GuardedTransport`, which reaches public addresses only.
An operator opens a loopback or private range for one server with a ``sandbox.network_grants``
entry keyed :func:`grant_key` — ``MCPServer:<metadata.name>`` — because one connection serves
every tool of the server, whatever their ids; metadata addresses and the gateway's own ports are
never reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO
from urllib.parse import urlsplit

from ..path_policy import run_folder
from ..sandbox.addresses import SERVER_GRANT_NAMESPACE, EgressRefusedError

__all__ = [
    "GRANT_KIND",
    "MAX_STDERR",
    "HttpLaunch",
    "Launch",
    "LaunchUnavailable",
    "StdioLaunch",
    "Timing",
    "describe_failure",
    "grant_key",
    "is_refusal",
    "redact",
    "refusal_hint",
    "stderr_file",
    "stderr_tail",
    "trim_stderr",
]

#: Bytes of a stdio server's stderr kept for diagnostics; past this the log starts over.
MAX_STDERR = 256 * 1024
_STDERR_TAIL = 600

#: The first part of an MCP server's key in ``sandbox.network_grants`` (see :func:`grant_key`).
GRANT_KIND = SERVER_GRANT_NAMESPACE


def grant_key(server: str) -> str:
    """The ``sandbox.network_grants`` key of the ``MCPServer`` named ``server``.

    REST tools are granted per tool id because each call is that tool's own request; an MCP
    server's connection is shared by all of its tools (the listed ones and the ``Tool`` resources
    that name it, whatever their ids), so the grant belongs to the server resource:
    ``MCPServer:<metadata.name>``. It has the ``namespace:name`` form the configuration checks
    every key for, and it never opens anything for a REST or sandboxed tool."""
    return f"{GRANT_KIND}:{server}"


def refusal_hint(server: str) -> str:
    """What the operator can do about a refused destination of server ``server`` (a sentence)."""
    return (
        "Loopback and private addresses need the operator's grant for this server, a CIDR range "
        f"under {grant_key(server)} in sandbox.network_grants; metadata addresses and the "
        "gateway's own ports are never allowed"
    )


@dataclass(frozen=True)
class StdioLaunch:
    """Start the server as a child process and talk over its stdin/stdout."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(repr=False)
    """The child's whole environment (the SDK adds its safe defaults: HOME, PATH, USER…)."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """The secret values among ``env``: never quoted in a message (from stderr, say)."""


@dataclass(frozen=True)
class HttpLaunch:
    """Talk to a running server over streamable HTTP."""

    url: str
    bearer: str | None = field(default=None, repr=False)
    """The token sent as ``Authorization: Bearer``; never shown in messages."""
    cidr_grants: tuple[str, ...] = ()
    """The operator's grant for this server (:func:`grant_key`): the loopback or private
    networks its connections may reach; public addresses need none, metadata ones are never
    reachable."""
    deny_ports: tuple[int, ...] = ()
    """The gateway's own listening ports: never a destination."""

    @property
    def host(self) -> str:
        """The host of :attr:`url` (lower case, IPv6 without brackets), for messages."""
        return urlsplit(self.url).hostname or self.url


Launch = StdioLaunch | HttpLaunch


def redact(text: str, launch: Launch | None) -> str:
    """``text`` with every secret value of ``launch`` replaced by ``***``."""
    values = (
        launch.secrets
        if isinstance(launch, StdioLaunch)
        else (launch.bearer,)
        if isinstance(launch, HttpLaunch) and launch.bearer
        else ()
    )
    for value in values:
        if value:
            text = text.replace(value, "***")
    return text


class LaunchUnavailable(Exception):
    """The server cannot be started now (a secret it needs is not set); the message says why."""


@dataclass(frozen=True)
class Timing:
    """The connection's time limits, in seconds."""

    connect: float = 30.0
    probe_period: float = 30.0
    """0: no periodic health check."""
    probe_timeout: float = 10.0
    reconnect_initial: float = 1.0
    reconnect_max: float = 60.0


def _leaf(exc: BaseException) -> BaseException:
    """The first real failure inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (inner or list(exc.exceptions))[0]
    return exc


def is_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` (or the failure inside its exception groups) is the guarded transport
    refusing a destination, rather than the server failing."""
    return isinstance(_leaf(exc), EgressRefusedError)


def describe_failure(exc: BaseException, launch: Launch | None, timeout: float) -> str:
    """A short, token-free description of why connecting or listing failed."""
    leaf = _leaf(exc)
    try:
        from mcp import MCPError
    except ImportError:  # reported below as the leaf itself
        mcp_error: type[BaseException] | None = None
    else:
        mcp_error = MCPError
    if isinstance(leaf, EgressRefusedError) and isinstance(launch, HttpLaunch):
        # The guarded transport refused the destination before anything was sent.
        where = f"{launch.host}, the host of its URL {launch.url}"
        text = f"toolgate does not connect to {where}: {leaf}"
    elif isinstance(leaf, ModuleNotFoundError):
        text = f"the MCP SDK is not installed ({leaf}); install toolgate[mcp]"
    elif isinstance(leaf, TimeoutError):
        text = f"no answer within {timeout:g} s"
    elif mcp_error is not None and isinstance(leaf, mcp_error):
        text = f"{getattr(leaf, 'message', leaf)} (MCP error {getattr(leaf, 'code', '?')})"
    elif isinstance(leaf, OSError) and isinstance(launch, StdioLaunch):
        text = f"cannot start {launch.command!r}: {leaf.strerror or leaf}"
    else:
        detail = str(leaf) or "(no message)"
        if isinstance(launch, HttpLaunch):
            detail = f"{launch.url}: {detail}"
        text = f"{type(leaf).__name__}: {detail}"
    return redact(text, launch)


def stderr_file() -> IO[bytes]:
    """A new file for a stdio server's stderr."""
    # Opened for appending, so the log can be truncated under a server that keeps writing, and
    # unlinked at once, so nothing is left behind on disk.
    # In the gateway's run folder, which no sandbox is shown (path_policy).
    fd, path = tempfile.mkstemp(prefix="toolgate-mcp-", suffix=".log", dir=run_folder())
    os.close(fd)
    file = open(path, "ab+")  # noqa: SIM115 - closed by the hold task
    with contextlib.suppress(OSError):
        os.unlink(path)
    return file


def stderr_tail(file: IO[bytes] | None) -> str:
    """The last few hundred characters the server wrote, on one line."""
    if file is None:
        return ""
    try:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - _STDERR_TAIL))
        text = file.read().decode("utf-8", "replace").strip()
    except (OSError, ValueError):
        return ""
    return " ".join(text.split())


def trim_stderr(file: IO[bytes] | None) -> None:
    """Start the log over once it holds more than :data:`MAX_STDERR` bytes."""
    if file is None:
        return
    try:
        if file.seek(0, os.SEEK_END) > MAX_STDERR:
            file.truncate(0)
    except (OSError, ValueError):
        pass
