"""The MCP server over streamable HTTP, with the official ``mcp`` client against a real uvicorn.

Both protocol eras are exercised: the client's default (``mode="auto"``: the 2026-07-28
per-request envelope) and ``mode="legacy"`` (the 2025-11-25 ``initialize`` handshake, a stateful
session). Agents are told apart by bearer keys (``alice-key``, ``bob-key``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from folder_tools import write_tool
from test_mcp_server_helpers import (
    answer_with,
    approval_meta,
    bearer,
    configured_server,
    runs,
    text_of,
)
from toolgate import tool

MODES = ["auto", "legacy"]


def client(url: str, key: str = "alice-key", **options: Any) -> Client:
    return Client(streamable_http_client(url, http_client=bearer(key)), **options)


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with configured_server(tmp_path, monkeypatch, demo=True) as running:
        yield running


# -- tools/list ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_list_gives_names_titles_schemas_and_annotations(server: Any, mode: str) -> None:
    async with client(server.url, mode=mode) as mcp:
        assert mcp.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
        listed = {tool.name: tool for tool in (await mcp.list_tools()).tools}
    add = listed["t__add"]
    assert add.title == "Add two integers"
    assert add.description is not None and add.description.startswith("Add two integers.")
    assert add.input_schema["required"] == ["a", "b"]
    assert add.output_schema is not None and add.output_schema["properties"]["total"]
    assert add.annotations is not None
    assert add.annotations.read_only_hint is True and add.annotations.destructive_hint is False
    send = listed["t__send"]
    assert send.annotations is not None and send.annotations.read_only_hint is False
    assert "demo__add" in listed  # demo: true
    assert "t__secret" not in listed  # alice is not an allowed agent


@pytest.mark.parametrize("mode", MODES)
async def test_two_keys_two_agents_two_lists(server: Any, mode: str) -> None:
    async with client(server.url, "alice-key", mode=mode) as alice:
        alice_tools = {tool.name for tool in (await alice.list_tools()).tools}
        with pytest.raises(MCPError) as refused:
            await alice.call_tool("t__secret", {})
    async with client(server.url, "bob-key", mode=mode) as bob:
        bob_tools = {tool.name for tool in (await bob.list_tools()).tools}
        called = await bob.call_tool("t__secret", {})
    assert bob_tools - alice_tools == {"t__secret"}
    # Hidden from alice, it is an unknown tool to her — and no suggestion names it.
    assert "Unknown tool: t__secret" in refused.value.message
    assert "t__secret;" not in refused.value.message.replace("Unknown tool: t__secret", "")
    assert not called.is_error and text_of(called) == "only bob sees this"


async def test_a_bad_key_is_refused_with_401(server: Any) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            response = await http.post(
                server.url,
                headers={**headers, "Content-Type": "application/json"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
            assert response.status_code == 401
            assert response.headers["www-authenticate"] == "Bearer"
    with pytest.raises(Exception):  # noqa: B017 - the client surfaces the 401 as it sees fit
        async with client(server.url, "wrong-key") as mcp:
            await mcp.list_tools()


async def test_a_session_opened_by_one_agent_is_not_usable_by_another(server: Any) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with bearer("alice-key") as alice, bearer("bob-key") as bob:
        opened = await alice.post(server.url, headers=headers, json=init)
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
        session_headers = {
            **headers,
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": "2025-11-25",
        }
        hijack = await bob.post(server.url, headers=session_headers, json=listing)
        assert hijack.status_code == 404


# -- tools/call ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_call_returns_text_and_structured_content(server: Any, mode: str) -> None:
    async with client(server.url, mode=mode) as mcp:
        result = await mcp.call_tool("t__add", {"a": 2, "b": 3})
        plain = await mcp.call_tool("demo__add", {"a": 2, "b": 3})
    assert not result.is_error
    assert result.structured_content == {"total": 5}
    assert json.loads(text_of(result)) == {"total": 5}
    # No output schema: the text only, no structured copy of it.
    assert text_of(plain) == "5" and plain.structured_content is None


@pytest.mark.parametrize("mode", MODES)
async def test_bad_arguments_are_an_error_result_naming_the_field(server: Any, mode: str) -> None:
    async with client(server.url, mode=mode) as mcp:
        result = await mcp.call_tool("t__add", {"a": "two", "b": 3})
        missing = await mcp.call_tool("t__add", {"a": 1})
    assert result.is_error
    assert "invalid_arguments" in text_of(result) and "/a" in text_of(result)
    assert missing.is_error and "/b: required field is missing" in text_of(missing)


@pytest.mark.parametrize("mode", MODES)
async def test_unknown_tool_is_a_protocol_error_with_suggestions(server: Any, mode: str) -> None:
    async with client(server.url, mode=mode) as mcp:
        with pytest.raises(MCPError) as raised:
            await mcp.call_tool("t__ad", {"a": 1, "b": 2})
    assert raised.value.code == types.INVALID_PARAMS
    assert "did you mean t__add" in raised.value.message


@pytest.mark.parametrize("mode", MODES)
async def test_visualizations_never_reach_the_client(server: Any, mode: str) -> None:
    async with client(server.url, mode=mode) as mcp:
        result = await mcp.call_tool("t__words", {"text": "one two three"})
        diff = await mcp.call_tool("demo__diff_text", {"old": "a\n", "new": "b\n"})
    for outcome in (result, diff):
        assert not outcome.is_error
        wire = outcome.model_dump_json(by_alias=True)
        assert "_visualization" not in wire and "VISUALIZATION-FOR-PEOPLE" not in wire
    assert json.loads(text_of(result)) == {"words": 3}


async def test_overflow_is_the_gateways_preview_and_note(server: Any) -> None:
    async with client(server.url) as mcp:
        result = await mcp.call_tool("demo__big_output", {"size": 60_000})
    text = text_of(result)
    assert not result.is_error
    assert len(text) < 20_000 and "60000" in text.replace(",", "")


async def test_instructions_carry_the_capability_guides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with configured_server(tmp_path, monkeypatch) as running:
        fixture = Path(__file__).parent / "fixtures" / "capabilities" / "github"
        running.gateway.add_source(fixture)
        for mode in MODES:
            async with client(running.url, mode=mode) as mcp:
                assert mcp.instructions is not None and "GitHub" in mcp.instructions


# -- approvals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("choice", ["approve", "always", "deny", "decline"])
async def test_approval_by_elicitation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, choice: str
) -> None:
    seen: list[types.ElicitRequestParams] = []
    with configured_server(tmp_path, monkeypatch) as running:
        gateway = running.gateway
        async with client(
            running.url, mode=mode, elicitation_callback=answer_with(choice, seen)
        ) as mcp:
            result = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
            again = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
        assert len(seen) == (1 if choice == "always" else 2)
        form = seen[0]
        assert isinstance(form, types.ElicitRequestFormParams)
        assert "Send a message" in form.message and '"to": "bob"' in form.message
        options = form.requested_schema["properties"]["decision"]["oneOf"]
        assert [(o["const"], o["title"]) for o in options] == [
            ("approve", "Allow once"),
            ("always", "Always allow"),
            ("deny", "Deny"),
        ]
        if choice in ("approve", "always"):
            assert not result.is_error and text_of(result) == "sent to bob"
            assert not again.is_error
            assert runs(tmp_path / "runs.txt") == ["bob:hi", "bob:hi"]
        else:
            assert result.is_error and "user_rejection" in text_of(result)
            assert runs(tmp_path / "runs.txt") == []
        assert gateway.approvals is not None
        grants = gateway.approvals.grants()
        assert [g.tool_id for g in grants] == (["t:send"] if choice == "always" else [])
        assert gateway.approvals.pending() == []


@pytest.mark.parametrize("mode", MODES)
async def test_dismissed_form_leaves_the_request_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    with configured_server(tmp_path, monkeypatch) as running:
        async with client(
            running.url, mode=mode, elicitation_callback=answer_with("cancel")
        ) as mcp:
            result = await mcp.call_tool("t__send", {"to": "bob", "text": "hi"})
        assert result.is_error and "waiting for a decision" in text_of(result)
        assert running.gateway.approvals is not None
        [pending] = running.gateway.approvals.pending()
        assert approval_meta(result)["id"] == pending.id


@pytest.mark.parametrize("mode", MODES)
async def test_approval_without_elicitation_then_retry_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    with configured_server(tmp_path, monkeypatch) as running:
        approvals = running.gateway.approvals
        assert approvals is not None
        async with client(running.url, mode=mode) as mcp:
            first = await mcp.call_tool("t__send", {"to": "carol", "text": "hello"})
            second = await mcp.call_tool("t__send", {"to": "carol", "text": "hello"})
            assert first.is_error and second.is_error
            meta = approval_meta(first)
            request_id = meta["id"]
            assert approval_meta(second)["id"] == request_id  # the retry attached to it
            assert meta["status"] == "pending"
            assert meta["url"] == f"http://127.0.0.1:{running.port}/approvals/{request_id}"
            text = text_of(first)
            assert f"toolgate approvals approve {request_id}" in text
            assert f"/approvals/{request_id}" in text
            assert runs(tmp_path / "runs.txt") == []

            approvals.decide(request_id, "approve", by="test")
            assert runs(tmp_path / "runs.txt") == []  # the decision ran nothing
            retried = await mcp.call_tool("t__send", {"to": "carol", "text": "hello"})
            assert not retried.is_error and text_of(retried) == "sent to carol"
            assert runs(tmp_path / "runs.txt") == ["carol:hello"]  # the retry ran it
            # Once: the same call asks anew and runs nothing.
            anew = await mcp.call_tool("t__send", {"to": "carol", "text": "hello"})
            assert anew.is_error and approval_meta(anew)["id"] != request_id
            assert runs(tmp_path / "runs.txt") == ["carol:hello"]

            denied_first = await mcp.call_tool("t__send", {"to": "dave", "text": "x"})
            approvals.decide(approval_meta(denied_first)["id"], "deny")
            denied = await mcp.call_tool("t__send", {"to": "dave", "text": "x"})
            assert denied.is_error and "user_rejection" in text_of(denied)
            assert runs(tmp_path / "runs.txt") == ["carol:hello"]


async def test_decision_made_in_the_ui_while_a_legacy_form_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The form is open in the client; the request is approved elsewhere: the call completes."""
    with configured_server(tmp_path, monkeypatch) as running:
        approvals = running.gateway.approvals
        assert approvals is not None
        asked = anyio.Event()
        release = anyio.Event()

        async def slow_user(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked.set()
            await release.wait()
            return types.ElicitResult(action="cancel")

        async with client(running.url, mode="legacy", elicitation_callback=slow_user) as mcp:
            results: list[types.CallToolResult] = []

            async def call() -> None:
                results.append(await mcp.call_tool("t__send", {"to": "erin", "text": "x"}))

            with anyio.fail_after(120):
                async with anyio.create_task_group() as group:
                    group.start_soon(call)
                    await asked.wait()
                    [pending] = approvals.pending()
                    approvals.decide(pending.id, "approve", by="web ui")  # records only
                    while not results:
                        await anyio.sleep(0.05)
                    release.set()
        # The waiting call (the agent's) ran it, once.
        assert not results[0].is_error and text_of(results[0]) == "sent to erin"
        assert runs(tmp_path / "runs.txt") == ["erin:x"]


# -- list changes --------------------------------------------------------------------------------


async def test_list_changed_reaches_a_listening_2026_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    @tool(namespace="extra", effect="read_only")
    def hello() -> str:
        """Say hello."""
        return "hello"

    with configured_server(tmp_path, monkeypatch) as running:
        async with client(running.url) as mcp:
            before = {tool.name for tool in (await mcp.list_tools()).tools}
            with anyio.fail_after(60):
                async with mcp.listen(tools_list_changed=True) as events:
                    # From this thread, not the server's: the change crosses threads.
                    running.gateway.add(hello)
                    async for event in events:
                        assert isinstance(event, ToolsListChanged)
                        break
            after = {tool.name for tool in (await mcp.list_tools()).tools}
    assert "extra__hello" not in before and "extra__hello" in after


@pytest.mark.slow
async def test_list_changed_reaches_a_legacy_session_on_hot_reload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool folder written into the watched $TOOLGATE_HOME/tools while the server runs."""
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with configured_server(tmp_path, monkeypatch) as running:
        tools_dir = tmp_path / "home" / "tools"
        async with client(running.url, mode="legacy", message_handler=on_message) as mcp:
            assert mcp.server_capabilities.tools is not None
            assert mcp.server_capabilities.tools.list_changed is True
            await mcp.list_tools()
            # The client opens its GET stream (where unsolicited notifications travel) on its
            # own schedule: change the folder until one notification arrives.
            with anyio.fail_after(120):
                for attempt in range(60):
                    write_tool(tools_dir, f"hot{attempt}", "print('{}')", runtime="python")
                    with anyio.move_on_after(2):
                        await changed.wait()
                    if changed.is_set():
                        break
            assert changed.is_set()
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert running.mcp.surface.changes.tracked == 1
        # The client ended its session: the server forgets it (no session kept for ever).
        with anyio.fail_after(60):
            while running.mcp.surface.changes.tracked:
                await anyio.sleep(0.05)
    assert "local__hot0" in names


# -- limits --------------------------------------------------------------------------------------


async def test_oversized_bodies_and_foreign_hosts_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with configured_server(tmp_path, monkeypatch, max_body=4096) as running:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "y" * 10_000}}
        async with bearer("alice-key") as http:
            too_big = await http.post(running.url, headers=headers, json=big)
            foreign = await http.post(
                running.url,
                headers={**headers, "Host": "evil.example:80"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
            garbage = await http.post(running.url, headers=headers, content=b"{not json")
        assert too_big.status_code == 413
        assert foreign.status_code == 421
        assert garbage.status_code == 400
        # Still serving.
        async with client(running.url) as mcp:
            assert (await mcp.call_tool("t__add", {"a": 1, "b": 1})).structured_content == {
                "total": 2
            }
