"""A sandboxed script tool with a ``network`` permission: only the egress proxy leads out."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from egress_support import hello_server, test_resolver
from folder_tools import clean_environ, require_program, write_tool
from gateway_support import gateway_with
from toolgate import Gateway
from toolgate.backends.script import ScriptBackend
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import ImplementationKind, Permissions, SandboxMode, SandboxSpec, Tool
from toolgate.registry import RegisteredTool
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

pytestmark = pytest.mark.slow

PROBE = Path(__file__).parent / "fixtures" / "sandbox" / "probe.py"

pytest.importorskip("toolgate.sandbox.egress")


@pytest.fixture
def server() -> Iterator[int]:
    with hello_server() as port:
        yield port


@contextmanager
def _network_tool(
    tmp_path: Path, server: int, *, prestart: bool = False, **changes: Any
) -> Iterator[tuple[Gateway, Tool]]:
    """A gateway serving the probe as a compartment tool allowed to reach ``allowed.test``
    (the loopback ``server``, through the test resolver and a CIDR grant)."""
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
        **changes,
    )
    if prestart:
        tool = dataclasses.replace(tool, entry=dataclasses.replace(tool.entry, prestart=True))
    with gateway_with(environ=clean_environ()) as gateway:
        backend = gateway._backends[ImplementationKind.SCRIPT]
        assert isinstance(backend, ScriptBackend)
        backend.sandbox = Sandbox(cidr_grants={tool.id: ["127.0.0.1/32"]}, resolver=test_resolver)
        gateway.registry.add(RegisteredTool(tool, None, backend.unavailable_reason(tool)))
        yield gateway, tool


def test_only_the_declared_host_is_reachable_through_the_proxy(tmp_path: Path, server: int) -> None:
    with _network_tool(tmp_path, server) as (gateway, tool):
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


def test_a_warm_sandbox_serves_one_call_and_records_only_its_connections(
    tmp_path: Path, server: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="toolgate")
    with _network_tool(tmp_path, server, prestart=True) as (gateway, tool):
        assert gateway.prestart_processes() == 1  # two sandboxes prepared ahead, started
        first = gateway.call_sync(tool.id, {"op": "http", "url": f"http://allowed.test:{server}/"})
        second = gateway.call_sync(tool.id, {"op": "hello"})
        refused = gateway.call_sync(tool.id, {"op": "http", "url": f"http://127.0.0.1:{server}/"})
    assert first.content == {"ok": True, "value": "hello from the allowed host"}
    assert first.metadata["process"] == second.metadata["process"] == "prestarted"
    events = first.metadata["sandbox"]["egress"]
    assert first.metadata["sandbox"]["enforced"] is True
    assert [(e["host"], e["allowed"]) for e in events] == [("allowed.test", True)]
    # Each call had a sandbox and a proxy of its own: nothing of the first call shows here.
    assert second.content == {"ok": True, "value": "hello"}
    assert second.metadata["sandbox"]["egress"] == []
    assert refused.content["ok"] is False
    # The proxy prepared before the call logs its connections under the call that used it.
    assert f"call {first.call_id})" in caplog.text


def test_a_call_that_times_out_still_records_its_connections(tmp_path: Path, server: int) -> None:
    with _network_tool(tmp_path, server, timeout=3.0) as (gateway, tool):
        outcome = gateway.call_sync(
            tool.id, {"op": "http_then_hang", "url": f"http://allowed.test:{server}/"}
        )
        assert outcome.code == "timeout", outcome
        events = outcome.metadata["sandbox"]["egress"]
        assert [(e["host"], e["allowed"]) for e in events] == [("allowed.test", True)]


@pytest.mark.parametrize("tool_id", ["MCPServer:net", "mcpserver:net"])
def test_a_tool_named_like_an_mcp_server_does_not_get_the_servers_grant(
    tmp_path: Path, server: int, tool_id: str
) -> None:
    # "MCPServer:<name>" keys grant an MCP server's connection; a tool with such an id (from a
    # plugin or a tool folder) must not inherit the networks the operator opened for the server.
    with _network_tool(tmp_path, server, id=tool_id) as (gateway, tool):
        refused = gateway.call_sync(
            tool.id, {"op": "http", "url": f"http://allowed.test:{server}/"}
        )
        assert refused.content["ok"] is False, refused.content
        (event,) = refused.metadata["sandbox"]["egress"]
        assert event["allowed"] is False and "loopback" in event["reason"]
