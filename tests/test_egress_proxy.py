"""The egress proxy of sandboxed tools, through real sockets (issue 8, "Network").

``allowed.test`` is served on loopback: a test resolver maps it to 127.0.0.1 and the operator's
CIDR grant ``127.0.0.1/32`` lets the proxy reach it. The bridge tests run the client inside a
real ``bwrap --unshare-net`` network namespace, where the bridge is the only way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import shutil
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from toolgate.model import Permissions
from toolgate.sandbox.bridge import bridge_argv
from toolgate.sandbox.egress import EgressProxy

GRANT = ("127.0.0.1/32",)


@asynccontextmanager
async def http_server() -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback HTTP/1.1 server answering ``hello <path>``; yields (port, request heads)."""
    heads: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            path = head.split(b" ")[1]
            body = b"hello " + path
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, heads
    finally:
        server.close()
        await server.wait_closed()


def resolver_for(
    table: dict[str, list[str]], calls: list[str] | None = None
) -> Callable[[str, int], Awaitable[list[str]]]:
    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise OSError(f"test resolver: no such host {host}")
        return table[host]

    return resolve


async def ask(proxy: EgressProxy, head: bytes, then: bytes = b"") -> bytes:
    """Send ``head`` (and after a 200, ``then``) to the proxy; everything it answered."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
    try:
        writer.write(head)
        await writer.drain()
        if then:
            status = await reader.readuntil(b"\r\n\r\n")
            if not status.startswith(b"HTTP/1.1 200"):
                return status + await reader.read()
            writer.write(then)
            await writer.drain()
            return status + await asyncio.wait_for(reader.read(), 30)
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


def connect(target: str) -> bytes:
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()


def get_through_tunnel(path: str = "/tunnel") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: allowed.test\r\n\r\n".encode()


def start(
    network: tuple[str, ...],
    *,
    grants: tuple[str, ...] = GRANT,
    table: dict[str, list[str]] | None = None,
    deny_ports: tuple[int, ...] = (),
    calls: list[str] | None = None,
) -> AbstractAsyncContextManager[EgressProxy]:
    return EgressProxy.start(
        Permissions(network=network),
        tool_id="demo:fetch",
        call_id="call-1",
        deny_ports=deny_ports,
        cidr_grants=grants,
        resolver=resolver_for(table or {"allowed.test": ["127.0.0.1"]}, calls),
    )


async def test_connect_to_the_allowed_host_works_and_is_recorded() -> None:
    async with http_server() as (port, _heads):
        async with start((f"allowed.test:{port}",)) as proxy:
            answer = await ask(proxy, connect(f"Allowed.Test.:{port}"), get_through_tunnel())
            assert answer.startswith(b"HTTP/1.1 200 Connection Established")
            assert answer.endswith(b"hello /tunnel")
            mode = os.stat(proxy.socket_path.parent).st_mode & 0o777
            assert mode == 0o700
            folder = proxy.socket_path.parent
        assert not folder.exists()  # removed with the proxy
    [event] = proxy.events
    assert (event.host, event.port, event.addresses, event.allowed) == (
        "allowed.test",
        port,
        ("127.0.0.1",),
        True,
    )
    assert "CIDR grant" in event.reason
    assert json.loads(json.dumps(event.as_dict()))["addresses"] == ["127.0.0.1"]


async def test_plain_http_is_forwarded_in_origin_form() -> None:
    async with http_server() as (port, heads), start((f"allowed.test:{port}",)) as proxy:
        request = (
            f"GET http://allowed.test:{port}/plain?x=1 HTTP/1.1\r\nHost: evil.test\r\n"
            "Proxy-Authorization: secret\r\nX-Tool: yes\r\n\r\n"
        ).encode()
        answer = await ask(proxy, request)
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"hello /plain?x=1")
    [head] = heads
    assert head.startswith(b"GET /plain?x=1 HTTP/1.1\r\n")
    assert f"Host: allowed.test:{port}".encode() in head  # the URL's authority, not the header
    assert b"X-Tool: yes" in head and b"Proxy-Authorization" not in head
    assert proxy.events[0].method == "GET" and proxy.events[0].allowed


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("169.254.169.254:80", "metadata"),
        ("[fd00:ec2::254]:80", "metadata"),
        ("127.0.0.1:{port}", "loopback"),
        ("2130706433:{port}", "loopback"),
        ("0x7f000001:{port}", "loopback"),
        ("0177.0.0.1:{port}", "loopback"),
        ("[::ffff:127.0.0.1]:{port}", "loopback"),
        ("[::1]:{port}", "loopback"),
        ("0.0.0.0:{port}", "unspecified"),
        ("other.test:443", "not in the tool's network permission"),
        ("allowed.test:8443", "not in the tool's network permission"),  # undeclared port
        ("allowed.test.evil.test:443", "not in the tool's network permission"),
        ("evil@allowed.test:443", "bad host"),
        ("allowed.test", "host:port"),
    ],
)
async def test_refused_destinations(target: str, reason: str) -> None:
    # No grant: an address literal of loopback is refused even though the pattern lists it.
    async with http_server() as (port, heads):
        network = ("allowed.test", f"127.0.0.1:{port}", f"[::1]:{port}", f"0.0.0.0:{port}")
        async with start(network, grants=()) as proxy:
            answer = await ask(proxy, connect(target.format(port=port)), get_through_tunnel())
    assert answer.split(b"\r\n")[0] in (b"HTTP/1.1 403 Forbidden", b"HTTP/1.1 400 Bad Request")
    assert reason.encode() in answer
    assert heads == []  # nothing reached the server
    [event] = proxy.events
    assert not event.allowed and reason in event.reason


async def test_odd_spellings_are_recognised_as_the_address_they_stand_for() -> None:
    async with http_server() as (port, _heads), start((f"allowed.test:{port}",)) as proxy:
        for spelling in ("2130706433", "0x7f000001", "0177.0.0.1", "127.1"):
            answer = await ask(proxy, connect(f"{spelling}:{port}"))
            assert answer.startswith(b"HTTP/1.1 403")
    # Even with the grant, the literal address is not the allowed *name*.
    assert [e.host for e in proxy.events] == ["127.0.0.1"] * 4
    assert all("not in the tool's network permission" in e.reason for e in proxy.events)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (["10.0.0.5"], "private"),
        (["93.184.216.34", "10.0.0.5"], "private"),  # one bad address refuses the whole answer
        (["127.0.0.1", "127.0.0.2"], "loopback"),  # 127.0.0.2 is outside the /32 grant
        (["169.254.169.254"], "metadata"),
        (["::ffff:127.0.0.1"], "loopback"),
        (["64:ff9b::a9fe:a9fe"], "metadata"),
        (["100.64.0.1"], "private"),
    ],
)
async def test_an_allowed_name_resolving_to_a_refused_address(
    answer: list[str], reason: str
) -> None:
    async with http_server() as (port, heads):
        table = {"allowed.test": answer}
        async with start((f"allowed.test:{port}",), table=table) as proxy:
            response = await ask(proxy, connect(f"allowed.test:{port}"), get_through_tunnel())
    assert response.startswith(b"HTTP/1.1 403") and reason.encode() in response
    assert heads == []
    [event] = proxy.events
    assert event.addresses == tuple(str(ipaddress.ip_address(a)) for a in answer)
    assert not event.allowed


async def test_the_gateways_own_ports_are_refused() -> None:
    async with http_server() as (port, heads):
        proxy_of_call = start((f"allowed.test:{port}",), deny_ports=(port,))
        async with proxy_of_call as proxy:
            answer = await ask(proxy, connect(f"allowed.test:{port}"), get_through_tunnel())
    assert answer.startswith(b"HTTP/1.1 403") and b"gateway's own ports" in answer
    assert heads == []


async def test_the_name_is_resolved_once_per_request() -> None:
    """A rebinding resolver answers loopback first, metadata after: the proxy never asks
    twice, so it connects to what it checked."""
    calls: list[str] = []
    answers = iter([["127.0.0.1"]])

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers, ["169.254.169.254"])

    async with (
        http_server() as (port, heads),
        EgressProxy.start(
            Permissions(network=(f"allowed.test:{port}",)),
            tool_id="demo:fetch",
            call_id="call-2",
            cidr_grants=GRANT,
            resolver=rebinding,
        ) as proxy,
    ):
        first = await ask(proxy, connect(f"allowed.test:{port}"), get_through_tunnel("/one"))
        second = await ask(proxy, connect(f"allowed.test:{port}"), get_through_tunnel())
    assert first.endswith(b"hello /one") and len(heads) == 1
    assert second.startswith(b"HTTP/1.1 403") and b"metadata" in second
    assert calls == ["allowed.test", "allowed.test"]  # one lookup per request, never two


@pytest.mark.parametrize(
    "pattern", ["*", "*.test", "*.com:443", "a.*.example.org", "https://x.example.org"]
)
def test_bad_patterns_are_refused_at_start(pattern: str) -> None:
    with pytest.raises(ValueError, match="tool demo:fetch"):
        EgressProxy.start(Permissions(network=(pattern,)), tool_id="demo:fetch", call_id="c")


def test_grants_over_metadata_are_refused_at_start() -> None:
    with pytest.raises(ValueError, match="metadata"):
        EgressProxy.start(
            Permissions(network=("allowed.test",)),
            tool_id="demo:fetch",
            call_id="c",
            cidr_grants=("169.254.0.0/16",),
        )


async def test_the_proxy_survives_garbage() -> None:
    async with http_server() as (port, _heads), start((f"allowed.test:{port}",)) as proxy:
        garbage = [
            b"\x00\xff\x13garbage\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",  # origin form: not a proxy request
            b"GET https://allowed.test/ HTTP/1.1\r\n\r\n",  # https must use CONNECT
            b"CONNECT allowed.test:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT [::1 HTTP/1.1\r\n\r\n",
            b"BREW coffee HTCPCP/1.0\r\n\r\n",
            b"GET http://allowed.test/ HTTP/1.1\r\nbad header\r\n\r\n",
            b"GET http://allowed.test/ HTTP/1.1\r\nX: a\nSmuggled: b\r\n\r\n",
            b"X" * (20 * 1024),  # a head past the limit
            b"CONNECT allowed.test:1",  # closed before the head ends
        ]
        for data in garbage:
            reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
            writer.write(data)
            if not data.endswith(b"\r\n\r\n") and len(data) < 1024:
                writer.write_eof()
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(), 30)
            writer.close()
            assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431")), (data[:40], answer)
        ok = await ask(proxy, connect(f"allowed.test:{port}"), get_through_tunnel("/after"))
    assert ok.endswith(b"hello /after")
    assert [e.allowed for e in proxy.events] == [False] * len(garbage) + [True]


# -- inside a real network namespace ---------------------------------------------------------

BWRAP = shutil.which("bwrap")
#: The interpreter the namespace runs (stdlib only): the real binary, not a virtual environment's
#: link, which may live under /tmp (a CI checkout) and be hidden by the namespace's own /tmp.
PYTHON = os.path.realpath(sys.executable)
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")


async def run_in_namespace(
    argv: list[str], bind: Path | None = None, timeout: float = 120
) -> tuple[int, str, str]:
    assert BWRAP is not None
    command = [BWRAP, "--unshare-net", "--die-with-parent", "--ro-bind", "/", "/"]
    command += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    if bind is not None:
        command += ["--bind", str(bind), str(bind)]
    process = await asyncio.create_subprocess_exec(
        *command,
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


NO_NETWORK_CLIENT = textwrap.dedent(
    """
    import json, socket, sys
    results = {}
    for name, target in [("public", ("93.184.216.34", 80)), ("host_loopback", ("127.0.0.1", PORT))]:
        try:
            socket.create_connection(target, timeout=5).close()
            results[name] = "connected"
        except OSError as exc:
            results[name] = type(exc).__name__
    try:
        socket.getaddrinfo("example.com", 80)
        results["dns"] = "resolved"
    except OSError as exc:
        results["dns"] = type(exc).__name__
    print(json.dumps(results))
    """
)


@needs_bwrap
async def test_without_network_permission_there_is_no_route_and_no_dns() -> None:
    async with http_server() as (port, heads):
        code, out, err = await run_in_namespace(
            [PYTHON, "-c", NO_NETWORK_CLIENT.replace("PORT", str(port))]
        )
    assert code == 0, err
    results = json.loads(out)
    assert results["public"] != "connected"
    assert results["host_loopback"] != "connected"  # the namespace's loopback is its own
    assert results["dns"] != "resolved"
    assert heads == []


BRIDGE_CLIENT = textwrap.dedent(
    """
    import json, os, socket, urllib.error, urllib.request
    results = {"proxy_env": os.environ.get("HTTPS_PROXY")}
    def fetch(url):
        try:
            with urllib.request.urlopen(url, timeout=20) as response:
                return response.read().decode()
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}: {exc.read().decode().strip()}"
        except OSError as exc:
            return type(exc).__name__
    results["allowed"] = fetch("http://allowed.test:PORT/via-bridge")
    results["metadata"] = fetch("http://169.254.169.254/latest/meta-data/")
    results["decimal"] = fetch("http://2130706433:PORT/")
    results["other"] = fetch("http://other.test:PORT/")
    proxy = socket.create_connection(("127.0.0.1", BRIDGE), timeout=20)
    proxy.sendall(b"CONNECT allowed.test:PORT HTTP/1.1\\r\\n\\r\\n")
    status = proxy.recv(1024)
    proxy.sendall(b"GET /tunnel HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n")
    data = b""
    while chunk := proxy.recv(65536):
        data += chunk
    results["connect"] = (status + data).decode()
    try:
        socket.create_connection(("93.184.216.34", 80), timeout=5).close()
        results["direct"] = "connected"
    except OSError as exc:
        results["direct"] = type(exc).__name__
    print(json.dumps(results))
    raise SystemExit(7)
    """
)


@needs_bwrap
async def test_the_bridge_is_the_only_way_out(tmp_path: Path) -> None:
    bridge_port = 3128
    async with http_server() as (port, _heads), start((f"allowed.test:{port}",)) as proxy:
        client = BRIDGE_CLIENT.replace("BRIDGE", str(bridge_port)).replace("PORT", str(port))
        argv = bridge_argv(
            PYTHON,
            str(proxy.socket_path),
            bridge_port,
            [PYTHON, "-c", client],
        )
        code, out, err = await run_in_namespace(argv, bind=proxy.socket_path.parent)
    assert code == 7, err  # the tool's exit code, passed through
    results = json.loads(out)
    assert results["proxy_env"] == f"http://127.0.0.1:{bridge_port}"
    assert results["allowed"] == "hello /via-bridge"
    assert results["metadata"].startswith("HTTP 403") and "metadata" in results["metadata"]
    assert results["decimal"].startswith("HTTP 403")
    assert results["other"].startswith("HTTP 403")
    assert results["connect"].startswith("HTTP/1.1 200 Connection Established")
    assert results["connect"].endswith("hello /tunnel")
    assert results["direct"] != "connected"
    allowed = [(e.host, e.allowed) for e in proxy.events]
    assert allowed.count(("allowed.test", True)) == 2
    assert ("169.254.169.254", False) in allowed and ("127.0.0.1", False) in allowed
    assert ("other.test", False) in allowed


@needs_bwrap
async def test_the_bridge_leaves_no_children_behind(tmp_path: Path) -> None:
    async with start(("allowed.test",)) as proxy:
        pid_file = proxy.socket_path.parent / "child.pid"
        tool = ["/bin/sh", "-c", f"sleep 300 & echo $! > {pid_file}; exit 3"]
        argv = bridge_argv(PYTHON, str(proxy.socket_path), 3128, tool)
        try:
            code, _out, err = await run_in_namespace(
                argv, bind=proxy.socket_path.parent, timeout=30
            )
            pid = int(pid_file.read_text())
            assert code == 3, err
            # Gone, or a zombie waiting for a reaper that is not ours: either way not running.
            for _ in range(200):
                try:
                    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except (FileNotFoundError, ProcessLookupError):
                    break
                if state in ("Z", "X"):
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail(f"the tool's child {pid} outlived the bridge")
        finally:
            if pid_file.exists():  # never leave the sleeper behind, even when the test fails
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)


@needs_bwrap
@pytest.mark.parametrize(
    ("tool", "code"),
    [
        (["/bin/sh", "-c", "kill -KILL $$"], 128 + 9),  # a signal N becomes 128 + N
        (["/no/such/program"], 127),
    ],
)
async def test_the_bridge_reports_how_the_tool_ended(tool: list[str], code: int) -> None:
    async with start(("allowed.test",)) as proxy:
        argv = bridge_argv(PYTHON, str(proxy.socket_path), 3128, tool)
        returncode, _out, err = await run_in_namespace(argv, bind=proxy.socket_path.parent)
    assert returncode == code, err


def test_bridge_argv_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="command"):
        bridge_argv(sys.executable, "/s", 3128, [])
    with pytest.raises(ValueError, match="port"):
        bridge_argv(sys.executable, "/s", 0, ["true"])
