"""JavaScript/TypeScript Pandora plugins run as written, in an SES compartment on a warm host.

Every test goes through the public surface (``Gateway.call_sync``) with real Node.js processes
and the real ``ses`` package; the plugin is ``fixtures/js_plugins/probe`` (TypeScript).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from js_support import js_runtime, plugin_copy
from toolgate import Gateway
from toolgate.formats.plugin.source import PluginSource
from toolgate.model import SideEffect
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

__all__ = ["js_runtime"]  # the fixture, used by name

PLUGIN = "@toolgate-test/probe"
pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]


def _gateway(tmp_path: Path, environ: dict[str, str] | None = None, **entry: Any) -> Gateway:
    gateway = gateway_with(environ=environ or {}, audit_path=tmp_path / "audit.db")
    loaded = gateway.add_source(plugin_copy(tmp_path, "probe", **entry))
    assert loaded.diagnostics == [], loaded.diagnostics
    return gateway


def _host_count(gateway: Gateway) -> int:
    [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
    return source.js_hosts.worker_count()


def test_a_typescript_tool_loads_and_runs_in_a_warm_host(tmp_path: Path) -> None:
    with _gateway(tmp_path) as gateway:
        tool = gateway.registry.get(f"{PLUGIN}:echo").tool
        assert tool.side_effect is SideEffect.READ_ONLY
        assert tool.timeout == 60.0
        first = gateway.call_sync(f"{PLUGIN}:echo", {"n": 1})
        second = gateway.call_sync(f"{PLUGIN}:echo", {"n": 2})
        assert first.ok and second.ok, (first.message, second.message)
        assert first.content == {"input": {"n": 1}, "kind": "object"}
        assert second.content == {"input": {"n": 2}, "kind": "object"}
        assert first.metadata["sandbox"] == {
            "mode": "compartment",
            "enforced": True,
            "runtime": "ses",
        }
        assert gateway.call_sync(f"{PLUGIN}:globals", {}).ok  # another tool of the entry
        assert _host_count(gateway) == 1  # one warm process served the three calls
        assert gateway.registry.get(f"{PLUGIN}:slow").tool.timeout == 0.3


def test_the_globals_are_the_safe_list_and_the_javascript_intrinsics(tmp_path: Path) -> None:
    with _gateway(tmp_path) as gateway:
        outcome = gateway.call_sync(f"{PLUGIN}:globals", {})
    assert outcome.ok, outcome.message
    names = set(outcome.content["names"])
    safe = {
        "console", "URL", "URLSearchParams", "TextEncoder", "TextDecoder", "setTimeout",
        "clearTimeout", "setInterval", "clearInterval", "atob", "btoa", "queueMicrotask",
        "AbortController", "AbortSignal",
    }  # fmt: skip
    assert safe <= names
    for absent in ("process", "require", "fetch", "crypto", "Buffer", "Intl", "module"):
        assert absent not in names


def test_host_mode_runs_the_entry_in_plain_node_with_full_access(tmp_path: Path) -> None:
    with _gateway(tmp_path, sandbox="host") as gateway:
        tool = gateway.registry.get(f"{PLUGIN}:process").tool
        assert str(tool.sandbox.mode) == "host"
        outcome = gateway.call_sync(f"{PLUGIN}:process", {})
        assert outcome.ok, outcome.message
        assert isinstance(outcome.content["pid"], int)
        assert outcome.metadata["sandbox"] == {"mode": "host", "enforced": False, "runtime": "node"}
        # No compartment: Node's own globals, crypto included.
        assert gateway.call_sync(f"{PLUGIN}:crypto", {}).ok


def test_the_plugins_report_says_which_host_runs_each_tool(tmp_path: Path) -> None:
    with _gateway(tmp_path) as gateway:
        [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
        assert source.report is not None
        runs = {status.id: status.runs for status in source.report.tools}
    assert runs[f"{PLUGIN}:echo"] == "SES compartment (JavaScript host)"


def test_where_bubblewrap_works_the_host_also_runs_in_the_process_sandbox(tmp_path: Path) -> None:
    sandbox = Sandbox()
    if not sandbox.host().works:
        pytest.skip(f"bubblewrap cannot sandbox here: {sandbox.host().problem}")
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("inside")
    folder = plugin_copy(tmp_path, "probe", permissions={"fs": [str(data)]})
    with gateway_with(environ={}, sandbox=sandbox) as gateway:
        assert gateway.add_source(folder).diagnostics == []
        echo = gateway.call_sync(f"{PLUGIN}:echo", {"n": 1})
        read = gateway.call_sync(f"{PLUGIN}:read", {"path": str(data / "note.txt")})
        [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
        # The host process is bubblewrap: the JavaScript runs in its own namespaces.
        [pid] = source.js_hosts.pids()
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    assert program.endswith(b"bwrap")
    assert echo.ok and read.ok, (echo.message, read.message)
    assert read.content == {"text": "inside"}
    assert echo.metadata["sandbox"]["process_sandbox"] == "bwrap"


def test_without_a_working_bubblewrap_the_compartment_alone_is_the_boundary(
    tmp_path: Path,
) -> None:
    sandbox = Sandbox(SandboxConfig(bwrap_path=str(tmp_path / "no-such-bwrap"), layer="bubblewrap"))
    folder = plugin_copy(tmp_path, "probe")
    with gateway_with(environ={}, sandbox=sandbox) as gateway:
        gateway.add_source(folder)
        outcome = gateway.call_sync(f"{PLUGIN}:echo", {})
    assert outcome.ok, outcome.message
    assert outcome.metadata["sandbox"] == {
        "mode": "compartment",
        "enforced": True,
        "runtime": "ses",
    }
