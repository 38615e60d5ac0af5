"""Pandora plugins (seed 001): manifests, tool objects, dynamic tools, alerts, the host-mode
opt-in for ``compartment`` tools, and calls through the whole pipeline.

The seed's weather plugin (``tests/fixtures/plugins/weather``) is the seed's ``weatherTool``
translated to Python; its ``execute`` really fetches over HTTP, from a local server started here
(``OPENWEATHER_API_BASE``, a declared env key, points it there). The search plugin is the seed's
``resolveTools`` example. Broken variants are written into temporary folders.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gateway_support import gateway_with
from toolgate.errors import ConfigError
from toolgate.formats._common.diagnostics import Diagnostic, Severity
from toolgate.formats.detect import detect_format, validate_path
from toolgate.formats.plugin.source import PluginSource
from toolgate.model import SandboxMode, SideEffect, SourceFormat

FIXTURES = Path(__file__).parent / "fixtures" / "plugins"
WEATHER_ID = "@pandorakit/weather:weather"
SEARCH_ID = "@pandorakit/search:search"
API_KEY = "test-key-0123"


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture
def weather(tmp_path: Path) -> Path:
    """A copy of the weather plugin (importing it writes __pycache__ next to it)."""
    return Path(shutil.copytree(FIXTURES / "weather", tmp_path / "weather"))


@pytest.fixture
def search(tmp_path: Path) -> Path:
    """A copy of the search plugin."""
    return Path(shutil.copytree(FIXTURES / "search", tmp_path / "search"))


class _WeatherApi(BaseHTTPRequestHandler):
    """OpenWeather's ``/data/2.5/weather`` as far as the plugin uses it."""

    requests: list[dict[str, list[str]]]

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        self.requests.append(query)
        if url.path != "/data/2.5/weather":
            status, body = 404, {"cod": 404, "message": "not found"}
        elif query.get("appid") != [API_KEY]:
            status, body = 401, {"cod": 401, "message": "Invalid API key"}
        else:
            city = query["q"][0]
            body = {"name": city, "main": {"temp": 21.5}, "weather": [{"main": "Clear"}]}
            status = 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


PROXY_VARIABLES = (
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
)


@pytest.fixture
def weather_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local OpenWeather stand-in: its base URL and the queries it received."""
    for name in PROXY_VARIABLES:  # urllib would send 127.0.0.1 through a configured proxy
        monkeypatch.delenv(name, raising=False)
    with weather_api_server() as served:
        yield served


@contextmanager
def weather_api_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Serve :class:`_WeatherApi` on a free loopback port until the block ends."""
    requests: list[dict[str, Any]] = []
    handler = type("Handler", (_WeatherApi,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def write_plugin(
    folder: Path,
    manifest: dict[str, Any] | str,
    files: dict[str, str],
    *,
    manifest_name: str = "pandora.json",
) -> Path:
    """A plugin folder with ``manifest`` (a dict as JSON, or text) and ``files``."""
    folder.mkdir(parents=True, exist_ok=True)
    text = manifest if isinstance(manifest, str) else json.dumps(manifest, indent=2)
    (folder / manifest_name).write_text(text, encoding="utf-8")
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(content), encoding="utf-8")
    return folder


def host_manifest(plugin_id: str = "@scope/broken", **tools: Any) -> dict[str, Any]:
    return {
        "id": plugin_id,
        "provides": {"tools": {"entry": "index.py", "sandbox": "host", **tools}},
    }


def errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity is Severity.ERROR]


# -- the seed's weather example ------------------------------------------------------------------


def test_weather_manifest_validates_and_is_detected(weather: Path) -> None:
    assert detect_format(weather) == "plugin"
    assert detect_format(weather / "pandora.json") == "plugin"
    assert validate_path(weather) == ("plugin", [])
    assert not (weather / "__pycache__").exists()  # validating imported nothing


