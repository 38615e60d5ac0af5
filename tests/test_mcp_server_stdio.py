"""``toolgate mcp``: the real command over stdio, driven by the official ``mcp`` client.

Each test spawns the console script with a temporary ``$TOOLGATE_HOME`` and a toolgate.yaml
serving the test tools and the demo tools; the client's transport stops the process (closing
stdin, then terminating its process tree) when the test's ``async with`` ends.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.subscriptions import ToolsListChanged

from conftest import TOOLGATE
from doc_blocks import doc_block
from folder_tools import write_tool
from test_mcp_server_helpers import (
    answer_with,
    approval_meta,
    free_port,
    runs,
    text_of,
    write_config,
)

pytestmark = pytest.mark.slow

MODES = ["auto", "legacy"]


@dataclass
class Setup:
    home: Path
    project: Path
    config: Path
    runs: Path
    stderr: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "TOOLGATE_HOME": str(self.home),
            "MCP_TEST_RUNS": str(self.runs),
            "PYTHONIOENCODING": "utf-8",
        }

    @contextmanager
    def client(self, *args: str, **options: Any) -> Iterator[Client]:
        """A client of ``toolgate --config <yaml> mcp ARGS``; the server's stderr goes to a file."""
        params = StdioServerParameters(
            command=str(TOOLGATE),
            args=["--config", str(self.config), "mcp", *args],
            env=self.env,
            cwd=str(self.project),
        )
        with self.stderr.open("a", encoding="utf-8") as errlog:
            yield Client(stdio_client(params, errlog=errlog), **options)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TOOLGATE), "--config", str(self.config), *args],
            cwd=self.project,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    config = write_config(project, demo=True)
    return Setup(home, project, config, tmp_path / "runs.txt", tmp_path / "stderr.txt")


