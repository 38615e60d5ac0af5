"""The seed's TypeScript examples (``fixtures/js_plugins/weather`` and ``search``), run as
written through the gateway and the CLI.

The weather tool fetches ``https://api.openweathermap.org/…`` (the URL is in the seed's code):
the test's resolver points that name at a local HTTPS stand-in on 127.0.0.1:443, the operator
grants the tool loopback, and Node.js trusts the stand-in's certificate (``NODE_EXTRA_CA_CERTS``)
— the request still goes through toolgate's egress proxy, which records it.
"""

from __future__ import annotations

import datetime
import http.server
import json
import shlex
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest

from doc_blocks import doc_block
from gateway_support import gateway_with
from js_support import FIXTURES, js_runtime
from toolgate.model import SideEffect
from toolgate.sandbox.runner import Sandbox

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]
WEATHER = "@pandorakit/weather:weather"
SEARCH = "@pandorakit/search:search"
HOST = "api.openweathermap.org"


def _certificate(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


@pytest.fixture
def openweather(tmp_path: Path) -> Iterator[tuple[Path, list[dict[str, Any]]]]:
    """An HTTPS stand-in for the OpenWeather API on 127.0.0.1:443; yields the certificate to
    trust and the query strings it received."""
    requests: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            requests.append(query)
            body = json.dumps({"name": query["q"][0], "main": {"temp": 21.5}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    cert, key = _certificate(tmp_path)
    try:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 443), Handler)
    except PermissionError:
        pytest.skip("binding 127.0.0.1:443 for the HTTPS stand-in needs root")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield cert, requests
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def _resolver(host: str, port: int) -> list[str]:
    if host != HOST:
        raise OSError(f"{host}: unknown to the test resolver")
    return ["127.0.0.1"]


def test_the_seed_weather_tool_runs_unchanged(
    openweather: tuple[Path, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cert, requests = openweather
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(cert))
    sandbox = Sandbox(cidr_grants={WEATHER: ["127.0.0.1/32"]}, resolver=_resolver)
    environ = {"OPENWEATHER_API_KEY": "k-123", "UNRELATED": "x"}
    with gateway_with(environ=environ, sandbox=sandbox, audit_path=tmp_path / "a.db") as gateway:
        loaded = gateway.add_source(FIXTURES / "weather")
        assert loaded.diagnostics == [] and loaded.alerts == []
        tool = gateway.registry.get(WEATHER).tool
        assert tool.side_effect is SideEffect.READ_ONLY and tool.timeout == 60.0
        assert tool.hints.idempotent is True
        outcome = gateway.call_sync(WEATHER, {"city": "Lisbon"})
    assert outcome.ok, outcome.message
    assert outcome.content == {"name": "Lisbon", "main": {"temp": 21.5}}
    assert requests == [{"q": ["Lisbon"], "units": ["metric"], "appid": ["k-123"]}]
    [event] = outcome.metadata["sandbox"]["egress"]
    assert (event["host"], event["port"], event["allowed"]) == (HOST, 443, True)


def test_the_seed_weather_tool_without_the_operator_grant_is_refused(tmp_path: Path) -> None:
    # api.openweathermap.org resolving to 127.0.0.1 is refused unless the operator granted it.
    sandbox = Sandbox(resolver=_resolver)
    with gateway_with(environ={"OPENWEATHER_API_KEY": "k"}, sandbox=sandbox) as gateway:
        gateway.add_source(FIXTURES / "weather")
        outcome = gateway.call_sync(WEATHER, {"city": "Lisbon"})
    assert outcome.is_error and "loopback" in (outcome.message or "")


def test_the_seed_resolve_tools_example_gives_tools_and_alerts(tmp_path: Path) -> None:
    environ = {"TAVILY_API_KEY": "t", "BRAVE_API_KEY": "b"}
    with gateway_with(environ=environ) as gateway:
        loaded = gateway.add_source(
            FIXTURES / "search", options={"config": {"searchBackend": "tavily"}}
        )
        assert loaded.diagnostics == []
        assert [(a.source, a.level, a.message) for a in loaded.alerts] == [
            ("@pandorakit/search", "info", "Using tavily")
        ]
        tool = gateway.registry.get(SEARCH).tool
        assert tool.timeout == 5.0 and tool.description == "Search the web with tavily"
        outcome = gateway.call_sync(SEARCH, {"query": "toolgate"})
    assert outcome.content == {"backend": "tavily", "query": "toolgate"}
    with gateway_with(environ={}) as gateway:
        loaded = gateway.add_source(FIXTURES / "search")
        assert [a.level for a in loaded.alerts] == ["warning"]
        assert gateway.list_tools() == []


@pytest.fixture
def search_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugin's keys in the gateway's environment (before ``run_cli`` copies it)."""
    monkeypatch.setenv("BRAVE_API_KEY", "b")
    monkeypatch.setenv("TAVILY_API_KEY", "t")


def test_the_cli_lists_the_plugin_alerts_and_calls_its_tool(
    search_keys: None, run_cli: Any, project: Path
) -> None:
    source = f"  - path: {FIXTURES / 'search'}\n    options: {{config: {{searchBackend: brave}}}}\n"
    (project / "toolgate.yaml").write_text(f"sources:\n{source}")
    listed = run_cli("plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    [plugin] = json.loads(listed.stdout)
    assert [(a["level"], a["message"]) for a in plugin["alerts"]] == [("info", "Using brave")]
    [tool] = plugin["tools"]
    assert tool["runs"] == "SES compartment (JavaScript host)"
    called = run_cli("call", SEARCH, "--args", '{"query": "q"}')
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout) == {"backend": "brave", "query": "q"}


def test_the_documented_typescript_example_works_as_written(run_cli: Any, project: Path) -> None:
    plugin = project / "plugins" / "hello"
    plugin.mkdir(parents=True)
    (plugin / "pandora.json").write_text(doc_block("plugin-ts:pandora.json"))
    (plugin / "index.ts").write_text(doc_block("plugin-ts:index.ts"))
    (project / "toolgate.yaml").write_text(doc_block("plugin-ts:toolgate.yaml"))
    commands = [
        shlex.split(line.split(" # ")[0])
        for line in doc_block("plugin-ts:commands").splitlines()
        if line.strip()
    ]
    assert [c[:2] for c in commands] == [
        ["toolgate", "js"],
        ["toolgate", "validate"],
        ["toolgate", "plugins"],
        ["toolgate", "call"],
    ]
    install, validate, listing, call = (run_cli(*c[1:]) for c in commands)
    assert install.returncode == 0, install.stderr
    assert validate.returncode == 0 and "OK: no problems found." in validate.stdout
    assert listing.returncode == 0, listing.stderr
    line = "@acme/hello:greet  sandbox compartment, runs: SES compartment (JavaScript host)"
    assert f"{line}  available" in listing.stdout
    assert "info: Greeting style: friendly" in listing.stdout
    assert call.returncode == 0, call.stderr
    assert json.loads(call.stdout.splitlines()[0]) == {"message": "Hello, Ada!"}


def test_the_seed_weather_tool_through_the_cli_the_http_api_and_mcp(
    openweather: tuple[Path, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """As an operator runs it: ``toolgate.yaml`` pins the API's host name to the stand-in
    (``sandbox.hosts``) and grants the tool loopback; the key comes from the environment."""
    import os
    import re
    import subprocess
    import sys

    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    cert, requests = openweather
    (tmp_path / "toolgate.yaml").write_text(
        json.dumps(
            {
                "sources": [{"path": str(FIXTURES / "weather")}],
                "sandbox": {
                    "hosts": {HOST: ["127.0.0.1"]},
                    "network_grants": {WEATHER: ["127.0.0.1/32"]},
                },
            }
        )
    )
    env = {
        **os.environ,
        # Beside the folder the commands run in: a folder holding the gateway's state is never
        # a call's workspace, and the CLI's default workspace is its current folder.
        "TOOLGATE_HOME": str(tmp_path.parent / f"{tmp_path.name}-home"),
        "OPENWEATHER_API_KEY": "k-123",
        "NODE_EXTRA_CA_CERTS": str(cert),
    }
    toolgate_exe = str(Path(sys.executable).parent / "toolgate")
    called = subprocess.run(
        [toolgate_exe, "call", WEATHER, "--args", '{"city": "Lisbon"}', "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["content"] == {"name": "Lisbon", "main": {"temp": 21.5}}

    server = subprocess.Popen(
        [toolgate_exe, "serve", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", server.stdout.readline())
        assert match, "serve did not start"
        url = match.group(1)
        answer = httpx2.post(
            f"{url}/v1/tools/{quote(WEATHER, safe='')}/call",
            json={"arguments": {"city": "Porto"}},
            timeout=120,
        ).json()
        assert answer["status"] == "ok", answer
        assert answer["content"] == {"name": "Porto", "main": {"temp": 21.5}}

        async def over_mcp() -> Any:
            async with Client(streamable_http_client(f"{url}/mcp")) as mcp:
                [name] = [t.name for t in (await mcp.list_tools()).tools if "weather" in t.name]
                return await mcp.call_tool(name, {"city": "Faro"})

        result = anyio.run(over_mcp)
        assert not result.is_error, result
        assert json.loads(result.content[0].text) == {"name": "Faro", "main": {"temp": 21.5}}
    finally:
        server.terminate()
        server.wait(30)
    assert [query["q"] for query in requests] == [["Lisbon"], ["Porto"], ["Faro"]]
    assert all(query["appid"] == ["k-123"] for query in requests)