@pytest.mark.slow
def test_weather_runs_through_the_pipeline_with_host_mode_opt_in(
    weather: Path, weather_api: tuple[str, list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    base, requests = weather_api
    environ = {"OPENWEATHER_API_KEY": API_KEY, "OPENWEATHER_API_BASE": base, "HOME": "/root"}
    with gateway_with(environ=environ) as gateway:
        loaded = gateway.add_source(weather, options={"host_mode": True})
        assert loaded.diagnostics == [] and loaded.alerts == []
        with caplog.at_level(logging.INFO, logger=f"toolgate.tool.{WEATHER_ID}"):
            outcome = gateway.call_sync(WEATHER_ID, {"city": "São Paulo"})
    assert outcome.ok, outcome.message
    assert outcome.content == {
        "name": "São Paulo",
        "main": {"temp": 21.5},
        "weather": [{"main": "Clear"}],
    }
    assert requests == [{"q": ["São Paulo"], "units": ["metric"], "appid": [API_KEY]}]
    records = [r for r in caplog.records if r.name == f"toolgate.tool.{WEATHER_ID}"]
    assert [r.getMessage() for r in records] == ["Fetching weather for São Paulo"]


def test_weather_tool_maps_onto_the_model(weather: Path) -> None:
    with gateway_with(environ={}) as gateway:
        gateway.add_source(weather, options={"host_mode": ["weather"]})
        tool = gateway.get_tool(WEATHER_ID)
    assert (tool.namespace, tool.name) == ("@pandorakit/weather", "weather")
    assert tool.title == "Weather"
    assert tool.description == "Get current weather for a city"
    assert tool.input_schema_dict()["required"] == ["city"]
    assert tool.timeout == 60.0  # the seed's default, 60000 ms
    assert tool.side_effect is SideEffect.READ_ONLY
    assert (tool.hints.read_only, tool.hints.destructive, tool.hints.idempotent) == (
        True,
        False,
        True,
    )
    assert tool.requires_approval is False
    assert tool.source.format is SourceFormat.PLUGIN
    assert tool.source.location == str(weather / "pandora.json")
    assert tool.env == ("OPENWEATHER_API_KEY", "OPENWEATHER_API_BASE")
    # It declared compartment (the default); the operator's opt-in makes it run on the host,
    # and the model records what really happens. The declared grants are kept.
    assert tool.sandbox.mode is SandboxMode.HOST
    assert tool.sandbox.permissions.network == ("api.openweathermap.org",)
    assert tool.entry is not None and getattr(tool.entry, "ref", None) == "weather:execute"


def test_weather_without_opt_in_is_not_imported_and_says_why(weather: Path) -> None:
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(weather)
        outcome = gateway.call_sync(WEATHER_ID, {"city": "Cairo"})
        alerts = gateway.alerts()
        source = gateway.declarations.sources[0]
    assert loaded.entries == []
    assert not (weather / "__pycache__").exists()  # the entry's code never ran
    assert outcome.code == "tool_not_found"
    [warning] = loaded.diagnostics
    assert warning.severity is Severity.WARNING
    assert (warning.path, warning.field) == (
        str(weather / "pandora.json"),
        "/provides/tools/sandbox",
    )
    assert "'compartment'" in warning.message and "cannot enforce" in warning.message
    assert "host_mode: true" in warning.message and "sources:" in warning.message
    assert [(a.source, a.level) for a in alerts] == [("@pandorakit/weather", "warning")]
    assert alerts[0].message == warning.message
    assert isinstance(source, PluginSource) and source.report is not None
    [entry] = source.report.entries
    assert (entry.entry, entry.sandbox, entry.imported) == (
        "index.py",
        SandboxMode.COMPARTMENT,
        False,
    )


def test_entry_code_runs_only_after_opt_in(tmp_path: Path) -> None:
    marker = tmp_path / "imported.marker"
    plugin = write_plugin(
        tmp_path / "marker",
        {"id": "@scope/marker", "provides": {"tools": {"entry": "index.py"}}},
        {
            "index.py": f"""
                from pathlib import Path
                Path({str(marker)!r}).write_text("the module ran")
                tools = [dict(id="t", name="T", description="d",
                              annotations={{"readOnlyHint": True}}, execute=lambda i, c: 1)]
            """
        },
    )
    assert PluginSource.validate(plugin) == []
    with gateway_with(environ={}) as gateway:
        gateway.add_source(plugin)
        assert not marker.exists()
        gateway.add_source(plugin / "pandora.json", options={"host_mode": True})
        assert marker.exists()
        assert gateway.call_sync("@scope/marker:t").content == 1


def test_host_mode_list_names_tools_by_local_or_full_id(weather: Path) -> None:
    for names in (["weather"], [WEATHER_ID]):
        with gateway_with(environ={}) as gateway:
            loaded = gateway.add_source(weather, options={"host_mode": names})
            assert [e.tool.id for e in loaded.entries if e.available] == [WEATHER_ID]
            assert loaded.diagnostics == []


def test_host_mode_list_without_the_tool_leaves_it_unavailable(weather: Path) -> None:
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(weather, options={"host_mode": ["forecast"]})
        outcome = gateway.call_sync(WEATHER_ID, {"city": "Cairo"})
    [entry] = loaded.entries
    assert not entry.available
    assert outcome.code == "unavailable"
    assert outcome.message is not None
    assert "'compartment'" in outcome.message and "host_mode: [weather]" in outcome.message
    [warning] = loaded.diagnostics
    assert warning.severity is Severity.WARNING and warning.field == "options/host_mode"
    assert "'forecast'" in warning.message and "its tools: weather" in warning.message


# -- env, logger, sync and async execute ---------------------------------------------------------


def test_ctx_env_holds_only_declared_keys_snapshotted_at_load(search: Path) -> None:
    environ = {"BRAVE_API_KEY": "b-1", "AWS_SECRET_ACCESS_KEY": "leak", "PATH": "/usr/bin"}
    with gateway_with(environ=environ) as gateway:
        gateway.add_source(search)
        environ["TAVILY_API_KEY"] = "set after loading"
        environ["BRAVE_API_KEY"] = "changed after loading"
        outcome = gateway.call_sync(SEARCH_ID, {"query": "toolgate"})
    assert outcome.ok, outcome.message
    assert outcome.content == {
        "backend": "brave",
        "query": "toolgate",
        "env_keys": ["BRAVE_API_KEY"],
        "has_key": True,
    }


def test_ctx_env_values_are_the_snapshot(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "env",
        host_manifest("@scope/env", permissions={"env": ["GREETING", "MISSING"]}),
        {
            "index.py": """
                def execute(input, ctx):
                    return dict(ctx.env)
                tools = [dict(id="env", name="Env", description="Show env",
                              annotations={"readOnlyHint": True}, execute=execute)]
            """
        },
    )
    environ = {"GREETING": "hello", "OTHER": "no"}
    with gateway_with(environ=environ) as gateway:
        gateway.add_source(plugin)
        environ["GREETING"] = "changed"
        assert gateway.call_sync("@scope/env:env").content == {"GREETING": "hello"}


def test_sync_execute_tool_error_and_awaitable_results(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "modes",
        host_manifest("@scope/modes"),
        {
            "index.py": """
                import asyncio
                from toolgate import ToolError

                def fail(input, ctx):
                    raise ToolError(f"no such city: {input['city']}")

                async def later(input, ctx):
                    await asyncio.sleep(0)
                    return {"async": input}

                class Counter:
                    def __init__(self):
                        self.id, self.name, self.description = "count", "Count", "Count"
                        self.annotations = {"readOnlyHint": False, "openWorldHint": False}
                    def execute(self, input, ctx):
                        return len(input)

                base = dict(name="N", description="d", annotations={"readOnlyHint": True})
                tools = [
                    {**base, "id": "fail", "execute": fail},
                    {**base, "id": "wrapped", "execute": lambda input, ctx: later(input, ctx)},
                    {**base, "id": "async", "execute": later},
                    Counter(),
                ]
            """
        },
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
        assert loaded.diagnostics == []
        failed = gateway.call_sync("@scope/modes:fail", {"city": "Atlantis"})
        wrapped = gateway.call_sync("@scope/modes:wrapped", {"x": 1})
        awaited = gateway.call_sync("@scope/modes:async", {"x": 2})
        counted = gateway.call_sync("@scope/modes:count", {"a": 1, "b": 2})
        count_tool = gateway.get_tool("@scope/modes:count")
    assert (failed.code, failed.message) == ("tool_error", "no such city: Atlantis")
    assert wrapped.content == {"async": {"x": 1}}
    assert awaited.content == {"async": {"x": 2}}
    assert counted.content == 2
    # readOnlyHint false + openWorldHint false → local_write (model/effects.py).
    assert count_tool.side_effect is SideEffect.LOCAL_WRITE


def test_require_approval_from_the_manifest(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "approve",
        host_manifest("@scope/approve", requireApproval=True),
        {
            "index.py": """
                tools = [dict(id="delete", name="Delete", description="Delete a thing",
                              annotations={"readOnlyHint": False, "destructiveHint": True},
                              execute=lambda input, ctx: "deleted")]
            """
        },
    )
    with gateway_with(environ={}) as gateway:
        gateway.add_source(plugin)
        tool = gateway.get_tool("@scope/approve:delete")
        outcome = gateway.call_sync(tool.id)
    assert tool.requires_approval and tool.side_effect is SideEffect.EXTERNAL_WRITE
    assert outcome.code == "user_rejection"  # no approver configured: never runs unasked


# -- resolve_tools ------------------------------------------------------------------------------


def test_resolve_tools_gets_plugin_config_and_returns_alerts(search: Path) -> None:
    environ = {"BRAVE_API_KEY": "b", "TAVILY_API_KEY": "t"}
    with gateway_with(environ=environ) as gateway:
        loaded = gateway.add_source(search, options={"config": {"searchBackend": "tavily"}})
        tool = gateway.get_tool(SEARCH_ID)
        outcome = gateway.call_sync(SEARCH_ID, {"query": "q"})
    assert loaded.diagnostics == []
    assert [(a.source, a.level, a.message) for a in loaded.alerts] == [
        ("@pandorakit/search", "info", "Using Tavily")
    ]
    assert tool.title == "Search (Tavily)" and tool.timeout == 15.0
    assert outcome.content["backend"] == "tavily"
    assert outcome.content["env_keys"] == ["BRAVE_API_KEY", "TAVILY_API_KEY"]


def test_resolve_tools_warning_alerts_and_no_tool(search: Path) -> None:
    with gateway_with(environ={"UNRELATED": "x"}) as gateway:
        loaded = gateway.add_source(search, options={"config": {"searchBackend": "brave"}})
        assert gateway.registry.get(SEARCH_ID) is None
    assert loaded.entries == [] and loaded.diagnostics == []
    [alert] = loaded.alerts
    assert alert.level == "warning" and "No search API key is set" in alert.message


def test_resolve_tools_that_raises_is_a_warning_and_static_tools_still_load(
    tmp_path: Path,
) -> None:
    plugin = write_plugin(
        tmp_path / "flaky",
        host_manifest("@scope/flaky"),
        {
            "index.py": """
                tools = [dict(id="static", name="S", description="Static",
                              annotations={"readOnlyHint": True}, execute=lambda i, c: "s")]

                async def resolve_tools(ctx):
                    raise RuntimeError("the registry is down")
            """
        },
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
        assert gateway.call_sync("@scope/flaky:static").content == "s"
    assert [e.tool.id for e in loaded.entries] == ["@scope/flaky:static"]
    assert loaded.diagnostics == []
    [alert] = loaded.alerts
    assert (alert.source, alert.level) == ("@scope/flaky", "warning")
    assert "RuntimeError: the registry is down" in alert.message
    assert f"({(plugin / 'index.py').resolve()}, line 6)" in alert.message
    assert "dynamic tools were not loaded" in alert.message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("return [1, 2]", "returned list, not {tools, alerts}"),
        ("return None", "returned NoneType, not {tools, alerts}"),
        (
            "return {'tools': [], 'alerts': [{'level': 'error', 'message': 'x'}]}",
            "malformed alert at index 0",
        ),
        ("return {'tools': [], 'alerts': 'oops'}", "'alerts' that is not a list"),
        ("import time; time.sleep(5)", "did not return within 0.2 s"),
    ],
)
def test_resolve_tools_misbehaving_is_a_warning_alert(
    tmp_path: Path, body: str, expected: str
) -> None:
    plugin = write_plugin(
        tmp_path / "odd",
        host_manifest("@scope/odd"),
        {"index.py": f"tools = []\n\ndef resolve_tools(ctx):\n    {body}\n"},
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin, options={"resolve_timeout": 0.2})
    assert loaded.entries == []
    assert [a.level for a in loaded.alerts] == ["warning"]
    assert expected in loaded.alerts[0].message


def test_resolve_tools_seed_spelling_and_object_results(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "camel",
        host_manifest("@scope/camel", permissions={"env": ["REGION"]}),
        {
            "index.py": """
                from types import SimpleNamespace

                def resolveTools(ctx):
                    tool = SimpleNamespace(
                        id="where", name="Where", description="Region",
                        annotations=SimpleNamespace(readOnlyHint=True),
                        execute=lambda input, c: c.env["REGION"] + "/" + ctx.pluginConfig["zone"],
                    )
                    alerts = [{"level": "info", "message": "ok"}]
                    return SimpleNamespace(tools=[tool], alerts=alerts)
            """
        },
    )
    with gateway_with(environ={"REGION": "eu"}) as gateway:
        loaded = gateway.add_source(plugin, options={"config": {"zone": "west"}})
        assert gateway.call_sync("@scope/camel:where").content == "eu/west"
    assert [a.message for a in loaded.alerts] == ["ok"]


# -- per-tool sandbox overrides ------------------------------------------------------------------


def test_compartment_override_in_a_host_entry_is_unavailable_until_opted_in(
    tmp_path: Path,
) -> None:
    plugin = write_plugin(
        tmp_path / "mixed",
        host_manifest("@scope/mixed"),
        {
            "index.py": """
                base = dict(name="N", description="d", annotations={"readOnlyHint": True})
                tools = [
                    {**base, "id": "native", "execute": lambda i, c: "native"},
                    {**base, "id": "boxed", "sandbox": "compartment",
                     "permissions": {"network": ["API.Example.com."]},
                     "execute": lambda i, c: "boxed ran"},
                ]
            """
        },
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
        native = gateway.call_sync("@scope/mixed:native")
        boxed = gateway.call_sync("@scope/mixed:boxed")
        boxed_tool = gateway.get_tool("@scope/mixed:boxed")
        source = gateway.declarations.sources[0]
    assert native.content == "native"
    assert boxed.code == "unavailable" and boxed.message is not None
    assert "'compartment'" in boxed.message and "host_mode: [boxed]" in boxed.message
    assert boxed_tool.sandbox.mode is SandboxMode.COMPARTMENT
    assert boxed_tool.sandbox.permissions.network == ("api.example.com",)
    # The binding itself refuses too (fails closed should anything bypass availability).
    [boxed_entry] = [e for e in loaded.entries if e.tool.id == "@scope/mixed:boxed"]
    with pytest.raises(Exception, match="compartment"):
        boxed_entry.binding.func()
    assert isinstance(source, PluginSource) and source.report is not None
    runs = {t.id: t.runs for t in source.report.tools}
    assert runs == {"@scope/mixed:native": "host", "@scope/mixed:boxed": "not run"}

    with gateway_with(environ={}) as gateway:
        gateway.add_source(plugin, options={"host_mode": ["boxed"]})
        assert gateway.call_sync("@scope/mixed:boxed").content == "boxed ran"
        assert gateway.get_tool("@scope/mixed:boxed").sandbox.mode is SandboxMode.HOST


# -- broken tool objects --------------------------------------------------------------------------

_BASE_TOOL = (
    'dict(id="t", name="T", description="d", annotations={"readOnlyHint": True}, '
    "execute=lambda input, ctx: 1)"
)
_OK_TOOL = _BASE_TOOL.replace('id="t"', 'id="ok"')
_U_TOOL = _BASE_TOOL.replace('id="t"', 'id="u"')


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        ("t.pop('annotations')", "/tools/0/annotations", "'annotations' is required"),
        (
            "t['annotations'] = {}",
            "/tools/0/annotations/readOnlyHint",
            "'readOnlyHint' is required",
        ),
        (
            "t['annotations'] = {'readOnlyHint': 'yes'}",
            "/tools/0/annotations/readOnlyHint",
            "boolean",
        ),
        ("t['parameters'] = {'type': 'string'}", "/tools/0/parameters/type", "(type: object)"),
        (
            "t['parameters'] = {'type': 'object', 'properties': {'x': {'type': 'nope'}}}",
            "/tools/0/parameters",
            "not a valid JSON Schema",
        ),
        (
            "t['parameters'] = {'type': 'object', 'default': object()}",
            "/tools/0/parameters",
            "JSON values",
        ),
        ("t['execute'] = 5", "/tools/0/execute", "must be a function"),
        ("t['execute'] = lambda input: 1", "/tools/0/execute", "two positional arguments"),
        ("t.pop('execute')", "/tools/0/execute", "'execute' is required"),
        ("t['timeout'] = -5", "/tools/0/timeout", "positive number of milliseconds"),
        ("t['timeout'] = True", "/tools/0/timeout", "positive number of milliseconds"),
        ("t['id'] = 'a:b'", "/tools/0/id", "not a valid tool id"),
        ("t['name'] = ''", "/tools/0/name", "non-empty string"),
        ("t.pop('description')", "/tools/0/description", "'description' is required"),
        ("t['sandbox'] = 'vm'", "/tools/0/sandbox", "'compartment', 'host'"),
        (
            "t['permissions'] = {'env': ['1X']}",
            "/tools/0/permissions/env/0",
            "not a valid environment",
        ),
        (
            "t['permissions'] = {'network': ['*']}",
            "/tools/0/permissions/network/0",
            "not a valid host",
        ),
    ],
)
def test_bad_tool_object_names_plugin_tool_and_field(
    tmp_path: Path, change: str, field: str, expected: str
) -> None:
    plugin = write_plugin(
        tmp_path / "broken",
        host_manifest(),
        {"index.py": f"t = {_BASE_TOOL}\n{change}\ntools = [{_OK_TOOL}, t]\n"},
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
    # The good tool loads; the broken one does not, with one precise error.
    assert [e.tool.id for e in loaded.entries] == ["@scope/broken:ok"]
    [problem] = errors(loaded.diagnostics)
    assert problem.path == str((plugin / "index.py").resolve())
    assert problem.field == field.replace("/tools/0", "/tools/1")
    assert problem.message.startswith("plugin @scope/broken, tool ")
    label = "'a:b'" if "a:b" in change else "'t'"
    assert f"tool {label}" in problem.message
    assert expected in problem.message


def test_bad_tool_without_an_id_is_named_by_index(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "broken",
        host_manifest(),
        {"index.py": 'tools = ["not a tool", {"name": "x"}]\n'},
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
    problems = errors(loaded.diagnostics)
    assert problems[0].field == "/tools/0" and "must be an object" in problems[0].message
    assert "tool at index 0" in problems[0].message
    assert any(p.field == "/tools/1/id" and "tool at index 1" in p.message for p in problems)


def test_bad_resolved_tool_and_bad_exports(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "broken",
        host_manifest(),
        {
            "index.py": """
                tools = []
                def resolve_tools(ctx):
                    return {"tools": [{"id": "r", "name": "R", "description": "d",
                                       "annotations": {}, "execute": lambda i, c: 1}]}
            """
        },
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
    [problem] = errors(loaded.diagnostics)
    assert problem.field == "resolve_tools()/tools/0/annotations/readOnlyHint"
    assert "plugin @scope/broken, tool 'r'" in problem.message

    for source, field, expected in [
        ("x = 1\n", "/tools", "exports neither 'tools'"),
        ("tools = {'id': 'x'}\n", "/tools", "must be a list of tool objects"),
        ("tools = []\nresolve_tools = 3\n", "/resolve_tools", "must be a function"),
    ]:
        (plugin / "index.py").write_text(source)
        with gateway_with(environ={}) as gateway:
            [problem] = errors(gateway.add_source(plugin).diagnostics)
        assert (problem.field, expected in problem.message) == (field, True)


def test_duplicate_tool_ids_and_import_errors(tmp_path: Path) -> None:
    plugin = write_plugin(
        tmp_path / "dup",
        host_manifest("@scope/dup"),
        {
            "index.py": f"""
                tools = [{_BASE_TOOL}]
                def resolve_tools(ctx):
                    return {{"tools": [{_BASE_TOOL}]}}
            """
        },
    )
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
        assert [e.tool.id for e in loaded.entries] == ["@scope/dup:t"]
        [problem] = errors(loaded.diagnostics)
        assert "'t' is declared twice" in problem.message

        crash = write_plugin(
            tmp_path / "crash",
            host_manifest("@scope/crash"),
            {"index.py": "import json\n\ndef broken(:\n    pass\n"},
        )
        crashed = gateway.add_source(crash)
        still = gateway.call_sync("@scope/dup:t")
    assert crashed.entries == [] and still.content == 1  # other plugins keep working
    [problem] = crashed.diagnostics
    assert problem.path == str((crash / "index.py").resolve())
    assert (
        "plugin @scope/crash: importing the entry 'index.py' failed: SyntaxError" in problem.message
    )
    assert "line 3" in problem.message


def test_relative_imports_and_reload_pick_up_edits(search: Path) -> None:
    with gateway_with(environ={"BRAVE_API_KEY": "b"}) as gateway:
        gateway.add_source(search)
        assert gateway.call_sync(SEARCH_ID, {"query": "a"}).content["backend"] == "brave"
        backends = search / "src" / "backends.py"
        backends.write_text(
            backends.read_text().replace('"brave": ("Brave Search"', '"brave": ("Brave 2"')
        )
        os.utime(backends, (1, 1))  # a different mtime than the cached bytecode's
        [source] = gateway.declarations.sources
        reloaded = gateway.declarations.reload(source)
        assert [a.message for a in reloaded.alerts] == ["Using Brave 2"]
        assert gateway.get_tool(SEARCH_ID).title == "Search (Brave 2)"


# -- the manifest --------------------------------------------------------------------------------

_GOOD = {"id": "@scope/m", "provides": {"tools": {"entry": "index.py", "sandbox": "host"}}}


def _with(path: str, value: Any) -> dict[str, Any]:
    """``_GOOD`` with the field at ``path`` (dots) set to ``value`` (``...`` deletes it)."""
    manifest = json.loads(json.dumps(_GOOD))
    *parents, last = path.split(".")
    target = manifest
    for part in parents:
        target = target.setdefault(part, {})
    if value is ...:
        target.pop(last)
    else:
        target[last] = value
    return manifest


@pytest.mark.parametrize(
    ("manifest", "field", "expected"),
    [
        (_with("id", ...), "/id", "'id' is required"),
        (_with("id", "has space"), "/id", "not a valid plugin id"),
        (_with("id", "a:b"), "/id", "not a valid plugin id"),
        (_with("id", 7), "/id", "must be a string"),
        (_with("name", ["x"]), "/name", "must be a string"),
        (_with("provides", ...), "/provides", "'provides' is required"),
        (_with("provides.tools", ...), "/provides/tools", "'provides.tools' is required"),
        (_with("provides.tools", []), "/provides/tools", "non-empty list"),
        (_with("provides.tools", ["index.py"]), "/provides/tools/0", "must be an object"),
        (_with("provides.tools.entry", ...), "/provides/tools/entry", "'entry' is required"),
        (_with("provides.tools.entry", "/etc/passwd"), "/provides/tools/entry", "relative"),
        (
            _with("provides.tools.entry", "../outside.py"),
            "/provides/tools/entry",
            "outside the plugin",
        ),
        (_with("provides.tools.entry", "link.py"), "/provides/tools/entry", "outside the plugin"),
        (
            _with("provides.tools.entry", "index"),
            "/provides/tools/entry",
            "did you mean 'index.py'",
        ),
        (_with("provides.tools.entry", "README.md"), "/provides/tools/entry", "ending in .py"),
        (
            _with("provides.tools.entry", "my-tools.py"),
            "/provides/tools/entry",
            "not a Python identifier",
        ),
        (_with("provides.tools.entry", "pkg"), "/provides/tools/entry", "no __init__.py"),
        (_with("provides.tools.sandbox", "vm"), "/provides/tools/sandbox", "'compartment', 'host'"),
        (
            _with("provides.tools.permissions", []),
            "/provides/tools/permissions",
            "must be an object",
        ),
        (
            _with("provides.tools.permissions", {"network": ["https://api.example.com/v1"]}),
            "/provides/tools/permissions/network/0",
            "without scheme or path",
        ),
        (
            _with("provides.tools.permissions", {"network": ["*.com"]}),
            "/provides/tools/permissions/network/0",
            "whole top-level domain",
        ),
        (
            _with("provides.tools.permissions", {"network": ["api.example.com:99999"]}),
            "/provides/tools/permissions/network/0",
            "port",
        ),
        (
            _with("provides.tools.permissions", {"env": ["1BAD"]}),
            "/provides/tools/permissions/env/0",
            "not a valid environment variable name",
        ),
        (
            _with("provides.tools.permissions", {"env": "KEY"}),
            "/provides/tools/permissions/env",
            "must be a list",
        ),
        (
            _with("provides.tools.permissions", {"fs": [""]}),
            "/provides/tools/permissions/fs/0",
            "non-empty string",
        ),
        (
            _with("provides.tools.permissions", {"time": "yes"}),
            "/provides/tools/permissions/time",
            "boolean",
        ),
        (
            _with("provides.tools.requireApproval", "yes"),
            "/provides/tools/requireApproval",
            "boolean",
        ),
    ],
)
def test_broken_manifest_has_a_precise_diagnostic(
    tmp_path: Path, manifest: dict[str, Any], field: str, expected: str
) -> None:
    (tmp_path / "outside.py").write_text("tools = []\n")
    plugin = write_plugin(
        tmp_path / "plugin",
        manifest,
        {"index.py": "tools = []\n", "README.md": "# m\n", "my-tools.py": "", "pkg/x.py": ""},
    )
    (plugin / "link.py").symlink_to(tmp_path / "outside.py")
    diagnostics = PluginSource.validate(plugin)
    [problem] = errors(diagnostics)
    assert problem.path == str(plugin / "pandora.json")
    assert problem.field == field
    assert expected in problem.message
    with gateway_with(environ={}) as gateway:  # loading reports the same, and loads nothing
        loaded = gateway.add_source(plugin, format="plugin")
    assert loaded.entries == [] and problem in loaded.diagnostics


def test_manifest_warnings_do_not_stop_loading(tmp_path: Path) -> None:
    manifest = _with("provides.tools.requireAproval", True)
    manifest["provides"]["channels"] = {"entry": "chat.py"}
    # An unknown permissions field is an error, not a warning (test_attack_declarations.py).
    manifest["provides"]["tools"]["permissions"] = {"network": ["api.example.com"]}
    plugin = write_plugin(tmp_path / "p", manifest, {"index.py": f"tools = [{_BASE_TOOL}]\n"})
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(plugin)
    assert [e.tool.id for e in loaded.entries] == ["@scope/m:t"]
    by_field = {d.field: d for d in loaded.diagnostics}
    assert all(d.severity is Severity.WARNING for d in loaded.diagnostics)
    assert "did you mean 'requireApproval'" in by_field["/provides/tools/requireAproval"].message
    assert "only 'provides.tools'" in by_field["/provides/channels"].message
    assert "restrict nothing" in by_field["/provides/tools/permissions"].message


def test_manifest_files_yaml_json_with_tabs_and_lists(tmp_path: Path) -> None:
    files = {"a.py": f"tools = [{_BASE_TOOL}]\n", "lib/b.py": f"tools = [{_U_TOOL}]\n"}
    yaml_text = (
        'id: "@scope/y"\nprovides:\n  tools:\n'
        "    - {entry: a.py, sandbox: host}\n    - {entry: lib/b.py, sandbox: host}\n"
    )
    yaml_plugin = write_plugin(tmp_path / "y", yaml_text, files, manifest_name="plugin.yml")
    tabbed = (
        '{\n\t"id": "@scope/j",\n\t"provides": {"tools": {"entry": "a.py", "sandbox": "host"}}\n}\n'
    )
    json_plugin = write_plugin(tmp_path / "j", tabbed, files, manifest_name="plugin.json")
    with gateway_with(environ={}) as gateway:
        assert gateway.add_source(yaml_plugin).diagnostics == []
        # format= named: detect_format parses .json as YAML, which refuses tab indentation.
        loaded = gateway.add_source(json_plugin / "plugin.json", format="plugin")
        assert loaded.diagnostics == []
        ids = [e.tool.id for e in gateway.entries()]
    assert ids == ["@scope/j:t", "@scope/y:t", "@scope/y:u"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({}, "no plugin manifest in this folder: expected one of pandora.json"),
        ({"pandora.json": "{}", "plugin.yaml": "id: x"}, "more than one plugin manifest"),
        ({"pandora.json": '{"id": "x",}'}, "invalid JSON at line 1"),
        ({"pandora.json": '{"id": "x", "id": "y"}'}, "duplicate key 'id'"),
        ({"pandora.json": "[1]"}, "must be an object with 'id' and 'provides'"),
        ({"plugin.yaml": "id: [unclosed"}, "invalid YAML: line 1"),
    ],
)
def test_unreadable_manifests(tmp_path: Path, files: dict[str, str], expected: str) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    [problem] = PluginSource.validate(folder)
    assert problem.severity is Severity.ERROR and problem.field is None
    assert expected in problem.message


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"host_mod": True}, "unknown plugin option 'host_mod'; known options: host_mode"),
        ({"host_mode": "yes"}, "host_mode must be true, false, or a list of tool ids"),
        ({"host_mode": [1]}, "host_mode must be true, false, or a list of tool ids"),
        ({"config": [1]}, "config must be a mapping"),
        ({"resolve_timeout": 0}, "resolve_timeout must be a positive number"),
    ],
)
def test_bad_options_are_configuration_errors(
    weather: Path, options: dict[str, Any], expected: str
) -> None:
    with gateway_with(environ={}) as gateway, pytest.raises(ConfigError, match="options") as caught:
        gateway.add_source(weather, format="plugin", options=options)
    assert expected in caught.value.message


