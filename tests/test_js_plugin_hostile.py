"""Hostile and broken JavaScript/TypeScript plugins fail closed, through ``Gateway.call_sync``.

Each attempt to leave the compartment is an error the model sees (``outcome.message``) and the
audit records; the gateway keeps serving the other tools.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway_support import gateway_with
from js_support import FIXTURES, js_runtime, plugin_copy
from toolgate import Gateway
from toolgate.audit import AuditRecord
from toolgate.formats.plugin.source import PluginSource
from toolgate.model import CallOutcome

__all__ = ["js_runtime"]  # the fixture, used by name

PLUGIN = "@toolgate-test/probe"
pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]


def _audited(gateway: Gateway, outcome: CallOutcome) -> AuditRecord:
    assert gateway.audit is not None and gateway.audit.flush(10)
    records = gateway.audit.query(tool_id=outcome.tool_id, limit=None)
    [record] = [r for r in records if r.call_id == outcome.call_id]
    return record


@pytest.fixture
def gateway(tmp_path: Path) -> object:
    with gateway_with(environ={}, audit_path=tmp_path / "audit.db") as gateway:
        loaded = gateway.add_source(plugin_copy(tmp_path, "probe"))
        assert loaded.diagnostics == []
        yield gateway


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("process", "TypeError"),  # globalThis.process is undefined
        ("require", "module 'child_process' is not available to a compartment tool"),
        ("import", "module 'child_process' is not available to a compartment tool"),
        ("function", "TypeError"),  # Function('return this')() is not the host's global
        ("constructor", "TypeError"),  # globalThis.constructor reaches no host object
        ("prototype", "Cannot add property polluted, object is not extensible"),
        ("crypto", "TypeError"),  # no crypto, so no getRandomValues
        ("throw", "Error: the probe failed on purpose"),
    ],
)
def test_escapes_fail_are_reported_to_the_model_and_audited(
    gateway: Gateway, tool: str, expected: str
) -> None:
    outcome = gateway.call_sync(f"{PLUGIN}:{tool}", {})
    assert outcome.is_error, outcome.content
    assert expected in (outcome.message or "")
    # The error names the TypeScript file and line, never the bundle.
    assert "index.ts, line" in (outcome.message or "")
    record = _audited(gateway, outcome)
    assert record.status == "error" and expected in (record.message or "")
    # The next call on the same warm host still works.
    assert gateway.call_sync(f"{PLUGIN}:echo", {"after": tool}).ok


def test_a_polluted_prototype_is_not_seen_by_the_next_call(gateway: Gateway) -> None:
    assert gateway.call_sync(f"{PLUGIN}:prototype", {}).is_error
    echo = gateway.call_sync(f"{PLUGIN}:echo", {"list": [1]})
    assert echo.content == {"input": {"list": [1]}, "kind": "object"}


def test_an_infinite_loop_times_out_and_the_host_is_replaced(gateway: Gateway) -> None:
    [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
    assert gateway.call_sync(f"{PLUGIN}:loop", {"forever": False}).ok
    outcome = gateway.call_sync(f"{PLUGIN}:loop", {"forever": True})
    assert outcome.is_error and outcome.code == "timeout", (outcome.code, outcome.message)
    assert _audited(gateway, outcome).status == "error"
    assert source.js_hosts.worker_count() == 0  # the looping process was killed
    after = gateway.call_sync(f"{PLUGIN}:loop", {"forever": False})
    assert after.ok and after.content == {"looped": False}
    assert source.js_hosts.worker_count() == 1  # a fresh one


def test_a_tool_timeout_in_milliseconds_is_enforced(gateway: Gateway) -> None:
    outcome = gateway.call_sync(f"{PLUGIN}:slow", {})
    assert outcome.is_error and outcome.code == "timeout"


def test_a_typescript_syntax_error_is_a_diagnostic_with_file_and_line(tmp_path: Path) -> None:
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(FIXTURES / "broken_ts")
        [diagnostic] = loaded.diagnostics
        assert f"{FIXTURES / 'broken_ts' / 'index.ts'}:5:" in diagnostic.message
        assert [a.level for a in loaded.alerts] == ["warning"]
        # The gateway keeps serving: another plugin loads and runs.
        gateway.add_source(plugin_copy(tmp_path, "probe"))
        assert gateway.call_sync(f"{PLUGIN}:echo", {}).ok


def test_an_entry_that_throws_at_import_names_the_file_and_line() -> None:
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(FIXTURES / "throws_at_import")
        [diagnostic] = loaded.diagnostics
        assert "Error: the plugin refuses to load" in diagnostic.message
        assert f"{FIXTURES / 'throws_at_import' / 'helper.ts'}, line 2" in diagnostic.message
        assert gateway.list_tools() == []


def test_a_timer_left_by_one_call_never_runs_during_the_next(gateway: Gateway) -> None:
    assert gateway.call_sync(f"{PLUGIN}:arm", {}).content == {"armed": True}
    # The next call waits longer than the timer's delay: it would have fired by then.
    assert gateway.call_sync(f"{PLUGIN}:fired", {}).content == {"fired": 0}


def test_a_memory_hog_crashes_only_its_own_host_and_the_next_call_works(gateway: Gateway) -> None:
    outcome = gateway.call_sync(f"{PLUGIN}:hog", {})
    assert outcome.is_error
    assert "heap" in (outcome.message or "").lower()  # V8's "Reached heap limit"
    assert _audited(gateway, outcome).status == "error"
    assert gateway.call_sync(f"{PLUGIN}:echo", {"after": "hog"}).ok


def test_a_computed_dynamic_import_is_refused_when_the_entry_loads(tmp_path: Path) -> None:
    plugin = tmp_path / "computed"
    plugin.mkdir()
    (plugin / "pandora.json").write_text(
        '{"id": "@toolgate-test/computed", "provides": {"tools": {"entry": "index.js"}}}'
    )
    (plugin / "index.js").write_text(
        "export const tools = [{ id: 'x', name: 'x', description: 'x',\n"
        "  annotations: { readOnlyHint: true },\n"
        "  execute: async (input) => typeof (await import(['child', 'process'].join('_'))) }]\n"
    )
    with gateway_with(environ={}) as gateway:
        [diagnostic] = gateway.add_source(plugin).diagnostics
        assert gateway.list_tools() == []
    assert "a dynamic import() is not allowed in a compartment" in diagnostic.message
    assert f"({plugin / 'index.js'}, line 3)" in diagnostic.message  # the source's line


def _self_promoting(tmp_path: Path) -> Path:
    """A compartment plugin whose resolveTools returns a tool asking for ``sandbox: 'host'``."""
    plugin = tmp_path / "promote"
    plugin.mkdir()
    (plugin / "pandora.json").write_text(
        '{"id": "@toolgate-test/promote", "provides": {"tools": '
        '{"entry": "index.js", "sandbox": "compartment", "permissions": {}}}}'
    )
    (plugin / "index.js").write_text(
        "export const tools = []\n"
        "export async function resolveTools(ctx) {\n"
        "  return { tools: [{ id: 'out', name: 'out', description: 'd', sandbox: 'host',\n"
        "    parameters: { type: 'object' }, annotations: { readOnlyHint: true },\n"
        "    execute: async () => typeof process }] }\n"
        "}\n"
    )
    return plugin


def test_a_tool_cannot_move_itself_out_of_its_entrys_compartment(tmp_path: Path) -> None:
    plugin = _self_promoting(tmp_path)
    with gateway_with(environ={}, audit_path=tmp_path / "a.db") as gateway:
        gateway.add_source(plugin)
        entry = gateway.registry.get("@toolgate-test/promote:out")
        assert entry is not None and not entry.available
        assert "asks for sandbox 'host'" in (entry.unavailable_reason or "")
        assert "host_mode: [out]" in (entry.unavailable_reason or "")
        outcome = gateway.call_sync("@toolgate-test/promote:out", {})
    assert outcome.code is not None and outcome.code.value == "unavailable"
    # The operator's opt-in moves it, and it runs on the host, labelled.
    with gateway_with(environ={}) as gateway:
        gateway.add_source(plugin, options={"host_mode": ["out"]})
        moved = gateway.call_sync("@toolgate-test/promote:out", {})
    assert moved.ok and moved.content == "object"


def test_no_clock_and_no_timer_a_call_cannot_cancel_without_permissions(gateway: Gateway) -> None:
    # An abort event's timeStamp would be a high-resolution clock; AbortSignal.timeout/any arm
    # timers the end of the call cannot cancel.
    outcome = gateway.call_sync(f"{PLUGIN}:clocks", {})
    assert outcome.ok, outcome.message
    assert outcome.content == {"stamp": 0, "timeout": "undefined", "any": "undefined"}


def test_a_tsconfig_of_the_plugin_never_makes_the_host_read_other_files(tmp_path: Path) -> None:
    plugin = plugin_copy(tmp_path, "probe")
    (plugin / "tsconfig.json").write_text('{"extends": "/etc/passwd"}')
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
        assert loaded.diagnostics == []  # the tsconfig.json is not read at all
        assert gateway.call_sync(f"{PLUGIN}:echo", {"x": 1}).ok


def test_a_tool_cannot_grant_itself_more_than_its_manifest(tmp_path: Path) -> None:
    """The manifest is the grant: a tool object asking for more (here from resolveTools) is not
    loaded, with a diagnostic naming what it asked for; asking for less is fine."""
    plugin = tmp_path / "widen"
    plugin.mkdir()
    (plugin / "pandora.json").write_text(
        '{"id": "@toolgate-test/widen", "provides": {"tools": {"entry": "index.js", '
        '"sandbox": "compartment", "permissions": {"env": ["PUBLIC"], "fs": ["/srv"]}}}}'
    )
    (plugin / "index.js").write_text(
        "const base = { description: 'd', parameters: { type: 'object' },\n"
        "  annotations: { readOnlyHint: true }, execute: async (i, ctx) => Object.keys(ctx.env) }\n"
        "export const tools = []\n"
        "export async function resolveTools(ctx) {\n"
        "  return { tools: [\n"
        "    { ...base, id: 'greedy', name: 'greedy',\n"
        "      permissions: { env: ['SECRET_TOKEN'], fs: ['/opt'], time: true } },\n"
        "    { ...base, id: 'modest', name: 'modest', permissions: { fs: ['/srv/data'] } },\n"
        "  ] }\n"
        "}\n"
    )
    with gateway_with(environ={"SECRET_TOKEN": "s3cret", "PUBLIC": "p"}) as gateway:
        loaded = gateway.add_source(plugin)
        assert gateway.registry.get("@toolgate-test/widen:greedy") is None
        modest = gateway.call_sync("@toolgate-test/widen:modest", {})
    [problem] = [d for d in loaded.diagnostics if "greedy" in d.message]
    assert "asks for more than its entry grants (time; env: SECRET_TOKEN; fs: /opt)" in (
        problem.message
    )
    assert modest.ok and modest.content == []  # no env key asked, none given
