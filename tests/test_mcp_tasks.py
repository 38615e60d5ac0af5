"""MCP tasks (protocol 2025-11-25) through toolgate, against the real reference server.

``mcp-server-everything`` (npm, 2026.8.31, TypeScript SDK 1.32) declares
``simulate-research-query`` with ``execution.taskSupport: "required"``: it refuses a plain call,
and as a task it goes through four one-second stages. Here it is an upstream of a real
``toolgate serve`` (stdio), and the official MCP Python client talks to toolgate's ``/mcp`` with
the raw task requests (the SDK has no task API: ``send_request`` with its models, and the
session's dispatcher for the task-augmented ``tools/call``, whose answer is no
``CallToolResult``). The same task is also run directly against the upstream to compare.

Each run of that tool takes about 4 s, so the runs are few: one direct, one through toolgate as
a task, one plain HTTP call (toolgate runs the upstream task itself), one cancelled.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import METHOD_NOT_FOUND

from serve_support import TOOLGATE, serving
from toolgate.backends.mcp_tasks import call_as_task, task_support

pytestmark = pytest.mark.slow

TOOL = "simulate-research-query"
RELATED = "io.modelcontextprotocol/related-task"

MCP_YAML = """\
apiVersion: joch.dev/v1alpha1
kind: MCPServer
metadata:
  name: everything
spec:
  command: {command}
  args: ["stdio"]
  sideEffects:
    level: read_only                  # no approval: the calls run at once
---
apiVersion: joch.dev/v1alpha1
kind: MCPServer
metadata:
  name: gated                         # the default level: a call waits for a person's approval
spec:
  command: {command}
  args: ["stdio"]
"""


def _everything() -> str:
    path = shutil.which("mcp-server-everything")
    if path is None:
        pytest.skip("mcp-server-everything is not on PATH")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tasks")
    (folder / "mcp.yaml").write_text(MCP_YAML.format(command=_everything()))
    (folder / "toolgate.yaml").write_text("sources:\n  - path: ./mcp.yaml\n")
    return folder


def _env(folder: Path) -> dict[str, str]:
    return {**os.environ, "TOOLGATE_HOME": str(folder / "home")}


@pytest.fixture(scope="module")
def served(folder: Path) -> Iterator[str]:
    with serving(folder, _env(folder)) as (url, _pid):
        yield url


@asynccontextmanager
async def through(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The official client on toolgate's /mcp, speaking 2025-11-25 (the tasks era)."""
    http = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=None))
    async with (
        http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client,
    ):
        assert client.protocol_version == "2025-11-25"
        yield client


def direct() -> Client:
    return Client(StdioServerParameters(command=_everything(), args=["stdio"]), mode="legacy")