def test_toolgate_yaml_sources_entry(weather: Path, tmp_path: Path) -> None:
    from toolgate.config import load_gateway

    config = tmp_path / "toolgate.yaml"
    config.write_text(
        f"sources:\n  - path: {weather}\n    format: plugin\n    options:\n"
        "      host_mode: [weather]\n"
    )
    home = tmp_path / "home"
    with load_gateway(config, environ={"TOOLGATE_HOME": str(home)}, approver=None) as gateway:
        assert [t.id for t in gateway.list_tools()] == [WEATHER_ID]
    config.write_text(f"sources:\n  - path: {weather}\n    options: {{host_mode: maybe}}\n")
    with pytest.raises(ConfigError, match=r"sources\[0\].*host_mode must be"):
        load_gateway(config, environ={"TOOLGATE_HOME": str(home)}, approver=None)


# -- provider-safe names ------------------------------------------------------------------------


@pytest.mark.slow
def test_weather_exports_with_provider_safe_names_and_calls_back(
    weather: Path, weather_api: tuple[str, list[dict[str, Any]]]
) -> None:
    import google.genai.types as gemini_types
    import mcp.types as mcp_types

    from toolgate.exporters import EXPORT_FORMATS, export_tools, parse_tool_calls
    from toolgate.model.names import PROVIDER_NAME_PATTERN, to_provider_name

    base, _ = weather_api
    environ = {"OPENWEATHER_API_KEY": API_KEY, "OPENWEATHER_API_BASE": base}
    name = to_provider_name(WEATHER_ID)
    assert name == "_-40pandorakit-2fweather__weather"
    assert PROVIDER_NAME_PATTERN.match(name)
    arguments = {"city": "Cairo"}
    payloads = {
        "openai": {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        "openai-responses": {
            "type": "function_call",
            "call_id": "call_1",
            "name": name,
            "arguments": json.dumps(arguments),
        },
        "anthropic": [{"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}],
        "gemini": {"functionCall": {"name": name, "args": arguments}},
        "mcp": {"name": name, "arguments": arguments},
    }
    with gateway_with(environ=environ) as gateway:
        gateway.add_source(weather, options={"host_mode": True})
        tools = gateway.list_tools()
        definitions = {fmt: export_tools(tools, fmt)[0] for fmt in EXPORT_FORMATS}
        outcomes = {}
        for fmt, payload in payloads.items():
            [call] = parse_tool_calls(payload, fmt)
            assert (call.tool_id, dict(call.arguments)) == (WEATHER_ID, arguments)
            outcomes[fmt] = gateway.call_sync(call.tool_id, call.arguments)
    names = {
        "openai": definitions["openai"]["function"]["name"],
        "openai-responses": definitions["openai-responses"]["name"],
        "anthropic": definitions["anthropic"]["name"],
        "gemini": definitions["gemini"]["name"],
    }
    assert set(names.values()) == {name}
    # MCP names need no leading letter: the same name without the "_" marker (either resolves).
    assert (
        definitions["mcp"]["name"] == name.removeprefix("_") == "-40pandorakit-2fweather__weather"
    )
    # The SDKs' own types accept the definitions (Gemini and MCP have the strictest rules).
    gemini_types.FunctionDeclaration.model_validate(definitions["gemini"])
    assert mcp_types.Tool.model_validate(definitions["mcp"]).name == name.removeprefix("_")
    assert definitions["mcp"]["annotations"]["readOnlyHint"] is True
    assert all(outcome.ok and outcome.content["name"] == "Cairo" for outcome in outcomes.values())
