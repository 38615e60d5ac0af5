"""The egress proxy of one sandboxed call: the only way out of the tool's network namespace.

A tool with a ``network`` permission runs in its own network namespace whose only route out is
the bridge (:mod:`toolgate.sandbox.bridge`), which forwards every TCP connection made to
``127.0.0.1:<port>`` inside the namespace to this proxy's Unix socket. The proxy speaks HTTP
``CONNECT`` (for HTTPS and any TCP protocol) and plain HTTP forwarding (absolute-form
``GET http://host/path``), and for each request:

1. normalizes the host (:func:`~toolgate.sandbox.addresses.normalize_host`: lower case, IDNA,
   trailing dot; odd IPv4 spellings become the address they stand for);
2. refuses a port of the gateway itself (``deny_ports``) and any host/port the tool's
   ``network`` permission does not match (ports 80 and 443 unless the pattern names one);
3. resolves the name **once**, classifies every returned address, and refuses the whole answer if
   any address is not allowed (loopback, private, link-local, metadata, … — unless the operator's
   CIDR grant for this tool covers it; metadata never);
4. connects to the checked addresses only (no second lookup: DNS rebinding cannot swap them);
5. records an :class:`EgressEvent` for every allowed and refused request, for the call's audit.

Each client connection gets one upstream: a ``CONNECT`` tunnel, or for plain HTTP the first
request's destination (the rest of the connection is relayed to that same checked address).
Request heads are bounded (:data:`MAX_HEAD_BYTES`) and every wait has a timeout, so garbage or a
stalled client costs one connection, never the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..model import Permissions
from ..path_policy import run_folder
from .addresses import (
    HostPattern,
    IPNetwork,
    address_verdict,
    host_allowed,
    normalize_host,
    parse_allowlist,
    parse_cidr_grants,
    parse_ip_host,
)

__all__ = [
    "MAX_HEAD_BYTES",
    "EgressEvent",
    "EgressProxy",
    "Resolver",
    "pinned_resolver",
    "system_resolver",
]

log = logging.getLogger("toolgate.sandbox.egress")

#: A resolver: (host, port) → the addresses, as text. Injected by tests.
Resolver = Callable[[str, int], Awaitable[list[str]]]

MAX_HEAD_BYTES = 16 * 1024
"""Request line plus headers; a longer head is refused (431)."""
MAX_HEADERS = 100
HEAD_TIMEOUT = 10.0
"""Seconds a client has to send a whole request head."""
RESOLVE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
"""Seconds a relayed connection may stay silent in both directions before it is closed."""
MAX_CONNECTIONS = 64
"""Concurrent client connections per call; more wait (so a tool cannot exhaust the gateway)."""
MAX_EVENTS = 1000
"""Events kept per call; past this, only :attr:`EgressProxy.dropped_events` counts."""
_CHUNK = 64 * 1024
_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"upgrade",
    }
)


@dataclass(frozen=True, slots=True)
class EgressEvent:
    """One request a tool made through the proxy (for the call's audit record)."""

    host: str
    """The host as normalized (or as sent, when it could not be)."""
    port: int
    addresses: tuple[str, ...]
    """The addresses the name resolved to (empty when refused before resolving)."""
    allowed: bool
    reason: str
    """Why it was refused, or which pattern/grant allowed it."""
    method: str = "CONNECT"
    """``CONNECT``, the HTTP method of a forwarded request, or ``HTTP`` (REST transport)."""
    at: float = field(default_factory=time.time)
    """When it was decided (Unix time)."""

    def as_dict(self) -> dict[str, object]:
        """The event as JSON-ready data, for the call's audit record."""
        return {
            "host": self.host,
            "port": self.port,
            "addresses": list(self.addresses),
            "allowed": self.allowed,
            "reason": self.reason,
            "method": self.method,
            "at": self.at,
        }


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with the system resolver (``getaddrinfo``), every address of the answer."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def pinned_resolver(
    hosts: Mapping[str, Sequence[str]], fallback: Resolver = system_resolver
) -> Resolver:
    """A resolver that answers the host names in ``hosts`` with their addresses (the
    operator's ``sandbox.hosts``, like ``/etc/hosts`` for tools) and asks ``fallback`` for the
    others. A pinned address is checked like any resolved one: a private address still needs a
    network grant, a metadata address is never reached."""
    pinned = {name.lower().rstrip("."): list(addresses) for name, addresses in hosts.items()}

    async def resolve(host: str, port: int) -> list[str]:
        found = pinned.get(host.lower().rstrip("."))
        return list(found) if found is not None else await fallback(host, port)

    return resolve


