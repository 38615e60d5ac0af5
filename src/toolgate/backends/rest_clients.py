"""The HTTP clients of REST tools: one per event loop and network rule set.

A REST call used to build its own client (transport, pool, settings). A :class:`ClientPool` keeps
one ``httpx2.AsyncClient`` per (event loop, tool's network rules) instead. Its connections are
**not** kept between calls (:mod:`.rest`: ``max_keepalive_connections=0``): an upstream's bytes
after one answer — a mis-framed length, a tail sent late — would otherwise be read as the next
caller's answer, and no check before reuse can see bytes still on their way.

What sharing a client does not change:

* Every request still goes through :class:`~toolgate.backends.rest_transport.GuardedTransport`
  (the scheme, the host and the gateway's ports per request, the resolved addresses per
  connection), and a client is never shared between tools (the key holds the tool's id and
  grants).
* Nothing of one call reaches the next: the token and the body are the request's; the client
  keeps no cookies (its jar refuses every cookie); timeouts are the request's.

Clients belong to the loop they were made on; the pool keeps them per loop and closes the least
recently used beyond :data:`MAX_CLIENTS` per loop. The clients of a loop that was closed
(``asyncio.run`` per call) are dropped, and their sockets shut, at the next
:meth:`ClientPool.client` call on any loop or at :meth:`ClientPool.close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Protocol

__all__ = ["MAX_CLIENTS", "MAX_CONNECTIONS", "ClientPool", "no_cookie_jar"]

#: Clients (tools × rule sets) one event loop keeps; past this the least recently used closes.
MAX_CLIENTS = 256
#: Connections one client opens at most to its endpoint (calls beyond wait for one).
MAX_CONNECTIONS = 100
#: Seconds :meth:`ClientPool.close` waits for the clients of a loop running in another thread.
CLOSE_WAIT = 5.0
#: Seconds between checks whether an evicted client is still in use.
RETIRE_CHECK = 1.0


class Idle(Protocol):
    """A client's transport: whether any call is using it; ending every connection without the
    event loop."""

    def idle(self) -> bool: ...

    def shut(self) -> None: ...


_Kept = tuple[Any, Idle]


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Refuses every cookie, so no call's cookie reaches another call."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


def no_cookie_jar() -> http.cookiejar.CookieJar:
    """A cookie jar that keeps nothing."""
    return http.cookiejar.CookieJar(policy=_NoCookies())


class ClientPool:
    """Kept clients per event loop (module documentation). Thread-safe."""

    def __init__(self, max_clients: int = MAX_CLIENTS) -> None:
        self.max_clients = max_clients
        self._lock = threading.Lock()
        self._loops: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, OrderedDict[Hashable, _Kept]
        ] = weakref.WeakKeyDictionary()
        self._retiring: set[asyncio.Task[None]] = set()

    def _drop_closed_loops(self) -> list[_Kept]:
        """Remove the clients of closed loops (their sockets hold the loop, so the weak keys
        alone never free them); the caller shuts them. Under the lock."""
        dead = [loop for loop in self._loops if loop.is_closed()]
        dropped: list[_Kept] = []
        for loop in dead:
            dropped.extend(self._loops.pop(loop).values())
        return dropped

    def client(self, key: Hashable, make: Callable[[], tuple[Any, Idle]]) -> Any:
        """The running loop's client for ``key``. ``make()`` gives a new client and its
        transport (whose ``idle()`` says no call is using it), the first time."""
        loop = asyncio.get_running_loop()
        evicted: list[_Kept] = []
        with self._lock:
            dropped = self._drop_closed_loops()
            clients = self._loops.get(loop)
            if clients is None:
                clients = self._loops[loop] = OrderedDict()
            kept = clients.get(key)
            if kept is not None:
                clients.move_to_end(key)
            else:
                kept = clients[key] = make()
                while len(clients) > self.max_clients:
                    evicted.append(clients.popitem(last=False)[1])
        for _client, transport in dropped:
            transport.shut()
        for old in evicted:
            task = loop.create_task(_retire(old))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        return kept[0]

    def clients(self) -> int:
        """Clients kept now, on every loop."""
        with self._lock:
            return sum(len(clients) for clients in self._loops.values())

    def close(self) -> None:
        """Close every kept client: on its own loop when that loop runs in another thread
        (waiting up to :data:`CLOSE_WAIT` s); on the running loop, queued (this call cannot wait
        for its own loop); on a loop that does not run, its sockets are shut at once."""
        with self._lock:
            loops = list(self._loops.items())
            self._loops.clear()
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, clients in loops:
            kept = list(clients.values())
            if loop is running:
                for client, _transport in kept:
                    loop.create_task(_close_quietly(client))
                continue
            closed = False
            if loop.is_running() and not loop.is_closed():
                try:
                    future = asyncio.run_coroutine_threadsafe(_close_all(kept), loop)
                    future.result(CLOSE_WAIT)
                    closed = True
                except Exception:  # noqa: BLE001 - the loop stopped meanwhile, or too slow
                    closed = False
            if not closed:
                for _client, transport in kept:
                    transport.shut()

    async def aclose(self) -> None:
        """Close the clients of the running loop and wait for it; the others as :meth:`close`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            mine = self._loops.pop(loop, OrderedDict())
        await asyncio.gather(*(_close_quietly(client) for client, _ in mine.values()))
        self.close()


async def _retire(kept: _Kept) -> None:
    """Close an evicted client once no call uses it (closing would cut a call's connection)."""
    client, transport = kept
    while not transport.idle():
        await asyncio.sleep(RETIRE_CHECK)
    await _close_quietly(client)


async def _close_all(kept: list[_Kept]) -> None:
    await asyncio.gather(*(_close_quietly(client) for client, _ in kept))


async def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        await client.aclose()
