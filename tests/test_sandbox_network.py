"""A sandboxed script tool with a ``network`` permission: only the egress proxy leads out."""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from folder_tools import clean_environ, require_program, write_tool
from toolgate import Gateway
from toolgate.backends.script import ScriptBackend
from toolgate.loaders.tool_folder import load_tool_folder
from toolgate.model import ImplementationKind, Permissions, SandboxMode, SandboxSpec
from toolgate.registry import RegisteredTool
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

PROBE = Path(__file__).parent / "fixtures" / "sandbox" / "probe.py"

pytest.importorskip("toolgate.sandbox.egress")


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from the allowed host"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def _test_resolver(host: str, port: int) -> list[str]:
    table = {"allowed.test": ["127.0.0.1"], "private.test": ["10.1.2.3"]}
    if host not in table:
        raise OSError(f"{host}: no such host (test resolver)")
    return table[host]


def test_only_the_declared_host_is_reachable_through_the_proxy(tmp_path: Path, server: int) -> None:
    require_program("bwrap")
    if not probe_host().works:
        pytest.skip("bubblewrap cannot sandbox here")
    folder = write_tool(tmp_path / "tools", "net", PROBE.read_text(), runtime="python")
    loaded = load_tool_folder(folder)
    assert loaded.tool is not None
    tool = dataclasses.replace(
        loaded.tool,
        sandbox=SandboxSpec(
            SandboxMode.COMPARTMENT, Permissions(network=(f"allowed.test:{server}",))
        ),
    )
    with Gateway(environ=clean_environ()) as gateway:
        backend = gateway._backends[ImplementationKind.SCRIPT]
        assert isinstance(backend, ScriptBackend)
        backend.sandbox = Sandbox(cidr_grants={tool.id: ["127.0.0.1/32"]}, resolver=_test_resolver)
        gateway.registry.add(RegisteredTool(tool, None, backend.unavailable_reason(tool)))

        allowed = gateway.call_sync(
            tool.id, {"op": "http", "url": f"http://allowed.test:{server}/"}
        )
        assert allowed.content == {"ok": True, "value": "hello from the allowed host"}
        events = allowed.metadata["sandbox"]["egress"]
        assert [(e["host"], e["allowed"]) for e in events] == [("allowed.test", True)]

        for url in (
            f"http://127.0.0.1:{server}/",
            "http://169.254.169.254/latest/meta-data/",
            f"http://private.test:{server}/",
            "http://allowed.test:81/",
        ):
            refused = gateway.call_sync(tool.id, {"op": "http", "url": url})
            assert refused.content["ok"] is False, (url, refused.content)
            assert not any(e["allowed"] for e in refused.metadata["sandbox"]["egress"])
        # Around the proxy: the sandbox's loopback is its own, the host's server is not there.
        direct = gateway.call_sync(tool.id, {"op": "connect", "host": "127.0.0.1", "port": server})
        assert direct.content["ok"] is False
        again = gateway.call_sync(tool.id, {"op": "hello"})
        assert again.content == {"ok": True, "value": "hello"}


def test_a_call_that_times_out_still_records_its_connections(tmp_path: Path, server: int) -> None:
    require_program("bwrap")
    if not probe_host().works:
        pytest.skip("bubblewrap cannot sandbox here")
    folder = write_tool(tmp_path / "tools", "net", PROBE.read_text(), runtime="python")
    loaded = load_tool_folder(folder)
    assert loaded.tool is not None
    tool = dataclasses.replace(
        loaded.tool,
        timeout=3.0,
        sandbox=SandboxSpec(
            SandboxMode.COMPARTMENT, Permissions(network=(f"allowed.test:{server}",))
        ),
    )
    with Gateway(environ=clean_environ()) as gateway:
        backend = gateway._backends[ImplementationKind.SCRIPT]
        assert isinstance(backend, ScriptBackend)
        backend.sandbox = Sandbox(cidr_grants={tool.id: ["127.0.0.1/32"]}, resolver=_test_resolver)
        gateway.registry.add(RegisteredTool(tool, None, backend.unavailable_reason(tool)))

        outcome = gateway.call_sync(
            tool.id, {"op": "http_then_hang", "url": f"http://allowed.test:{server}/"}
        )
        assert outcome.code == "timeout", outcome
        events = outcome.metadata["sandbox"]["egress"]
        assert [(e["host"], e["allowed"]) for e in events] == [("allowed.test", True)]
