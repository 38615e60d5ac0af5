"""Attacks on ``toolgate mcp`` through the lines an agent writes to its stdin: duplicate keys (in
the arguments or the JSON-RPC envelope), lines nested too deep to parse, lines that are not JSON.

The SDK's parser keeps the last of duplicate keys, so ``{"path": "/safe", "path": "/etc/shadow"}``
would reach a tool as ``/etc/shadow``; the gateway reads each line with its strict parser first.
Each test speaks raw JSON-RPC to a real ``toolgate mcp`` process, checks that the refused line
gets a parse error (``-32700``) naming what is wrong and that the tool did not run, then makes a
good call on the same session.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from conftest import TOOLGATE
from test_mcp_server_helpers import runs, text_of, write_config

pytestmark = pytest.mark.slow

#: What the guard waits for an answer before failing the test (never reached when it works).
PATIENCE = 120

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}

TOOLS = textwrap.dedent(
    '''\
    """Tools for the stdio attack tests."""

    import os
    import subprocess
    import sys
    from pathlib import Path

    from toolgate import tool


    @tool(namespace="t", title="Open a file", effect="read_only")
    def open_file(path: str) -> str:
        """Records the path it was given (each line of the runs file is one run)."""
        with Path(os.environ["MCP_TEST_RUNS"]).open("a", encoding="utf-8") as log:
            log.write(path + "\\n")
        return path


    @tool(namespace="t", title="Read stdin", effect="read_only")
    def read_stdin() -> dict:
        """What this process's stdin holds, and what a child process reading its stdin gets."""
        own = os.read(0, 65536).decode("utf-8", "replace")
        child = subprocess.run(
            [sys.executable, "-c", "import sys; print(sys.stdin.read(), end='')"],
            capture_output=True, text=True, timeout=60,
        ).stdout
        return {"own": own, "child": child}
    '''
)


class Session:
    """Raw JSON-RPC lines to a ``toolgate mcp`` process; answers read by a thread, one a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._answers.put(line)

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def answer(self) -> dict[str, Any]:
        try:
            line = self._answers.get(timeout=PATIENCE)
        except queue.Empty:
            pytest.fail("toolgate mcp did not answer")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, call_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments, "_meta": META}
        message = {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": params}
        self.send(json.dumps(message))
        answer = self.answer()
        assert answer["id"] == call_id, answer
        result: dict[str, Any] = answer["result"]
        return result

    def still_serves(self, call_id: int, log: Path) -> None:
        before = len(runs(log))
        result = self.call(call_id, "t__open_file", {"path": "/safe"})
        assert result["isError"] is False, result
        assert result["content"][0]["text"] == "/safe"
        assert runs(log)[before:] == ["/safe"]


@pytest.fixture
def env(tmp_path: Path, toolgate_home: Path, project: Path) -> dict[str, str]:
    write_config(project, tools=TOOLS)
    return {
        **os.environ,
        "TOOLGATE_HOME": str(toolgate_home),
        "MCP_TEST_RUNS": str(tmp_path / "runs.txt"),
        "PYTHONIOENCODING": "utf-8",
    }


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "runs.txt"


@pytest.fixture
def session(env: dict[str, str], project: Path) -> Iterator[Session]:
    with subprocess.Popen(
        [str(TOOLGATE), "mcp"],
        cwd=project,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
    ) as process:
        try:
            yield Session(process)
        finally:
            assert process.stdin is not None
            process.stdin.close()
            process.wait(timeout=PATIENCE)


def _call_line(call_id: int, arguments: str) -> str:
    return (
        f'{{"jsonrpc": "2.0", "id": {call_id}, "method": "tools/call", "params": '
        f'{{"name": "t__open_file", "arguments": {arguments}, "_meta": {json.dumps(META)}}}}}'
    )


def _parse_error(answer: dict[str, Any]) -> str:
    assert set(answer) == {"jsonrpc", "id", "error"}, answer
    assert answer["error"]["code"] == -32700, answer
    message: str = answer["error"]["message"]
    return message


def test_duplicate_argument_keys_get_a_parse_error_and_the_tool_does_not_run(
    session: Session, log: Path
) -> None:
    session.send(_call_line(1, '{"path": "/safe", "path": "/etc/shadow"}'))
    answer = session.answer()
    assert answer["id"] == 1  # the id is unambiguous: the client's request is answered
    message = _parse_error(answer)
    assert "duplicate key 'path'" in message
    assert runs(log) == []
    session.still_serves(2, log)


@pytest.mark.parametrize(
    ("line", "key", "answer_id"),
    [
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "method": "tools/call", '
            f'"params": {{"name": "t__open_file", "arguments": {{"path": "/etc/shadow"}}, '
            f'"_meta": {json.dumps(META)}}}}}',
            "method",
            1,
        ),
        (
            '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": '
            '{"name": "t__read_stdin", "name": "t__open_file", '
            f'"arguments": {{"path": "/etc/shadow"}}, "_meta": {json.dumps(META)}}}}}',
            "name",
            1,
        ),
        # Two ids: neither is answered, the error says "id": null.
        (
            _call_line(1, '{"path": "/etc/shadow"}').replace('"id": 1', '"id": 1, "id": 9'),
            "id",
            None,
        ),
    ],
    ids=["method-twice", "tool-name-twice", "id-twice"],
)
def test_duplicate_envelope_keys_get_a_parse_error_and_nothing_runs(
    session: Session, log: Path, line: str, key: str, answer_id: int | None
) -> None:
    session.send(line)
    answer = session.answer()
    assert answer["id"] == answer_id
    assert f"duplicate key {key!r}" in _parse_error(answer)
    assert runs(log) == []
    session.still_serves(2, log)


@pytest.mark.parametrize(
    ("depth", "answer_id"),
    # 150 levels: the SDK would parse it; 3,000: no parser here does (it used to get no answer).
    [(150, 7), (3000, None)],
    ids=["150-deep", "3000-deep"],
)
def test_a_line_nested_too_deep_gets_a_parse_error(
    session: Session, log: Path, depth: int, answer_id: int | None
) -> None:
    session.send(_call_line(7, '{"path": ' + "[" * depth + "]" * depth + "}"))
    answer = session.answer()
    assert answer["id"] == answer_id
    assert "nested deeper than 128 levels" in _parse_error(answer)
    assert runs(log) == []
    session.still_serves(8, log)


def test_a_line_that_is_not_json_gets_a_parse_error_and_a_blank_line_none(
    session: Session, log: Path
) -> None:
    session.send('{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {')
    answer = session.answer()
    assert answer["id"] is None
    assert "Parse error: Expecting" in _parse_error(answer)
    session.send("")  # not a message: skipped without an answer, as before
    session.still_serves(4, log)  # the next answer read is this call's


def test_tools_and_their_children_read_end_of_file_from_stdin(session: Session, log: Path) -> None:
    """The protocol is read from a private copy of stdin: a tool or its child reading file
    descriptor 0 gets nothing, and takes none of the lines the client sends."""
    result = session.call(5, "t__read_stdin", {})
    assert result["isError"] is False, result
    assert json.loads(result["content"][0]["text"]) == {"own": "", "child": ""}
    session.still_serves(6, log)


async def test_an_sdk_client_session_works_end_to_end(
    env: dict[str, str], project: Path, log: Path, tmp_path: Path
) -> None:
    params = StdioServerParameters(command=str(TOOLGATE), args=["mcp"], env=env, cwd=str(project))
    with (tmp_path / "stderr.txt").open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            opened = await mcp.call_tool("t__open_file", {"path": "/safe"})
            peeked = await mcp.call_tool("t__read_stdin", {})
            again = await mcp.call_tool("t__open_file", {"path": "/again"})
    assert {"t__open_file", "t__read_stdin"} <= names
    assert not opened.is_error and text_of(opened) == "/safe"
    assert json.loads(text_of(peeked)) == {"own": "", "child": ""}
    assert text_of(again) == "/again"
    assert runs(log) == ["/safe", "/again"]