async def raw(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request the SDK would check against a table it does not have (tasks) or check wrongly
    (a task-augmented tools/call answers a CreateTaskResult)."""
    answer: dict[str, Any] = await client.session._dispatcher.send_raw_request(
        method, params, {"timeout": 30}
    )
    return answer


async def tool_name(client: Client, server: str = "everything") -> str:
    """The name toolgate lists ``server``'s research tool under (once the server is connected:
    the servers start in parallel with ``toolgate serve``)."""
    deadline = time.monotonic() + 60
    while True:
        listed = await client.list_tools()
        ours = [tool.name for tool in listed.tools if tool.name.startswith(server)]
        names = [name for name in ours if name.endswith((TOOL, TOOL.replace("-", "-2d")))]
        if names or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert len(names) == 1, [tool.name for tool in listed.tools]
    return names[0]


async def run_task(client: Client, name: str, topic: str) -> tuple[list[str], dict[str, Any]]:
    """Create the task, poll it to the end (statuses seen), and fetch its result."""
    created = await raw(
        client, "tools/call", {"name": name, "arguments": {"topic": topic}, "task": {"ttl": 60000}}
    )
    task = types.CreateTaskResult.model_validate(created, by_name=False).task
    seen = [task.status]
    deadline = time.monotonic() + 60
    while task.status not in ("completed", "failed", "cancelled"):
        assert time.monotonic() < deadline, seen
        await asyncio.sleep((task.poll_interval or 500) / 1000)
        task = await client.session.send_request(
            types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task.task_id)),
            types.GetTaskResult,
        )
        seen.append(task.status)
    result = await raw(client, "tasks/result", {"taskId": task.task_id})
    return seen, result


def _without_related(result: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (result.get("_meta") or {}).items() if k != RELATED}
    stripped = {k: v for k, v in result.items() if k != "_meta"}
    return {**stripped, "_meta": meta} if meta else stripped


async def test_a_task_through_toolgate_completes_with_the_upstream_result(served: str) -> None:
    async with direct() as upstream:
        assert upstream.server_capabilities.tasks is not None
        listed = await upstream.list_tools()
        direct_tools = listed.tools
        entry = next(tool for tool in listed.tools if tool.name == TOOL)
        assert entry.execution is not None and entry.execution.task_support == "required"
        _, expected = await run_task(upstream, TOOL, "tides")

    async with through(served) as client:
        # What toolgate announces: the tasks capability, and each upstream tool's taskSupport
        # as its server listed it (a task call to one that says nothing is refused).
        tasks = client.server_capabilities.tasks
        assert tasks is not None and tasks.list is not None and tasks.cancel is not None
        assert tasks.requests is not None and tasks.requests.tools is not None
        name = await tool_name(client)
        listed = await client.list_tools()
        through_support = {
            tool.name.partition("__")[2]: tool.execution and tool.execution.task_support
            for tool in listed.tools
        }
        assert through_support == {
            tool.name: tool.execution and tool.execution.task_support for tool in direct_tools
        }
        plain = next(
            tool
            for tool in direct_tools
            if tool.execution is None or tool.execution.task_support in (None, "forbidden")
        )
        with pytest.raises(MCPError) as refused:
            await raw(
                client,
                "tools/call",
                {"name": f"everything__{plain.name}", "arguments": {}, "task": {"ttl": 60000}},
            )
        assert refused.value.error.code == METHOD_NOT_FOUND
        assert "cannot be called as a task" in refused.value.error.message

        seen, result = await run_task(client, name, "tides")
        assert seen[0] == "working" and seen[-1] == "completed", seen
        # The result is the upstream's, except what toolgate adds: the related-task _meta
        # names toolgate's own task id (the upstream's names the upstream's), and a text-only
        # result reaches the client as toolgate's text result.
        assert result["_meta"][RELATED]["taskId"]
        assert result["content"][0]["text"] == expected["content"][0]["text"]
        assert not result.get("isError")
        assert _without_related(result)["content"] == _without_related(expected)["content"]

        # The task is listed for its owner, and stays readable after it ended.
        listed_tasks = await raw(client, "tasks/list", {})
        assert [task["status"] for task in listed_tasks["tasks"]] == ["completed"]
        task_id = listed_tasks["tasks"][0]["taskId"]
        again = await raw(client, "tasks/get", {"taskId": task_id})
        assert again["status"] == "completed"

        # A terminal task cannot be cancelled; an unknown id is the spec's -32602.
        with pytest.raises(MCPError) as terminal:
            await raw(client, "tasks/cancel", {"taskId": task_id})
        assert terminal.value.code == -32602 and "terminal" in terminal.value.message
        with pytest.raises(MCPError) as unknown:
            await raw(client, "tasks/get", {"taskId": "no-such-task"})
        assert unknown.value.code == -32602 and "not found" in unknown.value.message.lower()

        # Another caller (another session) sees nothing of it: not listed, not found, not
        # cancellable — the same answer as an id that never existed.
        async with through(served) as other:
            assert (await raw(other, "tasks/list", {}))["tasks"] == []
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                with pytest.raises(MCPError) as hidden:
                    await raw(other, method, {"taskId": task_id})
                assert hidden.value.code == -32602, method
                assert hidden.value.message == unknown.value.message


def test_a_plain_http_call_runs_the_upstream_task_to_its_end(served: str) -> None:
    tools = httpx.get(f"{served}/v1/tools", timeout=30).json()
    ids = [t["id"] for t in tools["tools"] if t["id"].startswith("everything") and TOOL in t["id"]]
    assert len(ids) == 1, tools
    answer = httpx.post(
        f"{served}/v1/tools/{ids[0]}/call", json={"arguments": {"topic": "moss"}}, timeout=60
    ).json()
    assert answer["status"] == "ok", answer
    assert "# Research Report: moss" in answer["text"]


async def test_a_cancelled_task_is_cut_off_and_audited_cancelled(served: str) -> None:
    async with through(served) as client:
        name = await tool_name(client)
        created = await raw(
            client, "tools/call", {"name": name, "arguments": {"topic": "cut"}, "task": {}}
        )
        task_id = created["task"]["taskId"]
        await asyncio.sleep(1.2)  # the upstream task is under way
        cancelled = await raw(client, "tasks/cancel", {"taskId": task_id})
        assert cancelled["status"] == "cancelled"
        assert (await raw(client, "tasks/get", {"taskId": task_id}))["status"] == "cancelled"
        result = await raw(client, "tasks/result", {"taskId": task_id})
        assert result["isError"] is True and result["_meta"][RELATED] == {"taskId": task_id}
    # The audit log is written in batches: wait for the record.
    statuses: list[tuple[str, str | None]] = []
    deadline = time.monotonic() + 30
    while ("error", "cancelled") not in statuses:
        assert time.monotonic() < deadline, statuses
        await asyncio.sleep(0.3)
        audit = httpx.get(f"{served}/v1/audit", params={"limit": 50}, timeout=30).json()
        records = [r for r in audit["records"] if TOOL in r["tool_id"]]
        statuses = [(r["status"], r["code"]) for r in records]


async def test_the_backend_cancels_the_upstream_task_of_an_abandoned_call() -> None:
    """The backend's half on its own, on a session the test holds, so the upstream task's end
    can be asked of the upstream itself."""
    async with direct() as upstream:
        assert (
            task_support(
                [
                    t.model_dump(mode="json", by_alias=True)
                    for t in (await upstream.list_tools()).tools
                ],
                TOOL,
            )
            == "required"
        )
        call = asyncio.ensure_future(
            call_as_task(upstream.session, TOOL, {"topic": "gone"}, 30.0, server="everything")
        )
        deadline = time.monotonic() + 10
        listed: list[dict[str, Any]] = []
        while not listed and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            listed = (await raw(upstream, "tasks/list", {}))["tasks"]
        assert listed, "the task was never created upstream"
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        task = await raw(upstream, "tasks/get", {"taskId": listed[0]["taskId"]})
        assert task["status"] == "cancelled"


async def test_tasks_over_stdio_belong_to_the_process_session(folder: Path) -> None:
    """``toolgate mcp`` (stdio) serves the same tasks; cancelled before the upstream's first
    stage ends, so no full run is spent here."""
    params = StdioServerParameters(
        command=TOOLGATE, args=["mcp"], cwd=str(folder), env=_env(folder)
    )
    async with Client(params, mode="legacy") as client:
        assert client.server_capabilities.tasks is not None
        name = await tool_name(client)
        created = await raw(
            client, "tools/call", {"name": name, "arguments": {"topic": "x"}, "task": {"ttl": 1}}
        )
        task = created["task"]
        assert task["status"] == "working" and task["ttl"] == 1  # what was asked, under the cap
        listed = await raw(client, "tasks/list", {})
        assert [t["taskId"] for t in listed["tasks"]] == [task["taskId"]]
        cancelled = await raw(client, "tasks/cancel", {"taskId": task["taskId"]})
        assert cancelled["status"] == "cancelled"
        # An unknown tool is refused at once, as for a plain call, not inside a task.
        with pytest.raises(MCPError) as unknown:
            await raw(client, "tools/call", {"name": "nope", "arguments": {}, "task": {}})
        assert unknown.value.code == -32602 and "Unknown tool" in unknown.value.message


async def test_a_task_waits_for_approval_as_input_required(folder: Path, served: str) -> None:
    """A call that needs a person's approval: ``input_required`` with where to decide; once
    approved (with the CLI, as a person does), the task runs and completes."""
    async with through(served) as client:
        name = await tool_name(client, "gated")
        created = await raw(
            client, "tools/call", {"name": name, "arguments": {"topic": "ok"}, "task": {}}
        )
        task_id = created["task"]["taskId"]
        deadline = time.monotonic() + 30
        task = created["task"]
        while task["status"] != "input_required":
            assert task["status"] == "working" and time.monotonic() < deadline, task
            await asyncio.sleep(0.2)
            task = await raw(client, "tasks/get", {"taskId": task_id})
        found = re.search(r"toolgate approvals approve (\S+?)`", task["statusMessage"])
        assert found, task
        approved = subprocess.run(
            [TOOLGATE, "approvals", "approve", found.group(1)],
            cwd=folder,
            env=_env(folder),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert approved.returncode == 0, approved.stderr
        result = await raw(client, "tasks/result", {"taskId": task_id})
        assert not result.get("isError"), result
        assert "# Research Report: ok" in result["content"][0]["text"]
        assert (await raw(client, "tasks/get", {"taskId": task_id}))["status"] == "completed"


def _older_client_tools(url: str, version: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``tools/list`` as a client of protocol ``version`` (raw HTTP: initialize, initialized,
    list), once the reference server's tools are in it; and the answer to ``tasks/list``."""
    headers = {"Accept": "application/json, text/event-stream"}

    def post(body: dict[str, Any], session: str | None = None) -> httpx.Response:
        extra = {"MCP-Protocol-Version": version, "Mcp-Session-Id": session} if session else {}
        return httpx.post(f"{url}/mcp", json=body, headers={**headers, **extra}, timeout=30)

    def answer(response: httpx.Response) -> dict[str, Any]:
        text = response.text
        if "data:" in text:
            text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
        found: dict[str, Any] = json.loads(text)
        return found

    hello = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    opened = post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    assert answer(opened)["result"]["protocolVersion"] == version
    assert "tasks" not in answer(opened)["result"]["capabilities"]
    session = opened.headers["mcp-session-id"]
    post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    deadline = time.monotonic() + 60
    while True:
        listed = answer(post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, session))
        tools: list[dict[str, Any]] = listed["result"]["tools"]
        if any(entry["name"].endswith(TOOL) for entry in tools) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return tools, answer(post({"jsonrpc": "2.0", "id": 2, "method": "tasks/list"}, session))


def test_clients_of_older_protocols_get_no_execution(served: str) -> None:
    """``execution`` exists in 2025-11-25 only: a 2025-06-18 client gets none, not even the
    upstream's (the research tool's ``required``), and ``tasks/*`` are Method not found."""
    tools, tasks = _older_client_tools(served, "2025-06-18")
    assert any(entry["name"].endswith(TOOL) for entry in tools)
    assert [entry["name"] for entry in tools if "execution" in entry] == []
    assert tasks["error"]["code"] == METHOD_NOT_FOUND, tasks