async def test_serve_mcp_page_size_pages_tools_list_over_stdio(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    config = write_config(project, demo=True, extra="serve:\n  mcp_page_size: 4\n")
    setup = Setup(home, project, config, tmp_path / "runs.txt", tmp_path / "stderr.txt")
    pages: list[list[str]] = []
    with setup.client() as client:
        async with client as mcp:
            cursor = None
            while True:
                result = await mcp.list_tools(cursor=cursor)
                pages.append([tool.name for tool in result.tools])
                cursor = result.next_cursor
                if cursor is None:
                    break
    names = [name for page in pages for name in page]
    assert all(len(page) == 4 for page in pages[:-1]) and 1 <= len(pages[-1]) <= 4
    assert len(pages) > 2 and len(names) == len(set(names))  # each tool once
    assert {"t__add", "demo__add"} <= set(names) and "t__secret" not in names


@pytest.mark.parametrize("mode", MODES)
async def test_list_and_calls_over_stdio(setup: Setup, mode: str) -> None:
    with setup.client(mode=mode) as client:
        async with client as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            added = await mcp.call_tool("t__add", {"a": 40, "b": 2})
            bad = await mcp.call_tool("t__add", {"a": "x", "b": 2})
            words = await mcp.call_tool("t__words", {"text": "a b c"})
            noisy = await mcp.call_tool("t__noisy", {})
            after_noise = await mcp.call_tool("demo__add", {"a": 1, "b": 1})
    assert {"t__add", "t__send", "t__words", "demo__add", "demo__diff_text"} <= names
    assert "t__secret" not in names
    assert added.structured_content == {"total": 42}
    assert bad.is_error and "/a" in text_of(bad) and "invalid_arguments" in text_of(bad)
    assert json.loads(text_of(words)) == {"words": 3}
    assert "VISUALIZATION-FOR-PEOPLE" not in words.model_dump_json()
    # A tool printing to stdout does not corrupt the protocol: its output lands on stderr.
    assert not noisy.is_error and text_of(noisy) == "still fine"
    assert text_of(after_noise) == "2"
    stderr = setup.stderr.read_text(encoding="utf-8")
    assert "stray print on stdout" in stderr and "stray bytes on file descriptor 1" in stderr


async def test_agent_option_decides_what_is_listed_and_callable(setup: Setup) -> None:
    with setup.client("--agent", "bob") as client:
        async with client as mcp:
            bob = {tool.name for tool in (await mcp.list_tools()).tools}
            secret = await mcp.call_tool("t__secret", {})
    with setup.client("--agent", "alice") as client:
        async with client as mcp:
            alice = {tool.name for tool in (await mcp.list_tools()).tools}
    assert bob - alice == {"t__secret"}
    assert text_of(secret) == "only bob sees this"


@pytest.mark.parametrize("mode", MODES)
async def test_pending_approval_then_cli_approval_then_retry(setup: Setup, mode: str) -> None:
    port = free_port()
    write_config(setup.project, demo=True, extra=f"serve:\n  port: {port}\n")
    with setup.client(mode=mode) as client:
        async with client as mcp:
            first = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            assert first.is_error
            request_id = approval_meta(first)["id"]
            text = text_of(first)
            # The command works from the person's own shell: this process's home and config.
            command = (
                f"TOOLGATE_HOME={setup.home} toolgate --config {setup.config} "
                f"approvals approve {request_id}"
            )
            assert command in text
            # No `toolgate serve` answers where serve: says it would listen: no dead link.
            assert "http://" not in text and "url" not in approval_meta(first)
            again = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            assert approval_meta(again)["id"] == request_id

            # The CLI (another process) records the decision; nothing runs there.
            approved = setup.cli("approvals", "approve", request_id)
            assert approved.returncode == 0, approved.stderr
            assert "Nothing ran here" in approved.stderr
            assert runs(setup.runs) == []

            # The running server sees the decision: the agent's retry runs it there, once.
            retried = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            assert runs(setup.runs) == ["bob:hi"]
            anew = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            assert anew.is_error and approval_meta(anew)["id"] != request_id
    assert not retried.is_error and text_of(retried) == "sent to bob"
    assert runs(setup.runs) == ["bob:hi"]


async def test_pending_approval_links_the_web_ui_once_a_server_answers_there(
    setup: Setup,
) -> None:
    port = free_port()
    write_config(setup.project, demo=True, extra=f"serve:\n  port: {port}\n")
    url = f"http://127.0.0.1:{port}"
    with setup.client() as client:
        async with client as mcp:
            before = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            request_id = approval_meta(before)["id"]
            assert url not in text_of(before)
            server = subprocess.Popen(
                [str(TOOLGATE), "--config", str(setup.config), "serve"],
                cwd=setup.project,
                env={**os.environ, **setup.env},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                for _ in range(300):
                    try:
                        if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    await anyio.sleep(0.1)
                after = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            finally:
                server.terminate()
                server.wait(timeout=30)
    assert approval_meta(after)["id"] == request_id
    assert f"open {url}/approvals/{request_id}" in text_of(after)
    assert approval_meta(after)["url"] == f"{url}/approvals/{request_id}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("choice", ["approve", "deny"])
async def test_approval_by_elicitation_over_stdio(setup: Setup, mode: str, choice: str) -> None:
    seen: list[types.ElicitRequestParams] = []
    with setup.client(mode=mode, elicitation_callback=answer_with(choice, seen)) as client:
        async with client as mcp:
            result = await mcp.call_tool("t__send", {"to": "zoe", "text": "yo"})
    assert len(seen) == 1 and "Send a message" in seen[0].message
    if choice == "approve":
        assert not result.is_error and text_of(result) == "sent to zoe"
        assert runs(setup.runs) == ["zoe:yo"]
    else:
        assert result.is_error and "user_rejection" in text_of(result)
        assert runs(setup.runs) == []
    listed = setup.cli("approvals", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


async def test_elicitation_can_be_turned_off(setup: Setup) -> None:
    seen: list[types.ElicitRequestParams] = []
    options = {"elicitation_callback": answer_with("approve", seen)}
    with setup.client("--no-elicitation", **options) as client:
        async with client as mcp:
            result = await mcp.call_tool("t__send", {"to": "zoe", "text": "yo"})
    assert seen == [] and result.is_error and approval_meta(result)["status"] == "pending"


@pytest.mark.parametrize("mode", MODES)
async def test_list_changed_when_a_tool_folder_appears(setup: Setup, mode: str) -> None:
    tools_dir = setup.home / "tools"
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with setup.client(mode=mode, message_handler=on_message) as client:
        async with client as mcp:
            before = {tool.name for tool in (await mcp.list_tools()).tools}
            with anyio.fail_after(120):
                if mode == "auto":
                    async with mcp.listen(tools_list_changed=True) as events:
                        write_tool(tools_dir, "hot", "print('{}')", runtime="python")
                        async for event in events:
                            assert isinstance(event, ToolsListChanged)
                            break
                else:
                    write_tool(tools_dir, "hot", "print('{}')", runtime="python")
                    await changed.wait()
            after = {tool.name for tool in (await mcp.list_tools()).tools}
    assert "local__hot" not in before and "local__hot" in after


def test_a_broken_config_fails_on_stderr_with_nothing_on_stdout(setup: Setup) -> None:
    setup.config.write_text("python: [\n", encoding="utf-8")
    failed = setup.cli("mcp")
    assert failed.returncode == 3
    assert failed.stdout == ""
    assert "toolgate.yaml" in failed.stderr


async def test_the_documented_desktop_entry_starts_the_server(setup: Setup) -> None:
    entry = json.loads(doc_block("connect:claude_desktop_config.json"))["mcpServers"]["toolgate"]
    assert entry["command"] == "toolgate"
    params = StdioServerParameters(
        # The console script of this environment, as "the full path of the toolgate program".
        command=str(TOOLGATE),
        args=["--config", str(setup.config), *entry["args"]],
        env=setup.env,
        cwd=str(setup.project),
    )
    with setup.stderr.open("a", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            added = await mcp.call_tool("demo__add", {"a": 1, "b": 2})
    assert "demo__add" in names and text_of(added) == "3"


async def test_json_logs_on_stderr_one_line_per_call(setup: Setup) -> None:
    with setup.client("--log-format", "json") as client:
        async with client as mcp:
            added = await mcp.call_tool("t__add", {"a": 40, "b": 2})
            bad = await mcp.call_tool("t__add", {"a": "x", "b": 2})
    assert not added.is_error and bad.is_error
    lines = [line for line in setup.stderr.read_text(encoding="utf-8").splitlines() if line]
    entries = [json.loads(line) for line in lines]  # every line is one JSON object
    calls = [entry for entry in entries if entry["logger"] == "toolgate.calls"]
    assert [(c["tool"], c["outcome"], c["code"]) for c in calls] == [
        ("t:add", "ok", None),
        ("t:add", "error", "invalid_arguments"),
    ]
    assert all(
        c["call_id"].startswith("call_") and isinstance(c["duration_ms"], float) for c in calls
    )
    assert {c["agent"] for c in calls} == {None}
