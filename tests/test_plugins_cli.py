"""``toolgate plugins``, ``toolgate validate`` and ``toolgate tools list`` / ``call`` on Pandora
plugins, through the installed console script in a temporary project (output not a TTY)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import TOOLGATE
from doc_blocks import doc_block
from test_plugins import (
    API_KEY,
    FIXTURES,
    PROXY_VARIABLES,
    SEARCH_ID,
    WEATHER_ID,
    weather_api_server,
)
from toolgate.sandbox.host import probe_host

pytestmark = pytest.mark.slow

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def toolgate(project: Path, toolgate_home: Path) -> Run:
    """Run ``toolgate ARGS...`` in ``project``; ``env=`` adds variables (the gateway's
    environment, where plugins' declared env keys come from)."""
    base = {**os.environ, "TOOLGATE_HOME": str(toolgate_home), "PYTHONIOENCODING": "utf-8"}
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        base.pop(name, None)
    plugin_keys = ("BRAVE_API_KEY", "TAVILY_API_KEY", "OPENWEATHER_API_KEY", "OPENWEATHER_API_BASE")
    for name in (*plugin_keys, *PROXY_VARIABLES):
        base.pop(name, None)

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TOOLGATE), *args],
            cwd=project,
            env={**base, **(env or {})},
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=60,
        )

    return run


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """Copies of the fixture plugins, plus one host plugin with a compartment tool."""
    folder = tmp_path / "plugins"
    shutil.copytree(FIXTURES, folder)
    mixed = folder / "mixed"
    mixed.mkdir()
    (mixed / "plugin.json").write_text(
        json.dumps(
            {"id": "@scope/mixed", "provides": {"tools": {"entry": "index.py", "sandbox": "host"}}}
        )
    )
    (mixed / "index.py").write_text(
        textwrap.dedent(
            """
            base = dict(name="N", description="d", annotations={"readOnlyHint": True})
            tools = [
                {**base, "id": "native", "execute": lambda i, c: "native"},
                {**base, "id": "boxed", "sandbox": "compartment", "execute": lambda i, c: "x"},
            ]
            """
        )
    )
    return folder


def configure(
    project: Path, plugins: Path, *, weather_host_mode: bool, sandbox_works: bool = False
) -> None:
    """The three plugins in toolgate.yaml. Unless ``sandbox_works``, on a host that cannot
    sandbox (bubblewrap not found), where compartment tools need the host-mode opt-in; with a
    working sandbox they run in the sandboxed worker instead (tests/test_sandbox_wiring_plugins)."""
    options = "\n    options: {host_mode: true}" if weather_host_mode else ""
    sandbox = (
        ""
        if sandbox_works
        else f"sandbox:\n  bwrap_path: {project / 'no-such-bwrap'}\n  layer: bubblewrap\n"
    )
    (project / "toolgate.yaml").write_text(
        f"sources:\n"
        f"  - path: {plugins / 'weather'}{options}\n"
        f"  - path: {plugins / 'search'}\n"
        f"    format: plugin\n"
        f"    options: {{config: {{searchBackend: tavily}}}}\n"
        f"  - {plugins / 'mixed' / 'plugin.json'}\n" + sandbox
    )


@pytest.fixture
def weather_api() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """The local OpenWeather stand-in of test_plugins (the CLI gets no proxy variables)."""
    with weather_api_server() as served:
        yield served


