"""The HTTP API's operator side, through the real ASGI app (Starlette's TestClient, with its
lifespan): approvals and grants — who may decide, what deciding does — the audit log, alerts,
diagnostics and connections.

Agents: ``ops`` (operator), ``alice`` and ``bob``; see :mod:`http_api_support`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from http_api_support import (
    LOCAL,
    RUNS,
    auth,
    call,
    make_app,
    make_gateway,
    problem,
)
from test_audit import finished
from toolgate import Gateway
from toolgate.audit.log_base import COUNT_LIMIT


@pytest.fixture(autouse=True)
def _reset_runs() -> None:
    RUNS.clear()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with make_gateway(tmp_path) as gw:
        yield gw


@pytest.fixture
def client(gateway: Gateway) -> Iterator[TestClient]:
    with TestClient(make_app(gateway), client=LOCAL) as test_client:
        yield test_client


# -- approvals and grants -----------------------------------------------------------------------


def test_a_call_that_needs_approval_answers_202_and_waits(client: TestClient) -> None:
    response = call(client, "alice", "t:send", to="ada", text="hi")
    assert response.status_code == 202
    outcome = response.json()
    assert outcome["status"] == "pending_approval"
    approval = outcome["approval"]
    assert (
        response.headers["location"] == approval["status_url"] == f"/v1/approvals/{approval['id']}"
    )
    assert approval["cli"] == f"toolgate approvals approve {approval['id']}"
    assert approval["approve_url"] is None  # no web UI in this app
    assert approval["id"] in outcome["text"]
    assert RUNS == []
    # The retry attaches to the same request.
    assert (
        call(client, "alice", "t:send", to="ada", text="hi").json()["approval"]["id"]
        == approval["id"]
    )
    # The agent can follow its own request; another agent cannot see it.
    mine = client.get(approval["status_url"], headers=auth("alice")).json()
    assert mine["approval"]["status"] == "pending" and mine["outcome"] is None
    assert mine["approval"]["arguments"] == {"to": "ada", "text": "hi"}
    problem(client.get(approval["status_url"], headers=auth("bob")), 404, "not_found")


def test_only_operators_decide_and_the_agents_retry_runs_the_call_once(
    client: TestClient,
) -> None:
    approval_id = call(client, "alice", "t:send", to="ada", text="hi").json()["approval"]["id"]
    decision = f"/v1/approvals/{approval_id}/decision"
    problem(client.get("/v1/approvals", headers=auth("alice")), 403, "forbidden")
    body = problem(
        client.post(decision, json={"decision": "approve"}, headers=auth("alice")), 403, "forbidden"
    )
    assert "role: operator" in body["detail"]
    listed = client.get("/v1/approvals", headers=auth("ops")).json()["approvals"]
    assert [(a["id"], a["agent"], a["tool"]) for a in listed] == [(approval_id, "alice", "t:send")]
    assert listed[0]["display"]

    decided = client.post(decision, json={"decision": "approve"}, headers=auth("ops")).json()
    assert decided["outcome"] is None  # the decision is recorded; nothing ran
    assert decided["approval"]["status"] == "approved"
    assert decided["approval"]["decided_by"] == "ops"
    assert RUNS == []
    before = client.get(f"/v1/approvals/{approval_id}", headers=auth("ops")).json()
    assert before["outcome"] is None
    # The agent's retry runs the approved call, once, as that agent.
    retried = call(client, "alice", "t:send", to="ada", text="hi").json()
    assert retried["status"] == "ok" and retried["content"] == {"sent": True, "to": "ada"}
    assert retried["metadata"]["approval"] == {"id": approval_id, "decision": "approve"}
    assert RUNS == [{"tool": "send", "to": "ada", "text": "hi"}]
    # Once: the same call asks anew and does not run.
    again = call(client, "alice", "t:send", to="ada", text="hi")
    assert again.status_code == 202 and again.json()["approval"]["id"] != approval_id
    assert len(RUNS) == 1
    detail = client.get(f"/v1/approvals/{approval_id}", headers=auth("ops")).json()
    assert detail["outcome"]["status"] == "ok"
    assert detail["outcome"]["content"] == {"sent": True, "to": "ada"}
    kinds = [event["kind"] for event in detail["events"]]
    assert kinds[:3] == ["requested", "decided", "ran"]
    assert detail["events"][2]["actor"] == "alice"
    problem(
        client.post(decision, json={"decision": "deny"}, headers=auth("ops")),
        409,
        "approval_closed",
    )


def test_an_operator_cannot_approve_its_own_request(client: TestClient) -> None:
    approval_id = call(client, "ops", "t:send", to="x", text="y").json()["approval"]["id"]
    body = problem(
        client.post(
            f"/v1/approvals/{approval_id}/decision",
            json={"decision": "approve"},
            headers=auth("ops"),
        ),
        403,
        "forbidden",
    )
    assert "cannot decide it itself" in body["detail"]
    assert RUNS == []


def test_deny_ends_the_call_in_user_rejection(client: TestClient) -> None:
    approval_id = call(client, "bob", "t:send", to="x", text="y").json()["approval"]["id"]
    decided = client.post(
        f"/v1/approvals/{approval_id}/decision",
        json={"decision": "deny", "message": "not today"},
        headers=auth("ops"),
    ).json()
    assert decided["outcome"]["code"] == "user_rejection"
    assert "not today" in decided["outcome"]["message"]
    retried = call(client, "bob", "t:send", to="x", text="y").json()
    assert retried["code"] == "user_rejection"
    assert RUNS == []


def test_always_allow_creates_a_grant_that_can_be_revoked(client: TestClient) -> None:
    approval_id = call(client, "bob", "t:send", to="x", text="1").json()["approval"]["id"]
    client.post(
        f"/v1/approvals/{approval_id}/decision", json={"decision": "always"}, headers=auth("ops")
    )
    [grant] = client.get("/v1/grants", headers=auth("ops")).json()["grants"]
    assert (grant["tool"], grant["granted_by"], grant["approval_id"]) == (
        "t:send",
        "ops",
        approval_id,
    )
    assert call(client, "bob", "t:send", to="x", text="2").json()["status"] == "ok"
    problem(client.get("/v1/grants", headers=auth("bob")), 403, "forbidden")
    problem(client.delete(f"/v1/grants/{grant['id']}", headers=auth("bob")), 403, "forbidden")
    revoked = client.delete(f"/v1/grants/{grant['id']}", headers=auth("ops"))
    assert revoked.status_code == 204 and revoked.content == b""
    assert client.get("/v1/grants", headers=auth("ops")).json()["grants"] == []
    assert call(client, "bob", "t:send", to="x", text="3").status_code == 202
    problem(client.delete(f"/v1/grants/{grant['id']}", headers=auth("ops")), 404, "not_found")


def test_unknown_requests_and_bad_decisions(client: TestClient) -> None:
    problem(client.get("/v1/approvals/apr_nope", headers=auth("ops")), 404, "not_found")
    problem(
        client.post(
            "/v1/approvals/apr_nope/decision", json={"decision": "approve"}, headers=auth("ops")
        ),
        404,
        "not_found",
    )
    approval_id = call(client, "bob", "t:send", to="x", text="y").json()["approval"]["id"]
    body = problem(
        client.post(
            f"/v1/approvals/{approval_id}/decision", json={"decision": "maybe"}, headers=auth("ops")
        ),
        422,
        "invalid_request",
    )
    assert body["errors"][0]["pointer"] == "/decision"


def test_a_gateway_without_approvals(tmp_path: Path) -> None:
    with (
        make_gateway(tmp_path, approver=None) as gateway,
        TestClient(make_app(gateway), client=LOCAL) as client,
    ):
        assert client.get("/v1/approvals", headers=auth("ops")).json() == {"approvals": []}
        assert client.get("/v1/grants", headers=auth("ops")).json() == {"grants": []}
        outcome = call(client, "bob", "t:send", to="x", text="y").json()
        assert outcome["code"] == "user_rejection"
        problem(client.get("/v1/approvals/apr_x", headers=auth("ops")), 404, "not_found")


# -- audit, alerts, diagnostics -----------------------------------------------------------------


@pytest.mark.slow
def test_the_audit_log_is_filtered_and_paged(client: TestClient, gateway: Gateway) -> None:
    for number in range(5):
        call(client, "bob", "t:add", a=number, b=1)
    call(client, "alice", "t:fail")
    call(client, "alice", "t:send", to="x", text="y")
    assert gateway.audit is not None and gateway.audit.flush(30)
    get = lambda **query: client.get("/v1/audit", params=query, headers=auth("ops")).json()  # noqa: E731
    everything = get()
    assert everything["enabled"] and everything["total"] == 7
    assert get(tool="t:add")["total"] == 5
    assert {r["agent"] for r in get(agent="alice")["records"]} == {"alice"}
    assert [r["tool_id"] for r in get(status="error")["records"]] == ["t:fail"]
    assert [r["tool_id"] for r in get(status="pending_approval")["records"]] == ["t:send"]
    assert get(code="tool_error")["total"] == 1

    first = get(tool="t:add", limit=2)
    assert (len(first["records"]), first["next_offset"]) == (2, 2)
    second = get(tool="t:add", limit=2, offset=first["next_offset"])
    last = get(tool="t:add", limit=2, offset=4)
    assert (len(last["records"]), last["next_offset"]) == (1, None)
    seen = [r["call_id"] for page in (first, second, last) for r in page["records"]]
    assert len(set(seen)) == 5
    # Newest first; since (inclusive) and until (exclusive), as Unix seconds or ISO 8601.
    times = [r["time"] for r in everything["records"]]
    assert times == sorted(times, reverse=True)
    oldest = times[-1]
    assert get(until=oldest)["total"] == 0
    assert get(since=oldest)["total"] == 7
    assert get(since="2000-01-01T00:00:00Z", until="2999-01-01T00:00:00")["total"] == 7

    problem(client.get("/v1/audit", headers=auth("bob")), 403, "forbidden")
    problem(
        client.get("/v1/audit", params={"limit": 0}, headers=auth("ops")), 422, "invalid_request"
    )
    problem(
        client.get("/v1/audit", params={"since": "yesterday"}, headers=auth("ops")),
        422,
        "invalid_request",
    )


def test_a_large_audit_log_is_counted_up_to_a_limit_and_paged_to_its_end(
    client: TestClient, gateway: Gateway
) -> None:
    # Counting every match of a log of millions is what made a page slow: past COUNT_LIMIT the
    # page says so (total_exact false) and next_offset alone says whether the pages go on.
    assert gateway.audit is not None
    now = time.time()
    for n in range(COUNT_LIMIT + 5):
        gateway.audit.observe(finished(tool_id="t:add", started_at=now - n, call_id=f"c{n}"))
    assert gateway.audit.flush(60)
    get = lambda **query: client.get("/v1/audit", params=query, headers=auth("ops")).json()  # noqa: E731
    first = get(limit=100)
    assert (first["total"], first["total_exact"], first["next_offset"]) == (COUNT_LIMIT, False, 100)
    counted_end = get(limit=100, offset=COUNT_LIMIT - 100)  # the pages go on past the count
    assert (len(counted_end["records"]), counted_end["next_offset"]) == (100, COUNT_LIMIT)
    last = get(limit=100, offset=COUNT_LIMIT)
    assert (len(last["records"]), last["next_offset"]) == (5, None)
    assert last["records"][-1]["call_id"] == f"c{COUNT_LIMIT + 4}"  # the oldest
    small = get(until=now - COUNT_LIMIT + 0.5, limit=100)  # 5 match: counted exactly
    assert (small["total"], small["total_exact"], small["next_offset"]) == (5, True, None)


@pytest.mark.slow
def test_alerts_and_diagnostics_are_for_operators(client: TestClient) -> None:
    alerts = client.get("/v1/alerts", headers=auth("ops")).json()["alerts"]
    assert [(a["source"], a["level"]) for a in alerts] == [("@pandorakit/search", "warning")]
    diagnostics = client.get("/v1/diagnostics", headers=auth("ops")).json()["diagnostics"]
    assert any("broken" in d["path"] and d["severity"] == "error" for d in diagnostics)
    problem(client.get("/v1/alerts", headers=auth("alice")), 403, "forbidden")
    problem(client.get("/v1/diagnostics", headers=auth("alice")), 403, "forbidden")


# -- connections --------------------------------------------------------------------------------


def test_connect_a_capability_and_its_secret_is_never_shown(client: TestClient) -> None:
    token = "ghp_secret-value-123456"
    [github] = client.get("/v1/connections", headers=auth("ops")).json()["connections"]
    assert (github["id"], github["connected"], github["missing"]) == ("github", False, ["token"])
    assert github["secrets"] == ["token"]
    assert call(client, "alice", "github:whoAmI").json()["code"] == "unavailable"

    connected = client.post(
        "/v1/connections/github", json={"values": {"token": token}}, headers=auth("ops")
    )
    assert connected.status_code == 200, connected.text
    assert connected.json()["connected"] is True
    assert token not in connected.text
    listing = client.get("/v1/connections", headers=auth("ops"))
    assert listing.json()["connections"][0]["connected"] is True
    assert token not in listing.text
    # Its tools work at once, and the guide reaches the agents.
    outcome = call(client, "alice", "github:whoAmI").json()
    assert outcome["status"] == "ok" and outcome["content"]["secret_names"] == ["token"]
    assert "Use GitHub tools" in client.get("/v1/me", headers=auth("alice")).json()["instructions"]

    disconnected = client.delete("/v1/connections/github", headers=auth("ops")).json()
    assert disconnected["connected"] is False and disconnected["missing"] == ["token"]
    assert call(client, "alice", "github:whoAmI").json()["code"] == "unavailable"


@pytest.mark.slow
def test_connections_refuse_what_the_manifest_does_not_declare(client: TestClient) -> None:
    problem(
        client.post("/v1/connections/github", json={"values": {"tokn": "x"}}, headers=auth("ops")),
        422,
        "invalid_arguments",
    )
    problem(
        client.post("/v1/connections/github", json={"values": {"token": ""}}, headers=auth("ops")),
        422,
        "invalid_arguments",
    )
    problem(
        client.post("/v1/connections/gitlab", json={"values": {}}, headers=auth("ops")),
        404,
        "not_found",
    )
    problem(
        client.post("/v1/connections/github", json={"values": {"token": "x"}}, headers=auth("bob")),
        403,
        "forbidden",
    )
    problem(client.get("/v1/connections", headers=auth("bob")), 403, "forbidden")
