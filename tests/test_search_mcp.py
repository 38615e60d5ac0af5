"""Tool search over MCP with the official client: the ``search_tools`` tool, and progressive
disclosure (``search.progressive`` in toolgate.yaml) with ``list_changed``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from test_mcp_server_helpers import McpHttpServer, bearer, text_of, write_config
from toolgate.config import load_gateway

MODES = ["auto", "legacy"]


def client(url: str, key: str = "alice-key", **options: Any) -> Client:
    return Client(streamable_http_client(url, http_client=bearer(key)), **options)


def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, search: str) -> Iterator[Any]:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True, exist_ok=True)
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    config = write_config(project, extra=f"search:\n{search}")
    monkeypatch.setenv("MCP_TEST_RUNS", str(tmp_path / "runs.txt"))
    gateway = load_gateway(config, environ={"TOOLGATE_HOME": str(home)})
    try:
        with McpHttpServer(gateway) as server:
            yield server
    finally:
        gateway.close()


@pytest.fixture
def searchable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from serve(tmp_path, monkeypatch, "  tool: true\n  semantic: false\n")


@pytest.fixture
def progressive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from serve(
        tmp_path, monkeypatch, "  progressive: true\n  core: ['t:add']\n  semantic: false\n"
    )


def found(result: types.CallToolResult) -> list[str]:
    assert not result.is_error, text_of(result)
    return [tool["name"] for tool in json.loads(text_of(result))["tools"]]


@pytest.mark.parametrize("mode", MODES)
async def test_search_tools_returns_definitions_of_tools_the_agent_may_call(
    searchable: Any, mode: str
) -> None:
    async with client(searchable.url, mode=mode) as mcp:
        listed = {tool.name for tool in (await mcp.list_tools()).tools}
        assert "toolgate__search_tools" in listed and "t__add" in listed  # not progressive
        result = await mcp.call_tool("toolgate__search_tools", {"query": "send a message"})
        definitions = json.loads(text_of(result))["tools"]
        assert definitions[0]["name"] == "t__send" and definitions[0]["id"] == "t:send"
        assert definitions[0]["input_schema"]["required"] == ["to", "text"]
        # Bob's tool is hidden from alice: her search never reveals it.
        assert "t__secret" not in found(
            await mcp.call_tool("toolgate__search_tools", {"query": "bob secret"})
        )
        bad = await mcp.call_tool("toolgate__search_tools", {"query": "\x00 "})
        assert bad.is_error and "query: is empty" in text_of(bad)
        too_many = await mcp.call_tool("toolgate__search_tools", {"query": "x", "limit": 10**9})
        assert too_many.is_error and "limit" in text_of(too_many)
    async with client(searchable.url, "bob-key", mode=mode) as mcp:
        assert (
            found(await mcp.call_tool("toolgate__search_tools", {"query": "bob secret"}))[0]
            == "t__secret"
        )


@pytest.mark.slow
async def test_progressive_disclosure_lists_core_tools_and_adds_found_ones_legacy(
    progressive: Any,
) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with client(progressive.url, mode="legacy", message_handler=on_message) as mcp:
        listed = {tool.name for tool in (await mcp.list_tools()).tools}
        assert listed == {"t__add", "toolgate__search_tools"}
        with pytest.raises(MCPError) as hidden:
            await mcp.call_tool("t__words", {"text": "a b"})
        assert "Unknown tool: t__words" in hidden.value.message
        # The client opens its GET stream on its own schedule; a search that finds something
        # new sends list_changed: search again (for another tool) until one arrives.
        queries = ["count words", "send a message", "noisy stdout"]
        with anyio.fail_after(60):
            for query in queries:
                await mcp.call_tool("toolgate__search_tools", {"query": query, "limit": 1})
                with anyio.move_on_after(5):
                    await changed.wait()
                if changed.is_set():
                    break
        assert changed.is_set()
        after = {tool.name for tool in (await mcp.list_tools()).tools}
        assert {"t__add", "toolgate__search_tools", "t__words"} <= after
        assert "t__secret" not in after
        counted = await mcp.call_tool("t__words", {"text": "a b c"})
        assert not counted.is_error
    # Another session starts from the core set again.
    async with client(progressive.url, mode="legacy") as other:
        assert {tool.name for tool in (await other.list_tools()).tools} == {
            "t__add",
            "toolgate__search_tools",
        }


@pytest.mark.slow
async def test_progressive_disclosure_for_a_2026_client(progressive: Any) -> None:
    async with client(progressive.url) as mcp:
        assert {tool.name for tool in (await mcp.list_tools()).tools} == {
            "t__add",
            "toolgate__search_tools",
        }
        with anyio.fail_after(60):
            async with mcp.listen(tools_list_changed=True) as events:
                assert (
                    found(await mcp.call_tool("toolgate__search_tools", {"query": "count words"}))[
                        0
                    ]
                    == "t__words"
                )
                async for _event in events:
                    break
        listed = {tool.name for tool in (await mcp.list_tools()).tools}
        assert "t__words" in listed
        assert not (await mcp.call_tool("t__words", {"text": "x"})).is_error
