"""The SSRF-checking httpx2 transport for REST tools, against real loopback servers (issue 8).

``allowed.test`` resolves (test resolver) to 127.0.0.1, opened by the grant ``127.0.0.1/32``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx2
import pytest

from toolgate.backends.rest_transport import GuardedTransport, guarded_client
from toolgate.sandbox.addresses import EgressRefusedError
from toolgate.sandbox.egress import EgressEvent

GRANT = ("127.0.0.1/32",)


@asynccontextmanager
async def server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """Answers ``/redirect?to=<url>`` with a 302 to ``<url>``, anything else with ``hello``."""
    paths: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1]
            paths.append(path)
            if path.startswith(b"/redirect?to="):
                location = path.split(b"=", 1)[1]
                writer.write(
                    b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n" % location
                )
            else:
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
                )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1], paths
    finally:
        srv.close()
        await srv.wait_closed()


def resolver(
    table: dict[str, list[str]], calls: list[str] | None = None
) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise OSError(f"no such host {host}")
        return table[host]

    return resolve


TABLE = {
    "allowed.test": ["127.0.0.1"],
    "private.test": ["10.0.0.7"],
    "mixed.test": ["93.184.216.34", "192.168.1.9"],
    "metadata.test": ["169.254.169.254"],
}


async def test_the_allowed_host_works_and_is_recorded() -> None:
    events: list[EgressEvent] = []
    async with (
        server() as (port, paths),
        guarded_client(cidr_grants=GRANT, resolver=resolver(TABLE), events=events) as client,
    ):
        response = await client.get(f"http://allowed.test:{port}/ok")
        assert client.trust_env is False
    assert response.status_code == 200 and response.text == "hello"
    assert paths == [b"/ok"]
    assert [(e.host, e.addresses, e.allowed) for e in events] == [
        ("allowed.test", ("127.0.0.1",), True)
    ]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.1:{port}/", "loopback"),  # no grant in this test
        ("http://2130706433:{port}/", "loopback"),
        ("http://0x7f000001:{port}/", "loopback"),
        ("http://[::ffff:127.0.0.1]:{port}/", "loopback"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://allowed.test:{port}/", "loopback"),
        ("http://private.test/", "private"),
        ("http://mixed.test/", "private"),
        ("http://metadata.test/", "metadata"),
        ("ftp://allowed.test/", "scheme"),
    ],
)
async def test_refused_without_a_grant(url: str, reason: str) -> None:
    events: list[EgressEvent] = []
    async with (
        server() as (port, paths),
        guarded_client(resolver=resolver(TABLE), events=events) as client,
    ):
        with pytest.raises((EgressRefusedError, httpx2.UnsupportedProtocol)) as caught:
            await client.get(url.format(port=port))
    if isinstance(caught.value, EgressRefusedError):
        assert reason in str(caught.value)
        assert events and not events[-1].allowed
    assert paths == []


async def test_a_redirect_to_a_private_address_is_refused_hop_by_hop() -> None:
    async with server() as (port, paths):
        targets = [
            "http://private.test/",
            f"http://127.0.0.2:{port}/",  # loopback, but outside the /32 grant
            f"http://[::ffff:127.0.0.1]:{port}/",
            "http://169.254.169.254/",
        ]
        for target in targets:
            events: list[EgressEvent] = []
            async with guarded_client(
                cidr_grants=GRANT,
                resolver=resolver(TABLE),
                events=events,
                follow_redirects=True,
            ) as client:
                with pytest.raises(EgressRefusedError):
                    await client.get(f"http://allowed.test:{port}/redirect?to={target}")
            assert [e.allowed for e in events] == [True, False], target
        # The first hop was served each time; no refused hop ever reached a server.
        assert all(p.startswith(b"/redirect") for p in paths) and len(paths) == len(targets)


async def test_a_redirect_within_the_rules_is_followed() -> None:
    async with (
        server() as (port, paths),
        guarded_client(
            cidr_grants=GRANT, resolver=resolver(TABLE), follow_redirects=True
        ) as client,
    ):
        response = await client.get(
            f"http://allowed.test:{port}/redirect?to=http://allowed.test:{port}/next"
        )
    assert response.text == "hello" and paths[-1] == b"/next"


async def test_hosts_ports_and_gateway_ports() -> None:
    async with server() as (port, paths):
        async with guarded_client(
            hosts=[f"allowed.test:{port}"], cidr_grants=GRANT, resolver=resolver(TABLE)
        ) as client:
            assert (await client.get(f"http://allowed.test:{port}/")).status_code == 200
            with pytest.raises(EgressRefusedError, match="network permission"):
                await client.get("http://allowed.test/")  # port 80 not declared
        async with guarded_client(
            cidr_grants=GRANT, deny_ports=[port], resolver=resolver(TABLE)
        ) as client:
            with pytest.raises(EgressRefusedError, match="gateway's own ports"):
                await client.get(f"http://allowed.test:{port}/")
    assert paths == [b"/"]


async def test_no_second_lookup() -> None:
    calls: list[str] = []
    answers = iter([["127.0.0.1"]])

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers, ["169.254.169.254"])

    async with server() as (port, paths):
        transport = GuardedTransport(cidr_grants=GRANT, resolver=rebinding)
        async with httpx2.AsyncClient(transport=transport, trust_env=False) as client:
            response = await client.get(f"http://allowed.test:{port}/once")
    assert response.text == "hello" and paths == [b"/once"]
    assert calls == ["allowed.test"]


def test_metadata_grants_are_refused() -> None:
    with pytest.raises(ValueError, match="metadata"):
        GuardedTransport(cidr_grants=["169.254.169.0/24"])
