"""Attacks through what an agent or a package sends: values that break a declared ``format``,
JSON with duplicate keys, ``NaN``/``Infinity`` or absurd nesting (on the CLI, the HTTP API and
MCP), a script tool's ambiguous output, and a plugin tarball with entries that point outside.

Each test makes the attack through the public surface, checks that it fails with an error
naming what is wrong, that the tool did not run, and that the gateway still serves a good call.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from conftest import TOOLGATE
from folder_tools import write_tool
from http_api_support import LOCAL, RUNS, auth, make_app, make_gateway, problem
from test_mcp_server_helpers import McpHttpServer, bearer, write_config
from test_web_ui import Console
from toolgate.config import load_gateway
from toolgate.serve.web import build_ui
from web_support import make_gateway as web_gateway
from web_support import serve

pytestmark = pytest.mark.slow

# -- the CLI: a script tool folder that records each run -------------------------------------------

#: Appends the arguments it ran with to ``runs.log`` in the workspace, and echoes them.
RECORDER = textwrap.dedent(
    """\
    import json, sys
    from pathlib import Path
    data = json.load(sys.stdin)
    with (Path(data["workspacePath"]) / "runs.log").open("a") as runs:
        runs.write(json.dumps(data, sort_keys=True) + "\\n")
    extra = ("workspacePath", "sessionId")
    print(json.dumps({"got": {k: v for k, v in data.items() if k not in extra}}))
    """
)

FORMATS_SCHEMA = {
    "type": "object",
    "properties": {
        "address": {"type": "string", "format": "ipv4"},
        "link": {"type": "string", "format": "uri"},
        "when": {"type": "string", "format": "date-time"},
        "sku": {"type": "string", "format": "acme-sku"},  # a format of its own: not checked
    },
    "additionalProperties": False,
}


@pytest.fixture
def recorders(toolgate_home: Path, project: Path) -> Path:
    """``local:anything`` (input schema ``{}``) and ``local:formats``; returns the run log."""
    (project / "toolgate.yaml").write_text("demo: false\n")
    tools = toolgate_home / "tools"
    write_tool(tools, "anything", RECORDER, runtime="python", inputSchema={})
    write_tool(tools, "formats", RECORDER, runtime="python", inputSchema=FORMATS_SCHEMA)
    return project / "runs.log"


def _runs(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def _still_serves(run_cli: Any, log: Path) -> None:
    before = len(_runs(log))
    good = run_cli("call", "local:anything", "--args", '{"ok": 1}')
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout.splitlines()[0]) == {"got": {"ok": 1}}
    assert len(_runs(log)) == before + 1


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("address", "999.1.1.1", "is not a valid ipv4 (expected an IPv4 address"),
        ("link", "not a uri", "is not a valid uri (expected an absolute URI"),
        ("when", "yesterday", "is not a valid date-time (expected an RFC 3339 date and time"),
    ],
)
def test_a_value_breaking_its_declared_format_does_not_reach_the_tool(
    run_cli: Any, recorders: Path, field: str, value: str, expected: str
) -> None:
    result = run_cli("call", "local:formats", "--args", json.dumps({field: value}))
    assert result.returncode != 0
    assert "invalid_arguments" in result.stderr
    assert f"/{field}: {value!r} {expected}" in result.stderr
    assert "it did not run" in result.stderr
    assert _runs(recorders) == []
    _still_serves(run_cli, recorders)


def test_well_formed_values_and_an_unknown_format_still_pass(run_cli: Any, recorders: Path) -> None:
    arguments = {
        "address": "192.0.2.1",
        "link": "https://example.com/a?b=1",
        "when": "2026-01-31T09:30:00Z",
        "sku": "anything at all",  # a format the validator does not know is ignored
    }
    result = run_cli("call", "local:formats", "--args", json.dumps(arguments))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0]) == {"got": arguments}


def test_formats_of_an_output_schema_describe_the_result_and_do_not_discard_it(
    run_cli: Any, recorders: Path, toolgate_home: Path
) -> None:
    # A naive timestamp (what Python's datetime.isoformat() gives) has no RFC 3339 offset.
    script = 'import sys\nsys.stdin.read()\nprint(\'{"at": "2026-01-31T09:30:00"}\')\n'
    schema = {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}}}
    write_tool(
        toolgate_home / "tools",
        "clock",
        script,
        runtime="python",
        inputSchema={},
        outputSchema=schema,
    )
    result = run_cli("call", "local:clock", "--args", "{}")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[0]) == {"at": "2026-01-31T09:30:00"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"path": "safe.txt", "path": "/etc/shadow"}', "duplicate key 'path'"),
        ('{"a": {"x": 1, "x": 2}}', "duplicate key 'x'"),
        ('{"n": NaN}', "NaN is not a JSON value"),
        ('{"n": Infinity}', "Infinity is not a JSON value"),
        ('{"n": [-Infinity]}', "-Infinity is not a JSON value"),
        ('{"deep": ' + "[" * 20_000 + "]" * 20_000 + "}", "nested deeper than 64 levels"),
        ('{"deep": ' + "[" * 70 + "]" * 70 + "}", "nested deeper than 64 levels"),
    ],
    ids=[
        "duplicate",
        "nested-duplicate",
        "nan",
        "infinity",
        "minus-infinity",
        "20000-deep",
        "70-deep",
    ],
)
def test_cli_args_that_json_would_read_ambiguously_are_a_usage_error(
    run_cli: Any, recorders: Path, text: str, expected: str
) -> None:
    result = run_cli("call", "local:anything", "--args", text)
    assert result.returncode == 2, result.stderr
    assert "usage error: --args is not valid JSON" in result.stderr
    assert expected in result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert _runs(recorders) == []
    _still_serves(run_cli, recorders)


def test_cli_args_from_a_file_with_a_duplicate_key_name_the_file(
    run_cli: Any, recorders: Path, tmp_path: Path
) -> None:
    args = tmp_path / "args.json"
    args.write_text('{"a": 1, "a": 2}')
    result = run_cli("call", "local:anything", "--args", f"@{args}")
    assert result.returncode == 2
    assert f"{args} is not valid JSON: duplicate key 'a'" in result.stderr
    assert _runs(recorders) == []


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ('{"status": "ok", "status": "error"}', "duplicate key 'status'"),
        ('{"total": NaN}', "NaN is not a JSON value"),
        ('{"x": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
    ],
    ids=["duplicate", "nan", "deep"],
)
def test_a_script_tool_printing_ambiguous_json_is_a_tool_error_naming_it(
    run_cli: Any, recorders: Path, toolgate_home: Path, printed: str, expected: str
) -> None:
    script = f"import sys\nsys.stdin.read()\nprint({printed!r})\n"
    write_tool(toolgate_home / "tools", "liar", script, runtime="python", inputSchema={})
    result = run_cli("call", "local:liar", "--args", "{}")
    assert result.returncode != 0
    assert "tool_error" in result.stderr
    assert "Tool local:liar printed JSON the gateway does not accept" in result.stderr
    assert expected in result.stderr
    _still_serves(run_cli, recorders)


# -- the HTTP API -------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    RUNS.clear()
    with make_gateway(tmp_path) as gateway, TestClient(make_app(gateway), client=LOCAL) as test:
        yield test


def _post(client: TestClient, body: str, *, query: str = "") -> Any:
    return client.post(
        f"/v1/tools/t:add/call{query}",
        content=body.encode(),
        headers={**auth("alice"), "Content-Type": "application/json"},
    )


HTTP_BODIES = [
    ('{"arguments": {"a": 1, "b": 2, "a": 40}}', "duplicate key 'a'"),
    ('{"arguments": {"a": 1, "b": 2}, "arguments": {"a": 5, "b": 5}}', "duplicate key 'arguments'"),
    ('{"arguments": {"a": NaN, "b": 2}}', "NaN is not a JSON value"),
    ('{"arguments": {"a": 1, "b": Infinity}}', "Infinity is not a JSON value"),
    (
        '{"arguments": {"a": 1, "b": 2, "c": ' + "[" * 20_000 + "]" * 20_000 + "}}",
        "nested deeper than 64 levels",
    ),
    (
        '{"arguments": {"a": 1, "b": 2, "c": ' + "[" * 70 + "]" * 70 + "}}",
        "nested deeper than 64 levels",
    ),
]
HTTP_IDS = ["duplicate-argument", "duplicate-field", "nan", "infinity", "20000-deep", "70-deep"]


@pytest.mark.parametrize("query", ["", "?trace=1"], ids=["fast-path", "framework-route"])
@pytest.mark.parametrize(("body", "expected"), HTTP_BODIES, ids=HTTP_IDS)
def test_http_call_bodies_that_json_would_read_ambiguously_are_refused(
    client: TestClient, body: str, expected: str, query: str
) -> None:
    detail = problem(_post(client, body, query=query), 400, "invalid_request")["detail"]
    assert detail.startswith("the request body is not accepted as JSON: ")
    assert expected in detail
    assert RUNS == []
    good = _post(client, '{"arguments": {"a": 1, "b": 2}}')
    assert good.status_code == 200 and good.json()["content"] == 3
    assert RUNS == [{"tool": "add", "a": 1, "b": 2}]


# -- MCP over HTTP ------------------------------------------------------------------------------

MCP_TOOLS = textwrap.dedent(
    '''\
    """A tool that records each run."""
    import json
    import os
    from pathlib import Path
    from typing import Any

    from toolgate import tool


    @tool(namespace="t", title="Record", effect="read_only")
    def record(value: Any = None) -> str:
        """Record the value it was given."""
        with Path(os.environ["MCP_TEST_RUNS"]).open("a", encoding="utf-8") as runs:
            runs.write(json.dumps(value) + "\\n")
        return "recorded"
    '''
)

VERSION = "2026-07-28"
MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": VERSION,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "t__record",
}


def _mcp_call(arguments: str) -> bytes:
    envelope = json.dumps(
        {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    )
    return (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t__record", '
        f'"arguments": {arguments}, "_meta": {envelope}}}}}'
    ).encode()


@pytest.fixture
def mcp_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path]]:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    runs = tmp_path / "runs.txt"
    monkeypatch.setenv("MCP_TEST_RUNS", str(runs))
    gateway = load_gateway(
        write_config(project, tools=MCP_TOOLS), environ={"TOOLGATE_HOME": str(home)}
    )
    try:
        with McpHttpServer(gateway) as server:
            yield server, runs
    finally:
        gateway.close()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"value": "safe", "value": "rm -rf"}', "duplicate key 'value'"),
        ('{"value": NaN}', "NaN is not a JSON value"),
        ('{"value": ' + "[" * 20_000 + "]" * 20_000 + "}", "nested deeper than 64 levels"),
        ('{"value": ' + "[" * 70 + "]" * 70 + "}", "nested deeper than 64 levels"),
    ],
    ids=["duplicate", "nan", "20000-deep", "70-deep"],
)
async def test_mcp_messages_that_json_would_read_ambiguously_are_a_parse_error(
    mcp_server: tuple[Any, Path], arguments: str, expected: str
) -> None:
    server, runs = mcp_server
    async with bearer("alice-key") as http:
        response = await http.post(server.url, headers=MCP_HEADERS, content=_mcp_call(arguments))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32700
    assert error["message"].startswith("Parse error: ") and expected in error["message"]
    assert not runs.exists()
    # The official client is still served, on the same server.
    async with Client(streamable_http_client(server.url, http_client=bearer("alice-key"))) as mcp:
        result = await mcp.call_tool("t__record", {"value": "fine"})
    assert not result.is_error
    assert runs.read_text().splitlines() == ['"fine"']


# -- plugin tarballs ----------------------------------------------------------------------------

_MANIFEST = '{"id": "@evil/escape", "provides": {"tools": {"entry": "index.js"}}}'


def _tarball(tmp_path: Path, bad: tarfile.TarInfo) -> Path:
    """An npm-style package (``package/…``) with a valid manifest and one hostile entry."""
    target = tmp_path / "evil.tgz"
    with tarfile.open(target, "w:gz") as archive:
        for name, text in {
            "package/package.json": '{"name": "evil-escape", "version": "1.0.0"}',
            "package/pandora.json": _MANIFEST,
            "package/index.js": "module.exports = {};\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if bad.type == tarfile.REGTYPE:
            data = b"pwned\n"
            bad.size = len(data)
            archive.addfile(bad, io.BytesIO(data))
        else:
            archive.addfile(bad)
    return target


def _entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


@pytest.mark.skipif(shutil.which("npm") is None, reason="plugins are packed with npm")
@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (_entry("package/../../../escaped.txt"), "would be written outside the package"),
        (_entry("/tmp/toolgate-attack-absolute.txt"), "has an absolute path"),
        (_entry("package/etc", tarfile.SYMTYPE, "/etc"), "is a link to an absolute path"),
        (
            _entry("package/up", tarfile.SYMTYPE, "../../../.."),
            "is a link that points outside the package",
        ),
        (
            _entry("package/hard", tarfile.LNKTYPE, "../../../../etc/passwd"),
            "is a link that points outside the package",
        ),
    ],
    ids=["dot-dot", "absolute", "absolute-symlink", "outward-symlink", "outward-hardlink"],
)
def test_a_plugin_tarball_with_an_entry_pointing_outside_is_refused_naming_it(
    run_cli: Any, toolgate_home: Path, tmp_path: Path, entry: tarfile.TarInfo, expected: str
) -> None:
    (tmp_path / "pack").mkdir()
    (toolgate_home / "plugins").mkdir()
    tarball = _tarball(tmp_path / "pack", entry)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    result = run_cli("plugins", "install", str(tarball))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"the entry {entry.name!r} {expected}" in result.stderr
    assert "nothing was installed" in result.stderr
    # Nothing written outside, nothing half-installed (the staging folder is gone too).
    assert not Path("/tmp/toolgate-attack-absolute.txt").exists()
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert list((toolgate_home / "plugins").iterdir()) == []
    assert json.loads(run_cli("plugins", "--json").stdout) == []


# -- the web UI's "Try it" form -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1, "b": 2, "a": 40}', "duplicate key &#39;a&#39;"),
        ('{"a": NaN, "b": 2}', "NaN is not a JSON value"),
        ('{"a": 1, "b": ' + "[" * 5_000 + "]" * 5_000 + "}", "nested deeper than 64 levels"),
    ],
    ids=["duplicate", "nan", "5000-deep"],
)
def test_try_it_arguments_that_json_would_read_ambiguously_are_refused(
    tmp_path: Path, text: str, expected: str
) -> None:
    gateway = web_gateway(tmp_path)
    try:
        with serve(build_ui(gateway)) as served:
            console = Console(gateway, served)
            try:
                page = console.post("/tools/demo:add", {"arguments": text})
                assert page.status_code == 400
                assert "the arguments are not valid JSON" in page.text and expected in page.text
                assert gateway.audit is not None
                assert gateway.audit.query(tool_id="demo:add") == []
                good = console.post("/tools/demo:add", {"arguments": '{"a": 20, "b": 22}'})
                assert good.status_code == 200 and '<pre class="content">42</pre>' in good.text
            finally:
                console.client.close()
    finally:
        gateway.close()


# -- MCP over stdio: the SDK parses each line, the validation stage holds it to the same rules ---


def _stdio_call(process: subprocess.Popen[str], call_id: int, arguments: str) -> dict[str, Any]:
    envelope = json.dumps(
        {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(
        f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", "params": '
        f'{{"name": "local__anything", "arguments": {arguments}, "_meta": {envelope}}}}}\n'
    )
    process.stdin.flush()
    answer: dict[str, Any] = json.loads(process.stdout.readline())
    assert answer["id"] == call_id
    return answer["result"]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ('{"n": NaN}', "/n: nan is not a JSON number"),
        ('{"n": [1, -Infinity]}', "/n/1: -inf is not a JSON number"),
        ('{"n": ' + "[" * 100 + "]" * 100 + "}", "/n: nested deeper than 64 levels"),
    ],
    ids=["nan", "minus-infinity", "100-deep"],
)
def test_mcp_stdio_arguments_json_cannot_carry_do_not_reach_a_tool_with_an_empty_schema(
    recorders: Path, project: Path, toolgate_home: Path, arguments: str, expected: str
) -> None:
    env = {**os.environ, "TOOLGATE_HOME": str(toolgate_home), "PYTHONIOENCODING": "utf-8"}
    with subprocess.Popen(
        [str(TOOLGATE), "mcp"],
        cwd=project,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        try:
            refused = _stdio_call(process, 1, arguments)
            assert refused["isError"] is True
            text = refused["content"][0]["text"]
            assert "invalid_arguments" in text and expected in text and "did not run" in text
            assert _runs(recorders) == []
            served = _stdio_call(process, 2, '{"ok": 1}')
            assert served["isError"] is False
            assert len(_runs(recorders)) == 1
        finally:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=60)
