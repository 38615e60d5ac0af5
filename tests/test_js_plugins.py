"""JavaScript/TypeScript Pandora plugins run as written, in an SES compartment on a warm host.

Every test goes through the public surface (``Gateway.call_sync``) with real Node.js processes
and the real ``ses`` package; the plugin is ``fixtures/js_plugins/probe`` (TypeScript).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from js_support import js_runtime, plugin_copy
from toolgate import Gateway
from toolgate.model import SideEffect
from toolgate.sources.plugins import PluginSource

__all__ = ["js_runtime"]  # the fixture, used by name

PLUGIN = "@toolgate-test/probe"
pytestmark = pytest.mark.usefixtures("js_runtime")


def _gateway(tmp_path: Path, environ: dict[str, str] | None = None, **entry: Any) -> Gateway:
    gateway = Gateway(environ=environ or {}, audit_path=tmp_path / "audit.db")
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
        assert _host_count(gateway) == 1  # one warm process served both calls
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