class _Refused(Exception):
    """A request the proxy answers with an error status (and records as refused)."""

    def __init__(self, status: int, reason: str, addresses: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.addresses = addresses


_STATUS_TEXT = {
    400: "Bad Request",
    403: "Forbidden",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    504: "Gateway Timeout",
}


@dataclass(slots=True)
class _Request:
    method: str
    host: str
    port: int
    head: bytes
    """What to send upstream before relaying (empty for CONNECT)."""


class EgressProxy:
    """The egress proxy of one call; start it with :meth:`start` (see the module docs)."""

    socket_path: Path
    """The Unix socket to bind into the sandbox (its folder is private, mode 0700)."""
    port: int | None = None
    """With ``tcp``: the port the proxy listens on at ``127.0.0.1`` (the Landlock layer)."""
    events: list[EgressEvent]
    """Every allowed and refused request, in order (at most :data:`MAX_EVENTS`)."""
    dropped_events: int
    """Requests past :data:`MAX_EVENTS`, counted but not kept."""

    def __init__(
        self,
        patterns: tuple[HostPattern, ...],
        grants: tuple[IPNetwork, ...],
        *,
        tool_id: str,
        call_id: str,
        deny_ports: frozenset[int],
        resolver: Resolver,
        socket_path: Path,
    ) -> None:
        self.patterns = patterns
        self.grants = grants
        self.tool_id = tool_id
        self.call_id = call_id
        self.deny_ports = deny_ports
        self.resolver = resolver
        self.socket_path = socket_path
        self.events = []
        self.dropped_events = 0
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)
        self._tasks: set[asyncio.Task[None]] = set()

    @classmethod
    def start(
        cls,
        permissions: Permissions,
        *,
        tool_id: str,
        call_id: str,
        deny_ports: Collection[int] = (),
        cidr_grants: Collection[str] = (),
        resolver: Resolver | None = None,
        socket_dir: Path | None = None,
        tcp: bool = False,
    ) -> AbstractAsyncContextManager[EgressProxy]:
        """Parse the permission and grants now (a bare ``*``, a wildcard TLD or a grant over a
        metadata address raises :class:`ValueError` naming the tool), and serve on a fresh Unix
        socket for the ``async with`` block; on exit every connection is closed and the socket
        folder removed. ``socket_dir`` (a private folder the caller owns, already visible in a
        long-lived sandbox) holds the socket instead, under a fresh name; only the socket is
        removed from it. ``tcp``: listen on a fresh port of ``127.0.0.1`` instead of a socket
        (:attr:`port`; the Landlock layer, whose tools share the gateway's network namespace
        and may connect to that port only); the checks are the same."""
        try:
            patterns = parse_allowlist(permissions.network)
            grants = parse_cidr_grants(cidr_grants)
        except ValueError as exc:
            raise ValueError(f"tool {tool_id}: {exc}") from None
        return cls._serve(
            patterns,
            grants,
            tool_id=tool_id,
            call_id=call_id,
            deny_ports=frozenset(deny_ports),
            resolver=resolver or system_resolver,
            socket_dir=socket_dir,
            tcp=tcp,
        )

    @classmethod
    @contextlib.asynccontextmanager
    async def _serve(
        cls,
        patterns: tuple[HostPattern, ...],
        grants: tuple[IPNetwork, ...],
        *,
        tool_id: str,
        call_id: str,
        deny_ports: frozenset[int],
        resolver: Resolver,
        socket_dir: Path | None = None,
        tcp: bool = False,
    ) -> AsyncIterator[EgressProxy]:
        if tcp:
            async with cls._serve_tcp(
                patterns,
                grants,
                tool_id=tool_id,
                call_id=call_id,
                deny_ports=deny_ports,
                resolver=resolver,
            ) as proxy:
                yield proxy
            return
        owned = socket_dir is None
        # In the gateway's run folder: a state folder no sandbox is shown (path_policy).
        folder = (
            Path(tempfile.mkdtemp(prefix="toolgate-egress-", dir=run_folder()))
            if owned
            else socket_dir
        )
        assert folder is not None
        name = "egress.sock" if owned else f"egress-{secrets.token_hex(8)}.sock"
        try:
            proxy = cls(
                patterns,
                grants,
                tool_id=tool_id,
                call_id=call_id,
                deny_ports=deny_ports,
                resolver=resolver,
                socket_path=folder / name,
            )
            server = await asyncio.start_unix_server(
                proxy._accept, path=str(proxy.socket_path), limit=MAX_HEAD_BYTES
            )
            async with proxy._running(server):
                yield proxy
        finally:
            if owned:
                shutil.rmtree(folder, ignore_errors=True)
            else:
                (folder / name).unlink(missing_ok=True)

    @classmethod
    @contextlib.asynccontextmanager
    async def _serve_tcp(
        cls,
        patterns: tuple[HostPattern, ...],
        grants: tuple[IPNetwork, ...],
        *,
        tool_id: str,
        call_id: str,
        deny_ports: frozenset[int],
        resolver: Resolver,
    ) -> AsyncIterator[EgressProxy]:
        proxy = cls(
            patterns,
            grants,
            tool_id=tool_id,
            call_id=call_id,
            deny_ports=deny_ports,
            resolver=resolver,
            socket_path=Path(),
        )
        server = await asyncio.start_server(
            proxy._accept, host="127.0.0.1", port=0, limit=MAX_HEAD_BYTES
        )
        proxy.port = server.sockets[0].getsockname()[1]
        async with proxy._running(server):
            yield proxy

    @contextlib.asynccontextmanager
    async def _running(self, server: asyncio.Server) -> AsyncIterator[None]:
        """While ``server`` accepts for this proxy; then it is closed and every connection
        still open is cancelled."""
        try:
            yield
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    # -- events --------------------------------------------------------------------------------

    def _record(self, event: EgressEvent) -> None:
        if len(self.events) < MAX_EVENTS:
            self.events.append(event)
        else:
            self.dropped_events += 1
        log.info(
            "egress %s %s %s:%s %s (%s; tool %s, call %s)",
            "allowed" if event.allowed else "refused",
            event.method,
            event.host,
            event.port,
            ",".join(event.addresses),
            event.reason,
            self.tool_id,
            self.call_id,
        )

    # -- connections ---------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            async with self._slots:
                await self._handle(reader, writer)
        except asyncio.CancelledError:
            pass  # the call is over; the proxy is closing
        except OSError:
            pass  # a peer went away
        except Exception as exc:  # noqa: BLE001 - one bad connection must not stop the proxy
            log.warning("egress proxy: connection failed: %r", exc)
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port, method = "", 0, "?"
        try:
            try:
                head = await asyncio.wait_for(_read_head(reader), HEAD_TIMEOUT)
            except TimeoutError:
                raise _Refused(400, "no complete request head in time") from None
            request = _parse_request(head)
            host, port, method = request.host, request.port, request.method
            upstream = await self._open(request)
        except _Refused as refused:
            event = EgressEvent(host, port, refused.addresses, False, refused.reason, method)
            self._record(event)
            text = refused.reason.encode("utf-8", "replace")
            status = f"{refused.status} {_STATUS_TEXT.get(refused.status, 'Error')}"
            writer.write(
                f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                # Tells a client (the JavaScript host's fetch) the refusal is the proxy's.
                "X-Toolgate-Egress: refused\r\n"
                f"Content-Length: {len(text) + 1}\r\nConnection: close\r\n\r\n".encode()
                + text
                + b"\n"
            )
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.drain(), HEAD_TIMEOUT)
            return
        up_reader, up_writer = upstream
        try:
            if request.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(request.head)
            await _relay(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _open(self, request: _Request) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Check ``request`` and connect to its destination; :class:`_Refused` says why not."""
        host, port = request.host, request.port
        literal = parse_ip_host(host)
        if literal is not None:
            # An address given directly is judged as an address first: the reason then says
            # "loopback" rather than only "not allowed".
            verdict = address_verdict(literal, self.grants)
            if verdict is not None:
                raise _Refused(403, verdict)
        if port in self.deny_ports:
            raise _Refused(403, f"port {port} is one of the gateway's own ports")
        if not host_allowed(self.patterns, host, port):
            allowed = ", ".join(str(p) for p in self.patterns) or "nothing"
            raise _Refused(
                403,
                f"{_authority(host, port)} is not in the tool's network permission (allowed: "
                f"{allowed}; ports 80 and 443 unless a pattern names one)",
            )
        addresses = await self._resolve(host, port) if literal is None else [literal]
        texts = tuple(str(a) for a in addresses)
        for address in addresses:
            verdict = address_verdict(address, self.grants)
            if verdict is not None:
                answer = ", ".join(texts)
                raise _Refused(403, f"{host} resolves to {answer}: {verdict}", texts)
        failures: list[str] = []
        for address in addresses:  # only the checked ones: no second lookup
            try:
                stream = await asyncio.wait_for(
                    asyncio.open_connection(str(address), port, limit=_CHUNK), CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError) as exc:
                failures.append(f"{address}: {exc or type(exc).__name__}")
                continue
            reason = "allowed by the network permission" + (
                " and the operator's CIDR grant" if self._granted(addresses) else ""
            )
            self._record(EgressEvent(host, port, texts, True, reason, request.method))
            return stream
        where = _authority(host, port)
        raise _Refused(502, f"cannot connect to {where}: {'; '.join(failures)}", texts)

    def _granted(self, addresses: list[ipaddress.IPv4Address | ipaddress.IPv6Address]) -> bool:
        return any(address_verdict(a) is not None for a in addresses)

    async def _resolve(
        self, host: str, port: int
    ) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
        try:
            answer = await asyncio.wait_for(self.resolver(host, port), RESOLVE_TIMEOUT)
        except TimeoutError:
            raise _Refused(504, f"resolving {host} timed out") from None
        except OSError as exc:
            raise _Refused(502, f"cannot resolve {host}: {exc}") from None
        addresses = []
        for text in answer:
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                raise _Refused(502, f"the resolver answered {text!r} for {host}") from None
        if not addresses:
            raise _Refused(502, f"{host} has no address")
        return addresses


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _Refused(431, f"request head longer than {MAX_HEAD_BYTES} bytes") from None
    except asyncio.IncompleteReadError:
        raise _Refused(400, "connection closed before a complete request head") from None


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        host, rest = authority[: end + 1], authority[end + 1 :]
    elif authority.count(":") == 1:
        host, rest = authority.split(":")
        rest = ":" + rest
    else:
        host, rest = authority, ""
    if rest:
        port_text = rest[1:]
        if not rest.startswith(":") or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise _Refused(400, f"bad port in {authority!r}")
        port = int(port_text)
    elif default_port is None:
        raise _Refused(400, f"CONNECT needs host:port, got {authority!r}")
    else:
        port = default_port
    if not host or "@" in host:
        raise _Refused(400, f"bad host in {authority!r}")
    try:
        return normalize_host(host), port
    except ValueError as exc:
        raise _Refused(400, str(exc)) from None


def _parse_request(head: bytes) -> _Request:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _Refused(400, "request head is not ASCII") from None
    lines = text.split("\r\n")[:-2]
    if len(lines) > MAX_HEADERS + 1:
        raise _Refused(431, f"more than {MAX_HEADERS} header lines")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused(400, "not an HTTP/1.x request line")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _split_authority(target, None)
        return _Request(method, host, port, b"")
    if not target.lower().startswith("http://"):
        raise _Refused(
            400,
            "only CONNECT host:port and absolute http:// URLs are proxied (use CONNECT for https)",
        )
    try:
        url = urlsplit(target)
    except ValueError:
        raise _Refused(400, "bad URL") from None
    host, port = _split_authority(url.netloc, 80)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    headers = [b"%s %s %s" % (method.encode(), path.encode(), version.encode())]
    headers.append(b"Host: " + url.netloc.encode())
    for line in lines[1:]:
        name, sep, _value = line.partition(":")
        if not sep or not name or name != name.strip() or "\n" in line or "\r" in line:
            raise _Refused(400, f"bad header line {line[:80]!r}")
        if name.lower().encode() in _HOP_BY_HOP or name.lower() == "host":
            continue
        headers.append(line.encode())
    headers.append(b"Connection: close")
    return _Request(method, host, port, b"\r\n".join(headers) + b"\r\n\r\n")


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    """Copy both ways until the destination is done (a client's half-close is passed on), an
    error, or :data:`IDLE_TIMEOUT` without data either way."""
    last = [time.monotonic()]

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        while True:
            data = await src.read(_CHUNK)
            if not data:
                with contextlib.suppress(OSError):
                    if dst.can_write_eof():
                        dst.write_eof()
                return
            last[0] = time.monotonic()
            dst.write(data)
            await dst.drain()

    outbound = asyncio.ensure_future(pump(reader, up_writer))
    inbound = asyncio.ensure_future(pump(up_reader, writer))
    tasks = [outbound, inbound]
    try:
        pending: set[asyncio.Future[None]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=IDLE_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
            )
            if inbound in done or any(t.exception() is not None for t in done):
                return  # the destination has said all it will say, or a side failed
            if not done and time.monotonic() - last[0] >= IDLE_TIMEOUT:
                return
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
