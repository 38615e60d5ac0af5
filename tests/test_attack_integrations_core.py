"""Attacks on the core support of issue 28: tool call ids in approval keys, caller idempotency
keys, ``approval_needed`` and its HTTP route, progressive disclosure by session, and the
in-process ``LocalGateway``. Each test failed before its fix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gateway_support import gateway_with
from http_api_support import KEYS, LOCAL, auth, live_server, make_app, make_gateway
from integrations_support import approval_gateway
from toolgate import CallOutcome, CallStatus, Client, Gateway, tool
from toolgate.client import RemoteNotFoundError
from toolgate.integrations import LocalGateway
from toolgate.model import ApprovalStatus
from toolgate.search.disclosure import MAX_CONVERSATIONS

RELAYED: list[dict[str, Any]] = []
JOTTED: list[str] = []


@tool(namespace="demo", effect="local_write")
def jot(text: str) -> str:
    """Writes a note in the workspace."""
    JOTTED.append(text)
    return "jotted"


@tool(namespace="demo", effect="communication")
def relay(
    to: str | None = None,
    arguments: dict[str, Any] | None = None,
    tool_call_id: str | None = None,
    session: str | None = None,
) -> str:
    """Relays a message (its parameters happen to share names with a call's own fields)."""
    RELAYED.append(
        {"to": to, "arguments": arguments, "tool_call_id": tool_call_id, "session": session}
    )
    return "relayed"


@pytest.fixture
def relay_gateway(tmp_path: Path) -> Iterator[Gateway]:
    RELAYED.clear()
    with gateway_with(
        approver="queue", state_path=tmp_path / "state.db", audit_path=tmp_path / "audit.db"
    ) as gateway:
        gateway.add(relay)
        yield gateway


# -- the approval key of a named call ---------------------------------------------------------


async def test_an_approval_for_a_named_call_does_not_run_a_plain_call_shaped_like_its_key(
    relay_gateway: Gateway,
) -> None:
    """A person approves ``relay(to="alice")`` asked with tool call id ``c1``. Another call —
    no tool call id, another session — whose *arguments* are the named call's key material
    (``{"arguments": ..., "tool_call_id": "c1", "session": "s1"}``) must not find that
    approval and run with arguments nobody was shown."""
    gateway = relay_gateway
    asked = await gateway.call(
        "demo:relay", {"to": "alice"}, agent="planner", session_id="s1", tool_call_id="c1"
    )
    assert asked.status is CallStatus.PENDING_APPROVAL and asked.approval is not None
    approvals = gateway.approvals
    assert approvals is not None
    approvals.decide(asked.approval.id, "approve", by="alice")

    forged = await gateway.call(
        "demo:relay",
        {"arguments": {"to": "alice"}, "tool_call_id": "c1", "session": "s1"},
        agent="planner",
        session_id="elsewhere",
    )
    assert forged.status is CallStatus.PENDING_APPROVAL, forged.text
    assert forged.approval is not None and forged.approval.id != asked.approval.id
    assert RELAYED == []
    # The approved call itself still runs, once.
    retried = await gateway.call(
        "demo:relay", {"to": "alice"}, agent="planner", session_id="s1", tool_call_id="c1"
    )
    assert retried.status is CallStatus.OK, retried.text
    assert RELAYED == [{"to": "alice", "arguments": None, "tool_call_id": None, "session": None}]


# -- caller idempotency keys ------------------------------------------------------------------


async def test_a_caller_key_does_not_replay_a_call_made_in_another_workspace(
    tmp_path: Path,
) -> None:
    """``jot`` writes in the workspace it is called for. The same caller key and arguments in
    another workspace are another call: replaying the first workspace's outcome would tell the
    model the note was written where it never was."""
    first, second = tmp_path / "w1", tmp_path / "w2"
    first.mkdir()
    second.mkdir()
    JOTTED.clear()
    with gateway_with(state_path=tmp_path / "state.db") as gateway:
        gateway.add(jot)

        async def call(workspace: Path) -> CallOutcome:
            return await gateway.call(
                "demo:jot",
                {"text": "hi"},
                agent="planner",
                workspace=workspace,
                idempotency_key="k1",
            )

        done = await call(first)
        assert done.status is CallStatus.OK, done.text
        again = await call(second)
        assert not again.metadata.get("idempotency", {}).get("replayed"), again.text
        assert again.status is CallStatus.ERROR and again.code == "idempotency_conflict"
        assert JOTTED == ["hi"]
        # A retry in the first workspace still replays.
        retried = await call(first)
        assert retried.metadata["idempotency"]["replayed"] is True
        assert JOTTED == ["hi"]


# -- GET /v1/tools/{id}/approval --------------------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[TestClient]:
    gateway = make_gateway(tmp_path)
    with TestClient(make_app(gateway), client=LOCAL, raise_server_exceptions=False) as client:
        yield client
    gateway.close()


@pytest.mark.parametrize("workspace", ["\x00", "/tmp/\x00x", ".", "relative/folder", "~"])
def test_the_approval_route_refuses_a_workspace_a_call_would_refuse(
    api: TestClient, workspace: str
) -> None:
    """A call's body must name an absolute workspace (422 otherwise); the approval question
    took any text, crashed (500) on a NUL and answered for the server's own working folder
    on a relative one."""
    response = api.get(
        "/v1/tools/t:send/approval", params={"workspace": workspace}, headers=auth("alice")
    )
    assert response.status_code == 422, response.text
    assert "workspace" in response.json()["detail"]


def test_the_approval_route_still_answers_for_an_absolute_workspace(
    api: TestClient, tmp_path: Path
) -> None:
    response = api.get(
        "/v1/tools/t:send/approval", params={"workspace": str(tmp_path)}, headers=auth("alice")
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"tool": "t:send", "approval_needed": True}


# -- approvals through the adapters' gateway --------------------------------------------------


async def test_a_local_gateway_neither_reads_nor_decides_another_agents_request(
    tmp_path: Path,
) -> None:
    """An adapter decides the approval id its framework's saved state carries. A state
    pointing at another agent's request (tampered, or an old one replayed) must not approve
    that agent's call: to ``LocalGateway(agent=...)`` another agent's request is unknown, as
    it is to a ``toolgate.Client`` (the API's 404)."""
    with approval_gateway(tmp_path) as setup:
        asked = await setup.tools.call(
            "demo:send_email", {"to": "bob", "body": "hi"}, tool_call_id="c1"
        )
        assert asked.approval is not None
        intruder = LocalGateway(setup.gateway, agent="intruder")
        with pytest.raises(LookupError):
            await intruder.approval(asked.approval.id)
        with pytest.raises(LookupError):
            await intruder.decide(asked.approval.id, "approve", by="mallory")
        approvals = setup.gateway.approvals
        assert approvals is not None
        assert approvals.get(asked.approval.id).status is ApprovalStatus.PENDING
        # The agent's own adapter still reads and decides it.
        assert (await setup.tools.approval(asked.approval.id)).id == asked.approval.id
        decided = await setup.tools.decide(asked.approval.id, "approve", by="alice")
        assert decided.status is ApprovalStatus.APPROVED


async def test_a_client_does_not_decide_another_agents_request(tmp_path: Path) -> None:
    """The same through ``toolgate.Client``: bob's client, holding an operator's approver key,
    is handed alice's approval id; the operator key alone would decide any agent's request."""
    gateway = make_gateway(tmp_path)
    try:
        with live_server(make_app(gateway)) as server:
            async with Client(server.url, key=KEYS["alice"]) as alice:
                asked = await alice.call("t:send", {"to": "x", "text": "y"}, tool_call_id="a1")
                assert asked.approval is not None
            async with Client(server.url, key=KEYS["bob"], approver_key=KEYS["ops"]) as bob:
                with pytest.raises(RemoteNotFoundError):
                    await bob.decide(asked.approval.id, "approve", by="bob")
            approvals = gateway.approvals
            assert approvals is not None
            assert approvals.get(asked.approval.id).status is ApprovalStatus.PENDING
            async with Client(server.url, key=KEYS["alice"], approver_key=KEYS["ops"]) as own:
                decided = await own.decide(asked.approval.id, "approve", by="ops")
                assert decided.status is ApprovalStatus.APPROVED
    finally:
        gateway.close()


# -- progressive disclosure by session --------------------------------------------------------


@pytest.fixture
def disclosed(tmp_path: Path) -> Iterator[tuple[TestClient, Gateway]]:
    gateway = make_gateway(tmp_path)
    gateway.enable_progressive_disclosure(core=["t:add"])
    with TestClient(make_app(gateway), client=LOCAL) as client:
        yield client, gateway
    gateway.close()


def test_one_agent_searching_under_many_session_ids_does_not_evict_another_agents_tools(
    disclosed: tuple[TestClient, Gateway],
) -> None:
    """``GET /v1/tools/search?session_id=`` lets an agent open a conversation per request.
    Conversations are bounded (oldest forgotten first); a flood of them from one agent must
    forget that agent's own, not the tools another agent's conversation found (its list would
    shrink mid-run, and MCP would refuse them as unknown)."""
    api, gateway = disclosed
    disclosure = gateway.disclosure
    assert disclosure is not None

    def listed(agent: str, session: str) -> list[str]:
        answer = api.get("/v1/tools", params={"session_id": session}, headers=auth(agent))
        return [row["id"] for row in answer.json()["tools"]]

    found = api.get(
        "/v1/tools/search",
        params={"q": "send a message", "session_id": "s1"},
        headers=auth("alice"),
    )
    assert found.status_code == 200, found.text
    assert "t:send" in listed("alice", "s1")
    for number in range(MAX_CONVERSATIONS + 10):  # what bob's searches record, one by one
        disclosure.found(("bob", f"flood-{number}"), ["t:send"])
    assert "t:send" in listed("alice", "s1")
    # The flood forgot bob's own oldest conversations, and the bound holds.
    assert "t:send" not in listed("bob", "flood-0")
    assert "t:send" in listed("bob", f"flood-{MAX_CONVERSATIONS + 9}")


async def test_without_a_session_the_local_gateway_lists_what_the_client_lists(
    tmp_path: Path,
) -> None:
    """An adapter must see the same tools in-process and remote. Without a session, the HTTP
    API (and so ``toolgate.Client``) lists every tool; ``LocalGateway`` listed only the core
    set — and since a ``search_tools`` call without a session records nothing, its list could
    never grow: a tool the model found stayed uncallable."""
    gateway = make_gateway(tmp_path)
    gateway.enable_progressive_disclosure(core=["t:add"])
    try:
        with live_server(make_app(gateway)) as server:
            async with Client(server.url, key=KEYS["alice"]) as remote:
                remote_ids = [spec.id for spec in await remote.list_tools()]
            local = LocalGateway(gateway, agent="alice")
            assert [spec.id for spec in await local.list_tools()] == remote_ids
            assert "t:send" in remote_ids
            # With a session, both narrow to the core set plus what it found.
            async with Client(server.url, key=KEYS["alice"]) as remote:
                narrowed = [spec.id for spec in await remote.list_tools(session_id="s1")]
            assert [spec.id for spec in await local.list_tools(session_id="s1")] == narrowed
            assert "t:send" not in narrowed
    finally:
        gateway.close()


@tool(id="t:notes/approval", effect="read_only")
def approval_notes() -> str:
    """Notes about approvals (a tool whose id ends in /approval)."""
    return "notes"


def test_a_tool_whose_id_ends_in_approval_keeps_its_page(tmp_path: Path) -> None:
    """``GET /v1/tools/{id}/approval`` came before ``GET /v1/tools/{id}``: the page of a tool
    named ``t:notes/approval`` became a 404 for ``t:notes``. Its page is back; its approval
    question (the id percent-encoded, as ``toolgate.Client`` sends it) still answers for it,
    and ``t:send``'s for ``t:send``."""
    gateway = make_gateway(tmp_path)
    gateway.add(approval_notes)
    try:
        with TestClient(make_app(gateway), client=LOCAL) as api:
            page = api.get("/v1/tools/t:notes/approval", headers=auth("alice"))
            assert page.status_code == 200, page.text
            assert page.json()["id"] == "t:notes/approval"
            assert "input_schema" in page.json()
            asked = api.get("/v1/tools/t:notes%2Fapproval/approval", headers=auth("alice"))
            assert asked.json() == {"tool": "t:notes/approval", "approval_needed": False}
            sent = api.get("/v1/tools/t:send/approval", headers=auth("alice"))
            assert sent.json() == {"tool": "t:send", "approval_needed": True}
            # A tool the caller may not see is still a 404 (t:payroll is alice's and ops').
            hidden = api.get("/v1/tools/t:payroll/approval", headers=auth("bob"))
            assert hidden.status_code == 404
    finally:
        gateway.close()
