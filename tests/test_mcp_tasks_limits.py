"""MCP tasks toward the client, in process: the bounds (unfinished tasks per caller, the ttl
cap, forgetting) and ownership by agent, on the official client over the SDK's in-process
connection in the 2025-11-25 era (:mod:`toolgate.serve.mcp.tasks`). The end-to-end runs against
the reference server are in ``tests/test_mcp_tasks.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client, MCPError

from gateway_support import gateway_with
from toolgate import Gateway, tool
from toolgate.serve.mcp import tasks as tasks_module
from toolgate.serve.mcp.server import McpSurface, build_mcp_server

RELEASE = asyncio.Event()


@tool(namespace="t", effect="read_only")
async def hold(word: str) -> str:
    """Wait until the test lets go, then echo ``word``."""
    await RELEASE.wait()
    return f"held {word}"


@tool(namespace="t", effect="read_only")
def quick(word: str) -> str:
    """Echo ``word`` at once."""
    return f"quick {word}"


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    gateway = gateway_with()
    gateway.add([hold, quick])
    yield gateway


async def raw(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = await client.session._dispatcher.send_raw_request(
        method, params, {"timeout": 30}
    )
    return answer


def name_of(client_tools: list[Any], suffix: str) -> str:
    return next(entry.name for entry in client_tools if entry.name.endswith(suffix))


async def test_unfinished_tasks_per_caller_are_bounded(gateway: Gateway) -> None:
    RELEASE.clear()
    surface: McpSurface = build_mcp_server(gateway, agent="alice")
    surface.tasks.max_live = 2
    async with Client(surface.server, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        tools = (await client.list_tools()).tools
        held = name_of(tools, "hold")
        first = [
            await raw(client, "tools/call", {"name": held, "arguments": {"word": w}, "task": {}})
            for w in ("a", "b")
        ]
        with pytest.raises(MCPError) as refused:
            await raw(client, "tools/call", {"name": held, "arguments": {"word": "c"}, "task": {}})
        assert refused.value.code == -32600 and "at most 2 unfinished" in refused.value.message
        # A plain call is not a task: it is not refused.
        plain = await client.call_tool(name_of(tools, "quick"), {"word": "x"})
        assert not plain.is_error
        RELEASE.set()
        for created in first:
            result = await raw(client, "tasks/result", {"taskId": created["task"]["taskId"]})
            assert result["content"][0]["text"].startswith("held")
        # Finished tasks no longer count.
        again = await raw(
            client, "tools/call", {"name": held, "arguments": {"word": "d"}, "task": {}}
        )
        assert again["task"]["status"] == "working"
        await raw(client, "tasks/result", {"taskId": again["task"]["taskId"]})


async def test_ttl_is_capped_and_finished_tasks_are_forgotten(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks_module, "GRACE", 0.0)
    surface = build_mcp_server(gateway, agent="alice")
    surface.tasks.max_ttl = 5.0
    async with Client(surface.server, mode="legacy") as client:
        quick_name = name_of((await client.list_tools()).tools, "quick")
        capped = await raw(
            client,
            "tools/call",
            {"name": quick_name, "arguments": {"word": "y"}, "task": {"ttl": 86_400_000}},
        )
        assert capped["task"]["ttl"] == 5000
        short = await raw(
            client,
            "tools/call",
            {"name": quick_name, "arguments": {"word": "z"}, "task": {"ttl": 0}},
        )
        task_id = short["task"]["taskId"]
        # Once it has finished — past its ttl (0) and the grace (0 here) — it is forgotten.
        for _ in range(500):
            try:
                await raw(client, "tasks/get", {"taskId": task_id})
            except MCPError as gone:
                assert gone.code == -32602
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("a finished task past its ttl was kept")
        result = await raw(client, "tasks/result", {"taskId": capped["task"]["taskId"]})
        assert result["content"][0]["text"] == "quick y"
        kept = await raw(client, "tasks/list", {})
        assert [task["taskId"] for task in kept["tasks"]] == [capped["task"]["taskId"]]


async def test_another_agent_cannot_reach_a_task(gateway: Gateway) -> None:
    surface = build_mcp_server(gateway, agent=lambda request: "alice")
    async with Client(surface.server, mode="legacy") as alice:
        quick_name = name_of((await alice.list_tools()).tools, "quick")
        created = await raw(
            alice, "tools/call", {"name": quick_name, "arguments": {"word": "w"}, "task": {}}
        )
        task_id = created["task"]["taskId"]
        await raw(alice, "tasks/result", {"taskId": task_id})
    # The same surface, the same (absent) session, another agent.
    surface._agent_for = lambda request: "bob"
    async with Client(surface.server, mode="legacy") as bob:
        assert (await raw(bob, "tasks/list", {}))["tasks"] == []
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            with pytest.raises(MCPError) as hidden:
                await raw(bob, method, {"taskId": task_id})
            assert hidden.value.code == -32602


async def test_a_2026_client_gets_no_tasks_and_a_plain_answer(gateway: Gateway) -> None:
    """2026-07-28 has no tasks: nothing announced or added, and a ``task`` field is ignored."""
    surface = build_mcp_server(gateway, agent="alice")
    async with Client(surface.server) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.tasks is None
        tools = (await client.list_tools()).tools
        assert all(entry.execution is None for entry in tools)
        data: dict[str, Any] = {
            "method": "tools/call",
            "params": {"name": name_of(tools, "quick"), "arguments": {"word": "v"}, "task": {}},
        }
        options: dict[str, Any] = {"timeout": 30}
        client.session._stamp(data, options)  # the era's _meta, as the SDK sends it
        answer = await client.session._dispatcher.send_raw_request(
            "tools/call", data["params"], options
        )
        assert "task" not in answer
        assert answer["content"] == [{"type": "text", "text": "quick v"}]
