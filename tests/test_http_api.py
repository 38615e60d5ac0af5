"""The HTTP API, endpoint by endpoint, through the real ASGI app (Starlette's TestClient, which
runs its lifespan: the gateway is started and closed as ``toolgate serve`` does it).

Agents: ``ops`` (operator), ``alice`` and ``bob``; see :mod:`http_api_support`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from http_api_support import (
    ALICE_KEY,
    LOCAL,
    RUNS,
    TOOLS,
    auth,
    call,
    make_app,
    make_gateway,
    problem,
)
from toolgate import Gateway, GatewaySettings, StateSettings
from toolgate.exporters import EXPORT_FORMATS, export_tools
from toolgate.serve.api import ApiLimits
from toolgate.serve.api.limits import RequestLimitsMiddleware
from toolgate.serve.auth.identity import AgentIdentity


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


# -- identity -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "requires an API key"),
        ({"Authorization": "Bearer tg_wrong"}, "not valid"),
        ({"Authorization": f"Basic {ALICE_KEY}"}, "Bearer <key>"),
    ],
)
def test_requests_without_a_known_key_get_401(
    client: TestClient, headers: dict[str, str], reason: str
) -> None:
    for path in ("/v1/tools", "/v1/export/openai", "/v1/approvals", "/v1/me"):
        body = problem(client.get(path, headers=headers), 401, "unauthenticated")
        assert reason in body["detail"]
    response = client.get("/v1/tools", headers=headers)
    assert response.headers["www-authenticate"].startswith("Bearer")
    body = problem(
        client.post("/v1/tools/t:add/call", json={"arguments": {"a": 1, "b": 2}}, headers=headers),
        401,
        "unauthenticated",
    )
    assert reason in body["detail"]
    assert RUNS == []


def test_me_names_the_agent_and_its_role(client: TestClient) -> None:
    assert client.get("/v1/me", headers=auth("ops")).json()["operator"] is True
    me = client.get("/v1/me", headers=auth("alice")).json()
    assert me["agent"] == "alice" and me["operator"] is False
    # The GitHub capability is not connected: agents are told to ask for it in Settings.
    assert "GitHub is not connected" in me["instructions"]


def test_healthz_needs_no_key(client: TestClient, gateway: Gateway) -> None:
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    assert health["tools"] == len(gateway.registry)
    assert health["audit"] == {"enabled": True, "healthy": True, "lost": 0, "pending": 0}
    assert health["state"] == {"shared": False, "database": None, "redis": None}


def test_without_keys_loopback_callers_are_the_default_operator(gateway: Gateway) -> None:
    identity = AgentIdentity()
    app = make_app(gateway, identity)
    with TestClient(app, base_url="http://127.0.0.1:8470", client=LOCAL) as local:
        assert local.get("/v1/me").json()["agent"] == "default"
        pending = local.post("/v1/tools/t:send/call", json={"arguments": {"to": "a", "text": "b"}})
        assert pending.status_code == 202
        approval_id = pending.json()["approval"]["id"]
        assert [a["id"] for a in local.get("/v1/approvals").json()["approvals"]] == [approval_id]
        # Everyone is "default": the API cannot tell the person from the agent, so it refuses.
        body = problem(
            local.post(f"/v1/approvals/{approval_id}/decision", json={"decision": "approve"}),
            403,
            "forbidden",
        )
        assert "web UI" in body["detail"] and "toolgate approvals approve" in body["detail"]
        # A page of another site, through the user's (local) browser, is refused.
        cross_site = local.post(
            "/v1/tools/t:add/call",
            json={"arguments": {"a": 1, "b": 2}},
            headers={"Origin": "https://evil.example"},
        )
        assert "other sites" in problem(cross_site, 401, "unauthenticated")["detail"]
        fetched = local.post(
            "/v1/tools/t:add/call",
            json={"arguments": {"a": 1, "b": 2}},
            headers={"Sec-Fetch-Site": "cross-site"},
        )
        assert "other sites" in problem(fetched, 401, "unauthenticated")["detail"]
    with TestClient(app, base_url="http://rebound.example:8470", client=LOCAL) as rebound:
        assert (
            "DNS-rebinding" in problem(rebound.get("/v1/tools"), 401, "unauthenticated")["detail"]
        )
        called = rebound.post("/v1/tools/t:add/call", json={"arguments": {"a": 1, "b": 2}})
        assert "DNS-rebinding" in problem(called, 401, "unauthenticated")["detail"]
    with TestClient(app, base_url="http://127.0.0.1:8470", client=("10.0.0.5", 1)) as remote:
        body = problem(remote.get("/v1/tools"), 401, "unauthenticated")
        assert "same machine" in body["detail"]
    assert RUNS == []


# -- tools --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["ops", "alice", "bob"])
def test_the_catalog_lists_exactly_what_the_agent_may_call(
    client: TestClient, gateway: Gateway, agent: str
) -> None:
    listed = {row["id"] for row in client.get("/v1/tools", headers=auth(agent)).json()["tools"]}
    assert listed == {tool.id for tool in gateway.list_tools(agent=agent)}
    # Listed <=> the tool exists for the agent (the arguments may still be wrong).
    for entry in gateway.entries():
        outcome = gateway.call_sync(entry.tool.id, {}, agent=agent)
        assert (outcome.code != "tool_not_found") == (entry.tool.id in listed), entry.tool.id
    assert ("t:payroll" in listed) == (agent != "bob")


def test_the_catalog_describes_each_tool(client: TestClient) -> None:
    rows = {
        row["id"]: row for row in client.get("/v1/tools", headers=auth("alice")).json()["tools"]
    }
    send = rows["t:send"]
    assert send["requires_approval"] is True
    assert send["side_effect"] == "external_write"
    assert send["source_format"] == "python"
    assert send["provider_name"] == "t__send"
    assert send["phase"] == "Ready"
    assert send["examples"] == ["tell Ada hi"]
    assert rows["t:add"]["requires_approval"] is False
    who = rows["github:whoAmI"]
    assert who["capability"] == "github" and who["available"] is False
    assert who["phase"] == "Unavailable" and "not connected" in who["unavailable_reason"]
    assert who["source_format"] == "capability"


def test_show_a_tool(client: TestClient) -> None:
    detail = client.get("/v1/tools/t:add", headers=auth("bob")).json()
    assert detail["input_schema"]["required"] == ["a", "b"]
    assert detail["hints"]["readOnlyHint"] is True
    assert detail["status"]["tool"] == "t:add"
    # The provider name works too.
    assert client.get("/v1/tools/t__add", headers=auth("bob")).json()["id"] == "t:add"
    body = problem(client.get("/v1/tools/t:ad", headers=auth("bob")), 404, "tool_not_found")
    assert body["suggestions"][0] == "t:add"
    assert "did you mean t:add" in body["detail"]
    # Suggestions name only tools the agent may call.
    body = problem(client.get("/v1/tools/t:payrol", headers=auth("bob")), 404, "tool_not_found")
    assert "t:payroll" not in body["suggestions"] and "t:payroll" not in body["detail"]
    alice = problem(client.get("/v1/tools/t:payrol", headers=auth("alice")), 404, "tool_not_found")
    assert alice["suggestions"][0] == "t:payroll"
    # A tool the agent may not call does not exist for it.
    problem(client.get("/v1/tools/t:payroll", headers=auth("bob")), 404, "tool_not_found")
    assert client.get("/v1/tools/t:payroll", headers=auth("alice")).status_code == 200


def test_call_a_tool(client: TestClient) -> None:
    response = call(client, "bob", "t:add", a=2, b=3)
    assert response.status_code == 200
    outcome = response.json()
    assert (outcome["status"], outcome["content"], outcome["text"]) == ("ok", 5, "5")
    assert RUNS == [{"tool": "add", "a": 2, "b": 3}]


@pytest.mark.parametrize(
    ("tool_id", "arguments", "code"),
    [
        ("t:add", {"a": "two"}, "invalid_arguments"),
        ("t:fail", {}, "tool_error"),
        ("t:nope", {}, "tool_not_found"),
        ("t:payroll", {}, "tool_not_found"),  # bob may not see it: it does not exist for him
        ("github:whoAmI", {}, "unavailable"),
    ],
)
def test_a_call_that_fails_is_an_outcome_not_an_http_error(
    client: TestClient, tool_id: str, arguments: dict[str, Any], code: str
) -> None:
    response = call(client, "bob", tool_id, **arguments)
    assert response.status_code == 200
    outcome = response.json()
    assert (outcome["status"], outcome["code"]) == ("error", code)
    assert outcome["message"] and outcome["text"].startswith(f"Error [{code}]")


def test_calls_answer_alike_on_the_fast_path_and_through_the_route(client: TestClient) -> None:
    # Well-formed calls are answered by the fast path; a JSON ``null`` body is valid for the
    # route (no options) but not for the fast path's parser, so it goes through FastAPI.
    fast = client.post("/v1/tools/t:fail/call", headers=auth("bob"))
    routed = client.post(
        "/v1/tools/t:fail/call",
        content=b"null",
        headers={**auth("bob"), "Content-Type": "application/json"},
    )
    for response in (fast, routed):
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
    ignore = {"call_id", "duration"}
    assert {k: v for k, v in fast.json().items() if k not in ignore} == {
        k: v for k, v in routed.json().items() if k not in ignore
    }
    pending = [
        client.post(
            "/v1/tools/t:send/call",
            content=json.dumps({"arguments": {"to": "a", "text": "b"}}).encode(),
            headers={**auth("bob"), "Content-Type": content_type},
        )
        for content_type in ("application/json", "application/json; charset=utf-8")
    ]
    assert [r.status_code for r in pending] == [202, 202]
    assert pending[0].headers["location"] == pending[1].headers["location"]
    # What the fast path declines gets the route's problems.
    problem(
        client.post("/v1/tools/t:add/call?verbose=1", json={}, headers=auth("bob")),
        422,
        "invalid_request",
    )
    problem(
        client.post(
            "/v1/tools/t:add/call",
            content=b"a=1",
            headers={**auth("bob"), "Content-Type": "application/x-www-form-urlencoded"},
        ),
        415,
        "invalid_request",
    )


@pytest.mark.slow
def test_a_call_times_out_within_its_own_timeout_not_the_request_timeout(
    gateway: Gateway,
) -> None:
    # The request timeout is far below the tool's 0.5 s: a call still gets its tool's timeout.
    app = make_app(gateway, limits=ApiLimits(request_timeout=0.05))
    with TestClient(app, client=LOCAL) as client:
        outcome = call(client, "bob", "t:sleepy").json()
    assert (outcome["status"], outcome["code"]) == ("error", "timeout")


def test_results_json_cannot_carry_are_still_json(client: TestClient) -> None:
    response = call(client, "bob", "t:odd_numbers")
    assert response.status_code == 200
    # Strict JSON on the wire (no NaN literals): JSON has no value for them, so null.
    assert response.json()["content"] == {
        "nan": None,
        "inf": None,
        "text": "<script>alert(1)</script>",
        "half": "a lone surrogate: \ud800",  # escaped as \ud800 in the JSON text
    }

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    json.loads(response.content, parse_constant=refuse)


def test_call_options_are_checked(client: TestClient, tmp_path: Path) -> None:
    body = problem(
        client.post("/v1/tools/t:add/call", json={"arguments": [1]}, headers=auth("bob")),
        422,
        "invalid_request",
    )
    assert body["errors"][0]["pointer"] == "/arguments"
    problem(
        client.post("/v1/tools/t:add/call", json={"argumnets": {}}, headers=auth("bob")),
        422,
        "invalid_request",
    )
    problem(
        client.post("/v1/tools/t:add/call", json={"workspace": "relative"}, headers=auth("bob")),
        422,
        "invalid_request",
    )
    missing = str(tmp_path / "missing")
    body = problem(
        client.post("/v1/tools/t:add/call", json={"workspace": missing}, headers=auth("bob")),
        422,
        "invalid_arguments",
    )
    assert missing in body["detail"]
    # A path the system will not even look at (too long) is no folder either, not a crash.
    too_long = "/" + "a" * 300
    problem(
        client.post("/v1/tools/t:add/call", json={"workspace": too_long}, headers=auth("bob")),
        422,
        "invalid_arguments",
    )
    # No body at all: no arguments.
    empty = client.post("/v1/tools/t:fail/call", headers=auth("bob")).json()
    assert empty["code"] == "tool_error"


@pytest.mark.parametrize("export_format", EXPORT_FORMATS)
def test_exports_hold_the_agents_tools(
    client: TestClient, gateway: Gateway, export_format: str
) -> None:
    for agent in ("alice", "bob"):
        response = client.get(f"/v1/export/{export_format}", headers=auth(agent))
        assert response.status_code == 200
        assert response.json() == export_tools(gateway.list_tools(agent=agent), export_format)
    problem(client.get("/v1/export/cohere", headers=auth("bob")), 404, "not_found")


def test_statuses_are_filtered_for_agents_and_complete_for_operators(
    client: TestClient, gateway: Gateway
) -> None:
    call(client, "bob", "t:add", a=1, b=1)
    bob = {row["tool"] for row in client.get("/v1/status", headers=auth("bob")).json()["tools"]}
    assert bob == {tool.id for tool in gateway.list_tools(agent="bob")}
    ops = client.get("/v1/status", headers=auth("ops")).json()["tools"]
    failed = [row for row in ops if row["phase"] == "Failed"]
    assert failed and "broken" in failed[0]["tool"]


# -- problems from the framework and the limits -------------------------------------------------


def test_unknown_paths_and_methods_are_problems(client: TestClient) -> None:
    problem(client.get("/v1/nothing-here", headers=auth("bob")), 404, "not_found")
    problem(client.get("/nothing", headers=auth("bob")), 404, "not_found")
    wrong = client.put("/v1/tools", headers=auth("bob"))
    problem(wrong, 405, "method_not_allowed")
    assert wrong.headers["allow"] == "GET"


@pytest.mark.slow
@pytest.mark.parametrize(
    "body",
    [b"{", b'{"arguments": {"a": 1,}}', b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000],
)
def test_bad_json_is_a_400_problem(client: TestClient, body: bytes) -> None:
    response = client.post(
        "/v1/tools/t:add/call",
        content=body,
        headers={**auth("bob"), "Content-Type": "application/json"},
    )
    problem(response, 400, "invalid_request")
    assert client.get("/healthz").status_code == 200


def test_bodies_over_the_limit_are_refused_before_parsing(gateway: Gateway) -> None:
    app = make_app(gateway, limits=ApiLimits(max_body_bytes=2048))
    with TestClient(app, client=LOCAL) as client:
        big = {"arguments": {"a": 1, "b": 2, "pad": "x" * 4096}}
        body = problem(
            client.post("/v1/tools/t:add/call", json=big, headers=auth("bob")),
            413,
            "payload_too_large",
        )
        assert "2,048 bytes" in body["detail"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while it arrives
            yield b'{"arguments": {"pad": "'
            for _ in range(10):
                yield b"x" * 512
            yield b'"}}'

        problem(
            client.post(
                "/v1/tools/t:add/call",
                content=chunks(),
                headers={**auth("bob"), "Content-Type": "application/json"},
            ),
            413,
            "payload_too_large",
        )
        assert call(client, "bob", "t:add", a=1, b=2).json()["content"] == 3
    assert RUNS == [{"tool": "add", "a": 1, "b": 2}]


def test_a_request_past_its_deadline_is_a_504_problem_and_is_cancelled() -> None:
    cancelled: list[bool] = []

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    limited = RequestLimitsMiddleware(slow, limits=ApiLimits(request_timeout=0.2))
    body = problem(TestClient(limited).get("/anything"), 504, "timeout")
    assert "0.2 seconds" in body["detail"]
    assert cancelled == [True]


@pytest.mark.slow
def test_the_retry_that_runs_an_approved_call_gets_the_time_its_tool_needs(
    gateway: Gateway,
) -> None:
    # Deciding only records the decision; the agent's retry runs the approved call inside its
    # call request: it gets its tool's timeout (plus a margin) rather than the shorter request
    # timeout.
    # The deploy outlasts the request timeout; the timeout leaves room for the other requests
    # on a loaded machine (a /healthz once took over 50 ms here).
    app = make_app(gateway, limits=ApiLimits(request_timeout=0.5))
    with TestClient(app, client=LOCAL) as client:
        approval_id = call(client, "bob", "t:deploy", seconds=1.5).json()["approval"]["id"]
        decided = client.post(
            f"/v1/approvals/{approval_id}/decision",
            json={"decision": "approve"},
            headers=auth("ops"),
        )
        assert decided.status_code == 200, decided.text
        assert decided.json()["outcome"] is None  # nothing ran in the decision's request
        assert decided.json()["approval"]["status"] == "approved"
        retried = call(client, "bob", "t:deploy", seconds=1.5)
        assert retried.status_code == 200, retried.text
        assert retried.json()["content"] == "deployed"
        assert retried.json()["metadata"]["approval"] == {"id": approval_id, "decision": "approve"}
        assert client.get("/healthz").json()["status"] == "ok"


class _BrokenGateway(Gateway):
    def status(self, tool_id: str) -> Any:
        raise RuntimeError("boom")


def test_a_bug_is_a_500_problem_and_the_server_keeps_serving(tmp_path: Path) -> None:
    gateway = _BrokenGateway(
        GatewaySettings(state=StateSettings(path=tmp_path / "s.db")), approver="queue"
    )
    gateway.add(TOOLS)
    with TestClient(make_app(gateway), client=LOCAL, raise_server_exceptions=False) as client:
        body = problem(client.get("/v1/status", headers=auth("ops")), 500, "crashed")
        assert "boom" not in body["detail"]  # internals stay in the log
        assert call(client, "bob", "t:add", a=1, b=1).json()["content"] == 2


class _FailingOnceGateway(Gateway):
    """``call`` fails once with a bug of the gateway (not of the tool)."""

    failed = False

    async def call(self, *args: Any, **kwargs: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("boom in the call path")
        return await super().call(*args, **kwargs)


def test_a_bug_in_the_fast_call_path_is_a_500_problem_and_the_next_call_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = _FailingOnceGateway(
        GatewaySettings(state=StateSettings(path=tmp_path / "s.db")), approver="queue"
    )
    gateway.add(TOOLS)
    with TestClient(make_app(gateway), client=LOCAL, raise_server_exceptions=False) as client:
        body = problem(call(client, "bob", "t:add", a=1, b=1), 500, "crashed")
        assert "boom" not in body["detail"]  # internals stay in the log
        assert "boom in the call path" in caplog.text
        assert call(client, "bob", "t:add", a=1, b=1).json()["content"] == 2
