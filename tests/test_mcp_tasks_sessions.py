"""Who owns an MCP task over streamable HTTP, with a real uvicorn and raw HTTP requests
(:mod:`toolgate.serve.mcp.tasks`): in stateless mode a client-sent ``Mcp-Session-Id`` is no
identity — the agent, its namespaces and the credential own a task, so changing the header
neither escapes the bound nor hides a task from the same credential; on a stateful session the
client's ``DELETE`` cuts its unfinished tasks off, audited ``cancelled``."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from gateway_support import gateway_with
from test_mcp_server_helpers import McpHttpServer
from toolgate import tool


@tool(namespace="t", effect="read_only")
async def hold(word: str) -> str:
    """Wait (longer than any test), then echo ``word``."""
    await asyncio.sleep(600)
    return f"held {word}"


def post(
    url: str, body: dict[str, Any], *, key: str = "alice-key", session: str | None = None
) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx.post(url, json=body, headers=headers, timeout=30)


def message(response: httpx.Response) -> dict[str, Any]:
    text = response.text
    if "data:" in text:  # an SSE answer: its last data line
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    answer: dict[str, Any] = json.loads(text)
    return answer


def initialize(url: str, **options: Any) -> httpx.Response:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    }
    return post(
        url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}, **options
    )


def task_call(index: int, word: str) -> dict[str, Any]:
    params = {"name": "t__hold", "arguments": {"word": word}, "task": {}}
    return {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}


def test_stateless_tasks_belong_to_the_credential_not_the_session_header(tmp_path: Path) -> None:
    with gateway_with(audit_path=tmp_path / "audit.db") as gateway:
        gateway.add([hold])
        with McpHttpServer(gateway, stateless=True) as server:
            server.mcp.surface.tasks.max_live = 3
            assert initialize(server.url).status_code == 200
            answers = [
                message(post(server.url, task_call(i, str(i)), session=f"made-up-{i}"))
                for i in range(5)
            ]
            created = [a["result"]["task"]["taskId"] for a in answers if "result" in a]
            refused = [a["error"] for a in answers if "error" in a]
            assert len(created) == 3, answers
            assert [e["code"] for e in refused] == [-32600, -32600]
            assert "at most 3 unfinished" in refused[0]["message"]
            get = {"jsonrpc": "2.0", "id": 9, "method": "tasks/get"}
            # The same credential reaches it whatever header it sends (or none) ...
            for session in (None, "another"):
                found = message(
                    post(server.url, {**get, "params": {"taskId": created[0]}}, session=session)
                )
                assert found["result"]["status"] == "working", found
            # ... another credential does not, even naming the header it was created with.
            hidden = message(
                post(
                    server.url,
                    {**get, "params": {"taskId": created[0]}},
                    key="bob-key",
                    session="made-up-0",
                )
            )
            assert hidden["error"]["code"] == -32602


def test_a_deleted_session_takes_its_unfinished_tasks_with_it(tmp_path: Path) -> None:
    with gateway_with(audit_path=tmp_path / "audit.db") as gateway:
        gateway.add([hold])
        with McpHttpServer(gateway) as server:
            opened = initialize(server.url)
            session = opened.headers["mcp-session-id"]
            created = message(post(server.url, task_call(1, "a"), session=session))
            task_id = created["result"]["task"]["taskId"]
            tasks = server.mcp.surface.tasks
            assert tasks._tasks[task_id].status == "working"
            headers = {"Authorization": "Bearer alice-key", "Mcp-Session-Id": session}
            assert httpx.delete(server.url, headers=headers, timeout=30).status_code == 200
            audit = gateway.audit
            assert audit is not None
            deadline = time.monotonic() + 30
            while task_id in tasks._tasks or not audit.query(tool_id="t:hold"):
                assert time.monotonic() < deadline, "the session's task was not cut off"
                time.sleep(0.05)
                audit.flush(timeout=10)
            [record] = audit.query(tool_id="t:hold")
            assert record.code == "cancelled", record
