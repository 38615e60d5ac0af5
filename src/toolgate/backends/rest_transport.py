"""An httpx2 transport that checks where it connects: SSRF protection for REST tools.

REST tools (and anything the gateway fetches on behalf of a tool, such as the MCP client's
requests to streamable HTTP servers, :mod:`.mcp_connection`) send requests from the gateway's own
process, so the egress proxy of the sandbox does not stand in front of them. This transport
applies the same rules in-process (:mod:`toolgate.sandbox.addresses`):

* every request (so every redirect hop, whoever follows it) is checked before it is sent: scheme
  ``http``/``https``, the normalized host against an optional allowlist, a port of the gateway
  itself (``deny_ports``), and a host that is an IP address (in any spelling) against the table;
* every new connection resolves the name **once**, refuses the whole answer when any address is
  not allowed (loopback, private, link-local, metadata, … unless the operator's CIDR grant for
  the tool covers it; metadata never), and connects to a checked address — no second lookup, so
  DNS rebinding cannot swap the address between check and use. TLS still verifies the name.

A refusal raises :class:`~toolgate.sandbox.addresses.EgressRefusedError` (a ``PermissionError``)
from ``client.send``; the request is never sent. Build clients with :func:`guarded_client`, which
also sets ``trust_env=False`` (no proxy or ``.netrc`` from the environment: an environment proxy
would make the proxy, not this transport, choose the address).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import select
import socket
import ssl
import weakref
from collections.abc import Collection, Iterable
from typing import Any

import httpcore2
import httpx2

from ..sandbox.addresses import (
    EgressRefusedError,
    HostPattern,
    IPAddress,
    address_verdict,
    host_allowed,
    normalize_host,
    parse_allowlist,
    parse_cidr_grants,
    parse_ip_host,
)
from ..sandbox.egress import EgressEvent, Resolver, system_resolver

__all__ = ["GuardedTransport", "guarded_client"]

_DEFAULT_PORTS = {"http": 80, "https": 443}
#: Bytes of a request a connection holds before sending (see :class:`_KeptStream`).
HOLD_BYTES = 64 * 1024
RESOLVE_TIMEOUT = 10.0


def _readable(fd: int) -> bool:
    """True when a read on ``fd`` would not block: data, or the peer's end of stream."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _KeptStream(httpcore2.AsyncNetworkStream):
    """A pooled connection's stream, made cheaper for many small requests:

    * its "is it readable" check costs one ``poll``: the pool asks every idle connection that
      question before each request (a readable idle connection is one the server closed), and
      httpcore2 answers it through anyio's extra attributes, which build a dict of lambdas per
      question (12 % of a proxied call's samples under load);
    * one request is one ``send``: httpcore2 writes the headers and the body separately, and on
      loopback each ``send`` costs the sender the receiver's wake-up too. Writes are held until
      the next read (HTTP/1.1 always reads the answer after its last write) or until
      :data:`HOLD_BYTES` are held, when they go at once — so a large body still streams."""

    __slots__ = ("_fd", "_held", "_held_timeout", "_inner", "_sock")

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._held = b""
        self._held_timeout: float | None = None
        sock = inner.get_extra_info("socket")
        self._sock = sock
        fd = sock.fileno() if sock is not None else -1
        self._fd = fd if fd >= 0 and hasattr(select, "poll") else None

    def shut(self) -> None:
        """End the connection now without its event loop (which may be closed): a ``shutdown``
        of the socket (the peer sees the end at once); the descriptor itself is closed when the
        stream is freed (closing it here could close a descriptor reused meanwhile)."""
        sock, self._sock, self._fd = self._sock, None, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    async def _flush(self) -> None:
        held, self._held = self._held, b""
        await self._inner.write(held, self._held_timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            await self._flush()
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        held = self._held + buffer if self._held else buffer
        if len(held) < HOLD_BYTES:
            self._held, self._held_timeout = held, timeout
            return
        self._held = b""
        await self._inner.write(held, timeout)

    async def aclose(self) -> None:
        self._fd = None  # the descriptor may be reused by another socket once closed
        self._sock = None
        self._held = b""
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        if self._held:
            await self._flush()
        return _KeptStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._fd is not None:
            return _readable(self._fd)
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore2.AsyncNetworkBackend):
    """Resolves once, checks every address, connects to a checked one."""

    def __init__(self, guard: GuardedTransport) -> None:
        self._guard = guard
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        guard = self._guard
        name = guard.normalize(host, port)
        addresses = await guard.resolve(name, port)
        texts = tuple(str(a) for a in addresses)
        for address in addresses:
            verdict = address_verdict(address, guard.grants)
            if verdict is not None:
                reason = f"{name} resolves to {', '.join(texts)}: {verdict}"
                guard.record(name, port, texts, False, reason)
                raise EgressRefusedError(reason)
        failures: list[str] = []
        for address in addresses:  # the checked addresses only: never a second lookup
            try:
                stream = await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failures.append(f"{address}: {exc}")
                continue
            guard.record(name, port, texts, True, "allowed")
            kept = _KeptStream(stream)
            guard.streams.add(kept)
            return kept
        raise httpcore2.ConnectError(f"cannot connect to {name}:{port}: {'; '.join(failures)}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        raise EgressRefusedError("Unix sockets are not a destination a tool may reach")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _holds_unread(connection: Any) -> bool:
    """True when an idle connection's HTTP/1.1 parser holds bytes nobody asked for: the
    endpoint sent more than its answer (a Content-Length counting characters, a body on a 204 or
    a HEAD answer, …). Those bytes would be read as the *next* request's answer — another
    caller's — so such a connection is never reused. Fails closed: a connection whose parser
    cannot be inspected counts as holding bytes."""
    http11 = getattr(connection, "_connection", None)
    if http11 is None:
        return False  # still connecting: no answer was read on it
    state = getattr(http11, "_h11_state", None)
    if state is None:
        return not isinstance(http11, httpcore2.AsyncHTTP2Connection)
    try:
        data, closed = state.trailing_data
    except Exception:  # noqa: BLE001 - an h11 without it: fail closed
        return True
    return bool(data) or closed


class _CleanPool(httpcore2.AsyncConnectionPool):
    """httpcore2's pool, except that a connection whose parser holds unread bytes when its
    answer is done is closed instead of kept (:func:`_holds_unread`). The readability check of
    idle connections cannot see those bytes: they were already read from the socket."""

    def _assign_requests_to_connections(self) -> list[Any]:
        reserved = {r.connection for r in self._requests}
        dirty = [
            c for c in self._connections if c not in reserved and c.is_idle() and _holds_unread(c)
        ]
        if dirty:
            self._connections = [c for c in self._connections if c not in dirty]
        return dirty + super()._assign_requests_to_connections()


class GuardedTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2`` async transport that refuses disallowed destinations (module docs).

    ``hosts``: a ``network`` permission the request host must match (``None``: any host, as
    for a REST endpoint the operator wrote); ``cidr_grants``: the operator's grants for this
    tool; ``deny_ports``: the gateway's own ports; ``resolver``: injectable for tests;
    ``events``: a list to append an :class:`~toolgate.sandbox.egress.EgressEvent` to for every
    allowed and refused destination (the call's audit record)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool = True,
        hosts: Collection[str] | None = None,
        cidr_grants: Collection[str] = (),
        deny_ports: Collection[int] = (),
        resolver: Resolver | None = None,
        events: list[EgressEvent] | None = None,
        max_connections: int = 10,
        keepalive_expiry: float | None = 5.0,
        max_keepalive_connections: int | None = None,
    ) -> None:
        self.patterns: tuple[HostPattern, ...] | None = (
            None if hosts is None else parse_allowlist(hosts)
        )
        self.grants = parse_cidr_grants(cidr_grants)
        self.deny_ports = frozenset(deny_ports)
        self.resolver = resolver or system_resolver
        self.events = events
        #: The streams of this transport's connections (to end them without their loop).
        self.streams: weakref.WeakSet[_KeptStream] = weakref.WeakSet()
        context = (
            verify if isinstance(verify, ssl.SSLContext) else httpx2.create_ssl_context(verify)
        )
        self._inner = httpx2.AsyncHTTPTransport(verify=context, trust_env=False)
        if not isinstance(getattr(self._inner, "_pool", None), httpcore2.AsyncConnectionPool):
            # Fail closed: on an httpx2 whose transport keeps its pool elsewhere, setting _pool
            # would silently leave connections unchecked.
            raise RuntimeError(
                f"httpx2 {httpx2.__version__} is not supported by toolgate's guarded transport"
            )
        # The pool is httpx2's own (its exception mapping and streams stay as they are); only
        # the network backend that opens connections is ours.
        if not hasattr(httpcore2.AsyncConnectionPool, "_assign_requests_to_connections"):
            raise RuntimeError(
                f"httpcore2 {httpcore2.__version__} is not supported by toolgate's guarded "
                "transport"
            )
        self._inner._pool = _CleanPool(
            ssl_context=context,
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=_GuardedBackend(self),
        )

    def record(
        self, host: str, port: int, addresses: tuple[str, ...], allowed: bool, reason: str
    ) -> None:
        if self.events is not None:
            self.events.append(EgressEvent(host, port, addresses, allowed, reason, "HTTP"))

    def normalize(self, host: str, port: int) -> str:
        """The normalized host, or :class:`EgressRefusedError` (recorded) when it has none."""
        try:
            return normalize_host(host)
        except ValueError as exc:
            self.record(host, port, (), False, str(exc))
            raise EgressRefusedError(str(exc)) from None

    def check(self, scheme: str, host: str, port: int) -> None:
        """Refuse (and record) a request the rules forbid before any connection is made."""
        reason: str | None = None
        literal = parse_ip_host(host)
        if scheme not in _DEFAULT_PORTS:
            reason = f"the scheme {scheme!r} is not http or https"
        elif literal is not None:
            reason = address_verdict(literal, self.grants)
        if reason is None and port in self.deny_ports:
            reason = f"port {port} is one of the gateway's own ports"
        patterns = self.patterns
        if reason is None and patterns is not None and not host_allowed(patterns, host, port):
            allowed = ", ".join(str(p) for p in patterns) or "nothing"
            reason = f"{host}:{port} is not in the tool's network permission ({allowed})"
        if reason is not None:
            self.record(host, port, (), False, reason)
            raise EgressRefusedError(reason)

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        literal = parse_ip_host(host)
        if literal is not None:
            return [literal]
        try:
            answer = await asyncio.wait_for(self.resolver(host, port), RESOLVE_TIMEOUT)
            addresses = [ipaddress.ip_address(text.split("%", 1)[0]) for text in answer]
        except (OSError, TimeoutError, ValueError) as exc:
            raise httpcore2.ConnectError(f"cannot resolve {host}: {exc}") from None
        if not addresses:
            raise httpcore2.ConnectError(f"{host} has no address")
        return addresses

    def idle(self) -> bool:
        """True when no request is in flight or waiting on this transport's connections."""
        pool = self._inner._pool
        return not pool._requests and all(c.is_idle() or c.is_closed() for c in pool.connections)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        scheme = request.url.scheme
        host = self.normalize(request.url.host, request.url.port or 0)
        port = request.url.port or _DEFAULT_PORTS.get(scheme, 0)
        self.check(scheme, host, port)
        return await self._inner.handle_async_request(request)

    def shut(self) -> None:
        """End every connection now, without the event loop (:meth:`_KeptStream.shut`)."""
        for stream in list(self.streams):
            stream.shut()

    async def aclose(self) -> None:
        await self._inner.aclose()


def guarded_client(
    *,
    verify: ssl.SSLContext | bool = True,
    hosts: Collection[str] | None = None,
    cidr_grants: Collection[str] = (),
    deny_ports: Collection[int] = (),
    resolver: Resolver | None = None,
    events: list[EgressEvent] | None = None,
    **client_options: Any,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` over a :class:`GuardedTransport`, ``trust_env=False``.
    ``client_options`` go to the client (``timeout``, ``follow_redirects``, …); redirects it
    follows are re-checked hop by hop, since each hop is a request through the transport."""
    transport = GuardedTransport(
        verify=verify,
        hosts=hosts,
        cidr_grants=cidr_grants,
        deny_ports=deny_ports,
        resolver=resolver,
        events=events,
    )
    return httpx2.AsyncClient(transport=transport, trust_env=False, **client_options)
