"""The kept REST clients (:mod:`toolgate.backends.rest_clients`): one per loop and key, the least
recently used closed past the limit — only once no call uses it — and a jar that keeps no
cookie."""

from __future__ import annotations

import asyncio
import http.cookiejar
import urllib.request

import pytest

from toolgate.backends import rest_clients
from toolgate.backends.rest_clients import ClientPool, no_cookie_jar


class _Client:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


class _Transport:
    def __init__(self, busy: bool = False) -> None:
        self.busy = busy

    def idle(self) -> bool:
        return not self.busy


async def test_one_client_per_key_on_a_loop() -> None:
    pool = ClientPool()
    made: list[_Client] = []

    def make() -> tuple[_Client, _Transport]:
        made.append(_Client())
        return made[-1], _Transport()

    first = pool.client("a", make)
    assert pool.client("a", make) is first
    assert pool.client("b", make) is not first
    assert len(made) == 2 and pool.clients() == 2
    await pool.aclose()
    assert all(client.closed for client in made)
    assert pool.clients() == 0


def test_each_loop_has_its_own_clients() -> None:
    pool = ClientPool()

    async def get() -> object:
        return pool.client("a", lambda: (_Client(), _Transport()))

    assert asyncio.run(get()) is not asyncio.run(get())


async def test_an_evicted_client_closes_only_once_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest_clients, "RETIRE_CHECK", 0.01)
    pool = ClientPool(max_clients=1)
    busy = _Transport(busy=True)
    old = _Client()
    pool.client("old", lambda: (old, busy))
    pool.client("new", lambda: (_Client(), _Transport()))  # evicts "old", still in use
    await asyncio.sleep(0.05)
    assert not old.closed
    busy.busy = False
    await asyncio.sleep(0.05)
    assert old.closed
    assert pool.clients() == 1


def test_the_jar_keeps_no_cookie() -> None:
    jar = no_cookie_jar()
    request = urllib.request.Request("http://example.org/")

    class _Response:
        def info(self) -> object:
            import email.message

            message = email.message.Message()
            message["Set-Cookie"] = "tracker=1; Path=/"
            return message

    jar.extract_cookies(_Response(), request)  # type: ignore[arg-type]
    assert list(jar) == []
    plain = http.cookiejar.CookieJar()
    plain.extract_cookies(_Response(), request)  # type: ignore[arg-type]
    assert len(list(plain)) == 1  # the same answer is kept by an ordinary jar
