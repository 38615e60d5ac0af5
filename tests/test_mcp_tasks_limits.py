"""MCP tasks toward the client, in process: the bounds (unfinished tasks per agent across its
sessions and in all, waiting ``tasks/result`` requests, the ttl cap, forgetting), ownership by
agent and session, a session's end and shutdown cutting tasks off (audited ``cancelled``), the
approval wait, and what clients of other protocol versions get — on the official client over the
SDK's in-process connection (:mod:`toolgate.serve.mcp.tasks`). Stateless HTTP ownership is in
``tests/test_mcp_tasks_sessions.py``; the end-to-end runs against the reference server in
``tests/test_mcp_tasks.py``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError

from gateway_support import gateway_with
from toolgate import ApprovalRequest, Gateway, tool
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


@tool(namespace="t", effect="financial")
def send(word: str) -> str:
    """Needs a person's approval."""
    return f"sent {word}"


@pytest.fixture(autouse=True)
def release() -> None:
    """A fresh event per test: an asyncio event binds to the loop that first waits on it."""
    global RELEASE
    RELEASE = asyncio.Event()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with gateway_with(audit_path=tmp_path / "audit.db") as gateway:
        gateway.add([hold, quick])
        yield gateway


def cancelled_records(gateway: Gateway) -> list[Any]:
    assert gateway.audit is not None
    gateway.audit.flush(timeout=10)  # what was observed so far, written
    return [r for r in gateway.audit.query(tool_id="t:hold") if r.code == "cancelled"]


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await asyncio.sleep(0.02)


async def create(client: Client, name: str, word: str) -> str:
    created = await raw(
        client, "tools/call", {"name": name, "arguments": {"word": word}, "task": {}}
    )
    task_id: str = created["task"]["taskId"]
    return task_id


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
    who = ["alice"]
    surface = build_mcp_server(gateway, agent=lambda request: who[0])
    async with Client(surface.server, mode="legacy") as alice:
        quick_name = name_of((await alice.list_tools()).tools, "quick")
        task_id = await create(alice, quick_name, "w")
        await raw(alice, "tasks/result", {"taskId": task_id})
        # The same surface, alice's session still open, another agent.
        who[0] = "bob"
        async with Client(surface.server, mode="legacy") as bob:
            assert (await raw(bob, "tasks/list", {}))["tasks"] == []
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                with pytest.raises(MCPError) as hidden:
                    await raw(bob, method, {"taskId": task_id})
                assert hidden.value.code == -32602
        who[0] = "alice"
        assert (await raw(alice, "tasks/get", {"taskId": task_id}))["status"] == "completed"


async def test_the_bound_is_per_agent_across_sessions_and_a_session_end_cuts_off(
    gateway: Gateway,
) -> None:
    """A new session does not bring a new budget; a session that ends takes its unfinished
    tasks with it, audited cancelled, and frees the agent's slots."""
    RELEASE.clear()
    surface = build_mcp_server(gateway, agent="alice")
    surface.tasks.max_live = 2
    async with Client(surface.server, mode="legacy") as first:
        held = name_of((await first.list_tools()).tools, "hold")
        ids = [await create(first, held, word) for word in ("a", "b")]
        async with Client(surface.server, mode="legacy") as second:
            with pytest.raises(MCPError) as refused:
                await create(second, held, "c")
            assert refused.value.code == -32600 and "at most 2 unfinished" in refused.value.message
            # Another session of the same agent does not reach them.
            for task_id in ids:
                with pytest.raises(MCPError) as hidden:
                    await raw(second, "tasks/get", {"taskId": task_id})
                assert hidden.value.code == -32602
            assert len(cancelled_records(gateway)) == 0
        # The first session ends: its tasks are cut off, recorded cancelled and forgotten.
    await until(lambda: len(cancelled_records(gateway)) == 2, "two cancelled records")
    assert surface.tasks._tasks == {}
    async with Client(surface.server, mode="legacy") as third:
        task_id = await create(third, held, "d")  # the slots are free again
        RELEASE.set()
        result = await raw(third, "tasks/result", {"taskId": task_id})
        assert result["content"][0]["text"] == "held d"