def test_plugins_help(toolgate: Run) -> None:
    result = toolgate("plugins", "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: toolgate plugins" in result.stdout
    assert "host_mode" in result.stdout and "Exit codes" in result.stdout


def test_validate_the_weather_manifest(toolgate: Run, plugins: Path) -> None:
    for path in (plugins / "weather", plugins / "weather" / "pandora.json"):
        result = toolgate("validate", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{path}: plugin declaration" in result.stdout
        assert "OK: no problems found." in result.stdout
    assert not (plugins / "weather" / "__pycache__").exists()


def test_validate_a_broken_manifest(toolgate: Run, tmp_path: Path) -> None:
    plugin = tmp_path / "broken"
    plugin.mkdir()
    manifest = plugin / "pandora.json"
    manifest.write_text(
        json.dumps({"id": "@scope/b", "provides": {"tools": {"entry": "../x.py", "sandbox": "vm"}}})
    )
    result = toolgate("validate", str(plugin))
    assert result.returncode == 1
    assert (
        f"error: {manifest}: /provides/tools/entry: 'entry' '../x.py' resolves to" in result.stdout
    )
    assert f"error: {manifest}: /provides/tools/sandbox: 'sandbox' must be" in result.stdout
    assert "does not load (2 errors above)" in result.stderr


def test_tools_list_shows_plugin_tools_with_their_format(
    toolgate: Run, project: Path, plugins: Path
) -> None:
    configure(project, plugins, weather_host_mode=True)
    env = {"TAVILY_API_KEY": "t"}
    result = toolgate("tools", "list", "--json", env=env)
    assert result.returncode == 0, result.stderr
    rows = {row["id"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {WEATHER_ID, SEARCH_ID, "@scope/mixed:native", "@scope/mixed:boxed"}
    weather = rows[WEATHER_ID]
    assert weather["source_format"] == "plugin"
    assert weather["provider_name"] == "_-40pandorakit-2fweather__weather"
    assert weather["side_effect"] == "read_only" and weather["available"] is True
    assert rows["@scope/mixed:boxed"]["available"] is False
    assert "compartment" in rows["@scope/mixed:boxed"]["unavailable_reason"]

    table = toolgate("tools", "list", env=env)
    assert table.returncode == 0, table.stderr
    # The id column may fold long ids over two lines; the row's first line has the source.
    line = next(line for line in table.stdout.splitlines() if line.startswith("@pandorakit/weat"))
    assert "plugin" in line.split() and "Weather" in line.split()


def test_plugins_shows_sandbox_modes_tools_and_alerts(
    toolgate: Run, project: Path, plugins: Path
) -> None:
    configure(project, plugins, weather_host_mode=False)
    result = toolgate("plugins")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    weather, search, mixed = out.split("\n\n")
    assert weather.startswith("@pandorakit/weather  Weather 1.0.0")
    assert f"Location: {plugins / 'weather'}" in weather
    assert "Host mode: off" in weather
    assert "Entry index.py: sandbox compartment, not loaded" in weather
    assert "Tools loaded: 0" in weather
    assert "Alerts (1):" in weather and "warning: the tools of entry 'index.py' were not" in weather
    assert "options: {host_mode: true}" in weather
    assert "problem" not in weather  # the same text as a diagnostic is not printed twice

    assert search.startswith("@pandorakit/search  Web search")
    assert "Entry src/index.py: sandbox host, imported" in search
    assert "warning: No search API key is set" in search

    assert "Tools loaded: 2" in mixed
    assert "@scope/mixed:native  sandbox host, runs: host  available" in mixed
    assert "@scope/mixed:boxed  sandbox compartment, runs: not run  unavailable" in mixed
    assert "host_mode: [boxed]" in mixed


def test_plugins_json_and_host_mode_opt_in(toolgate: Run, project: Path, plugins: Path) -> None:
    configure(project, plugins, weather_host_mode=True)
    result = toolgate("plugins", "--json", env={"BRAVE_API_KEY": "b"})
    assert result.returncode == 0, result.stderr
    by_id = {row["id"]: row for row in json.loads(result.stdout)}
    weather = by_id["@pandorakit/weather"]
    assert weather["host_mode"] is True
    assert weather["entries"] == [
        {
            "pointer": "/provides/tools",
            "entry": "index.py",
            "sandbox": "compartment",
            "imported": True,
            "reason": None,
        }
    ]
    [tool] = weather["tools"]
    assert tool["id"] == WEATHER_ID and tool["sandbox"] == "compartment"
    assert tool["runs"] == "host (operator opt-in)" and tool["host_opt_in"] is True
    assert tool["registered"] is True and tool["available"] is True
    assert weather["alerts"] == [] and weather["diagnostics"] == []
    search = by_id["@pandorakit/search"]
    assert search["alerts"] == [
        {"level": "warning", "message": "searchBackend 'tavily' has no API key set; using brave"},
        {"level": "info", "message": "Using Brave Search"},
    ]
    assert [t["resolved"] for t in search["tools"]] == [True]

    text = toolgate("plugins", env={"BRAVE_API_KEY": "b"}).stdout
    assert "Host mode: on for every tool (operator opt-in)" in text
    assert f"{WEATHER_ID}  sandbox compartment, runs: host (operator opt-in)  available" in text
    assert f"{SEARCH_ID}  sandbox host, runs: host, from resolve_tools  available" in text


def test_call_the_weather_tool(
    toolgate: Run,
    project: Path,
    plugins: Path,
    weather_api: tuple[str, list[dict[str, Any]]],
) -> None:
    base, requests = weather_api
    configure(project, plugins, weather_host_mode=True)
    env = {"OPENWEATHER_API_KEY": API_KEY, "OPENWEATHER_API_BASE": base}
    result = toolgate("call", WEATHER_ID, "--args", '{"city": "Cairo"}', "--json", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "ok"
    assert outcome["content"]["name"] == "Cairo" and outcome["content"]["main"]["temp"] == 21.5
    assert requests[-1]["appid"] == [API_KEY]

    boxed = toolgate("call", "@scope/mixed:boxed", env=env)
    assert boxed.returncode == 1
    assert "unavailable" in boxed.stderr and "compartment" in boxed.stderr

    # Where bubblewrap works, the compartment tool runs in its sandboxed worker instead.
    if probe_host("bwrap").works:
        configure(project, plugins, weather_host_mode=True, sandbox_works=True)
        sandboxed = toolgate("call", "@scope/mixed:boxed", "--json", env=env)
        assert sandboxed.returncode == 0, sandboxed.stdout + sandboxed.stderr
        assert json.loads(sandboxed.stdout)["content"] == "x"
        shown = json.loads(toolgate("tools", "show", "@scope/mixed:boxed", "--json").stdout)
        assert shown["sandbox"]["enforced"]["sandbox"] == "compartment (bubblewrap)"


def test_plugins_without_any(toolgate: Run, project: Path) -> None:
    (project / "toolgate.yaml").write_text("demo: false\n")
    result = toolgate("plugins")
    assert result.returncode == 0, result.stderr
    assert "No plugins are configured." in result.stdout
    assert toolgate("plugins", "--json").stdout.strip() == "[]"


def _doc_block(marker: str) -> str:
    return doc_block(f"plugin:{marker}")


def test_the_documented_example_works_as_written(toolgate: Run, project: Path) -> None:
    plugin = project / "plugins" / "hello"
    plugin.mkdir(parents=True)
    (plugin / "pandora.json").write_text(_doc_block("pandora.json"))
    (plugin / "index.py").write_text(_doc_block("index.py"))
    (project / "toolgate.yaml").write_text(_doc_block("toolgate.yaml"))
    commands = [
        shlex.split(line.split(" # ")[0])
        for line in _doc_block("commands").splitlines()
        if line.strip()
    ]
    assert [c[:2] for c in commands] == [
        ["toolgate", "validate"],
        ["toolgate", "plugins"],
        ["toolgate", "call"],
    ]
    validate, listing, call = (toolgate(*c[1:]) for c in commands)
    assert validate.returncode == 0 and "OK: no problems found." in validate.stdout
    assert listing.returncode == 0, listing.stderr
    assert "@acme/hello  Hello 0.1.0" in listing.stdout
    assert "@acme/hello:greet  sandbox compartment, runs: host (operator opt-in)  available" in (
        listing.stdout
    )
    assert "info: Greeting style: friendly" in listing.stdout
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout.splitlines()[0]) == {"message": "Hello, Ada!"}
    greeted = toolgate(*commands[2][1:], env={"GREETING": "Hi"})
    assert json.loads(greeted.stdout.splitlines()[0]) == {"message": "Hi, Ada!"}