async def test_every_caller_together_is_bounded(gateway: Gateway) -> None:
    RELEASE.clear()
    who = ["alice"]
    surface = build_mcp_server(gateway, agent=lambda request: who[0])
    surface.tasks.max_live_total = 2
    async with Client(surface.server, mode="legacy") as client:
        held = name_of((await client.list_tools()).tools, "hold")
        await create(client, held, "a")
        who[0] = "bob"
        await create(client, held, "b")
        who[0] = "carol"
        with pytest.raises(MCPError) as refused:
            await create(client, held, "c")
        assert refused.value.code == -32600 and "at most 2 unfinished tasks in all" in (
            refused.value.message
        )
        RELEASE.set()


async def test_waiting_result_requests_are_bounded(gateway: Gateway) -> None:
    RELEASE.clear()
    surface = build_mcp_server(gateway, agent="alice")
    surface.tasks.max_waiting = 1
    async with Client(surface.server, mode="legacy") as client:
        held = name_of((await client.list_tools()).tools, "hold")
        task_id = await create(client, held, "a")
        waiter = asyncio.ensure_future(raw(client, "tasks/result", {"taskId": task_id}))
        await until(lambda: bool(surface.tasks._waiting), "the first waiter")
        with pytest.raises(MCPError) as refused:
            await raw(client, "tasks/result", {"taskId": task_id})
        assert refused.value.code == -32600 and "poll tasks/get" in refused.value.message
        RELEASE.set()
        assert (await waiter)["content"][0]["text"] == "held a"
        assert surface.tasks._waiting == {}
        # A finished task's result does not wait, and is not counted.
        assert (await raw(client, "tasks/result", {"taskId": task_id}))["content"]


async def test_shutdown_records_running_tasks_cancelled(gateway: Gateway) -> None:
    RELEASE.clear()
    surface = build_mcp_server(gateway, agent="alice")
    async with Client(surface.server, mode="legacy") as client:
        held = name_of((await client.list_tools()).tools, "hold")
        task_id = await create(client, held, "a")
        await until(lambda: surface.tasks._tasks[task_id].runner is not None, "the runner")
        await asyncio.sleep(0.05)  # the call is running its tool
        await surface.tasks.aclose()
        # Waited for: observed by the time aclose returns.
        assert len(cancelled_records(gateway)) == 1
        assert (await raw(client, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"


async def test_a_task_waits_for_approval_until_the_request_expires(tmp_path: Path) -> None:
    """The configured approval expiry (an hour here), not a built-in 300 s."""
    with gateway_with(approver="queue", approval_ttl=3600, state_path=tmp_path / "s.db") as gw:
        gw.add([send])
        service = gw.approvals
        assert service is not None
        waited: list[tuple[float, float]] = []

        async def wait(request: ApprovalRequest, timeout: float) -> None:
            waited.append((timeout, request.expires_at - service.clock()))
            return None  # as when nobody decided within `timeout`

        service.wait = wait  # type: ignore[method-assign,assignment]
        surface = build_mcp_server(gw, agent="alice")
        async with Client(surface.server, mode="legacy") as client:
            name = name_of((await client.list_tools()).tools, "send")
            task_id = await create(client, name, "a")
            await raw(client, "tasks/result", {"taskId": task_id})
        [(timeout, expires_in)] = waited
        assert 3500 < timeout <= 3600 and abs(timeout - expires_in) < 5


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
        # tasks/* do not exist for this client: Method not found.
        for method, params in (("tasks/list", {}), ("tasks/get", {"taskId": "x"})):
            data = {"method": method, "params": params}
            options = {"timeout": 30}
            client.session._stamp(data, options)
            with pytest.raises(MCPError) as missing:
                await client.session._dispatcher.send_raw_request(method, data["params"], options)
            assert missing.value.code == -32601, (method, missing.value.message)
