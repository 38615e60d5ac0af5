"""``toolgate.Client`` against a real ``toolgate serve`` (a subprocess, one per module): the
remote gateway the framework adapters use, with the same behaviour as the in-process one."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest

from doc_blocks import doc_block
from integrations_served import ServedToolgate, serve_demo, served_toolgate
from integrations_support import approval_gateway
from serve_support import TOOLGATE, serving
from toolgate import CallStatus, Client, ErrorCode, ToolgateError
from toolgate.client import (
    ApproverKeyRequiredError,
    GatewayUnreachableError,
    RemoteAuthError,
    RemoteConflictError,
    RemoteError,
    RemoteNotFoundError,
)

pytestmark = pytest.mark.slow

__all__ = ["served_toolgate"]  # the fixture, imported for pytest


@pytest.fixture
async def client(served_toolgate: ServedToolgate) -> AsyncIterator[Client]:
    async with Client(
        served_toolgate.url,
        key=served_toolgate.agent_key,
        approver_key=served_toolgate.operator_key,
    ) as remote:
        yield remote


def _sent(served: ServedToolgate, marker: str) -> list[str]:
    return [line for line in served.sent_lines() if marker in line]


async def test_a_pending_call_approved_with_the_cli_runs_once_on_retry(
    served_toolgate: ServedToolgate, client: Client
) -> None:
    assert client.agent == "planner"
    arguments = {"to": "ada@example.com", "body": "hello from the pending test"}
    first = await client.call(
        "demo:send_email", arguments, tool_call_id="c1", idempotency_key="s1:c1"
    )
    assert first.status is CallStatus.PENDING_APPROVAL
    assert first.approval is not None and first.approval.id.startswith("apr_")
    shown = await client.approval(first.approval.id)  # what the API says of the request
    assert (first.approval.title, first.approval.risk) == (shown.title, shown.risk)
    assert first.approval.facts == shown.facts
    assert first.approval.created_at == shown.created_at
    assert (first.approval.agent, first.approval.arguments) == ("planner", arguments)
    assert _sent(served_toolgate, "pending test") == []  # nothing ran while it waits

    served_toolgate.approve(first.approval.id)
    assert _sent(served_toolgate, "pending test") == []  # the decision ran nothing

    retried = await client.call(
        "demo:send_email", arguments, tool_call_id="c1", idempotency_key="s1:c1"
    )
    assert retried.status is CallStatus.OK, retried.text
    assert retried.text == "sent to ada@example.com"
    assert _sent(served_toolgate, "pending test") == ["ada@example.com|hello from the pending test"]
    again = await client.call(
        "demo:send_email", arguments, tool_call_id="c1", idempotency_key="s1:c1"
    )
    assert again.status is CallStatus.OK
    assert again.metadata["idempotency"]["replayed"] is True
    assert len(_sent(served_toolgate, "pending test")) == 1  # the body ran once

    decided = await client.approval(first.approval.id)
    assert decided.agent == "planner"
    assert decided.decided_by == "alice"
    records = served_toolgate.audit(
        tool="demo:send_email", agent="planner", status="ok", wait_for=2
    )
    ran = [r for r in records if r["approval_id"] == first.approval.id]
    assert [r["approval_decision"] for r in ran] == ["approve"]  # the run, as planner


async def test_the_list_has_the_schemas_as_declared_and_only_the_agents_tools(
    served_toolgate: ServedToolgate, client: Client, tmp_path: Path
) -> None:
    remote = await client.list_tools()
    with approval_gateway(tmp_path) as setup:
        local = await setup.tools.list_tools()

    def facts(specs: Any) -> list[tuple[Any, ...]]:
        return [(s.id, s.name, s.description, dict(s.parameters), s.side_effect) for s in specs]

    assert facts(remote) == facts(local)  # the same specs as in-process, schemas as declared
    assert [s.id for s in remote] == [
        "demo:charge",
        "demo:fail",
        "demo:lookup",
        "demo:note",
        "demo:report",
        "demo:send_email",
    ]
    email = next(s for s in remote if s.id == "demo:send_email")
    assert email.name == "demo__send_email"
    assert email.parameters["required"] == ["to", "body"]
    assert email.annotations["requires_approval"] is True

    async with Client(served_toolgate.url, key=served_toolgate.reader_key) as reader:
        assert reader.agent == "reader"
        assert [s.id for s in await reader.list_tools()] == [
            "demo:fail",
            "demo:lookup",
            "demo:report",
        ]
        hidden = await reader.call("demo:send_email", {"to": "x@example.com", "body": "hidden"})
        assert (hidden.status, hidden.code) == (CallStatus.ERROR, ErrorCode.TOOL_NOT_FOUND)
        assert await reader.approval_needed("demo:send_email") is False
    assert _sent(served_toolgate, "hidden") == []


def test_the_api_routes_the_client_needs(served_toolgate: ServedToolgate) -> None:
    def get(path: str, key: str, **params: str) -> httpx2.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx2.get(served_toolgate.url + path, params=params, headers=headers, timeout=10)

    plain = get("/v1/tools", served_toolgate.agent_key).json()["tools"]
    assert "input_schema" not in plain[0]  # the catalog's rows as before
    rows = get("/v1/tools", served_toolgate.agent_key, schemas="true").json()["tools"]
    lookup = next(row for row in rows if row["id"] == "demo:lookup")
    assert lookup["input_schema"]["properties"] == {"city": {"type": "string"}}
    assert lookup["timeout"] > 0

    asked = get("/v1/tools/demo:send_email/approval", served_toolgate.agent_key)
    assert asked.json() == {"tool": "demo:send_email", "approval_needed": True}
    hidden = get("/v1/tools/demo:send_email/approval", served_toolgate.reader_key)
    assert (hidden.status_code, hidden.json()["code"]) == (404, "tool_not_found")
    assert hidden.headers["content-type"] == "application/problem+json"
    unknown = get("/v1/tools/demo:send_email/approval", served_toolgate.agent_key, extra="1")
    assert unknown.status_code == 422  # an undeclared query parameter is refused


async def test_search_finds_tools_with_their_schemas(client: Client) -> None:
    found = await client.search_tools("send an email to someone", limit=3)
    assert found[0].id == "demo:send_email"
    assert found[0].side_effect == "communication"
    assert set(found[0].parameters["properties"]) == {"to", "body"}
    assert len(found) <= 3


@pytest.fixture(scope="module")
def progressive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedToolgate]:
    config = 'search:\n  progressive: true\n  core: ["demo:lookup"]\n'
    with serve_demo(tmp_path_factory.mktemp("progressive"), extra_config=config) as served:
        yield served


async def test_a_search_widens_only_its_own_sessions_list(progressive: ServedToolgate) -> None:
    async with Client(progressive.url, key=progressive.agent_key) as remote:
        before = {s.id for s in await remote.list_tools(session_id="s1")}
        assert "demo:lookup" in before and "demo:send_email" not in before
        found = await remote.search_tools("send an email", session_id="s1", limit=1)
        assert [s.id for s in found] == ["demo:send_email"]
        after = {s.id for s in await remote.list_tools(session_id="s1")}
        assert after == before | {"demo:send_email"}
        # Another session starts from the core set; without a session, the whole catalog.
        assert {s.id for s in await remote.list_tools(session_id="s2")} == before
        assert "demo:charge" in {s.id for s in await remote.list_tools()}


async def test_outcomes_ok_error_and_overflow_come_back_as_in_process(client: Client) -> None:
    ok = await client.call("demo:lookup", {"city": "Cairo"})
    assert (ok.status, ok.text, ok.code) == (CallStatus.OK, "sunny in Cairo", None)

    failed = await client.call("demo:fail", {})
    assert (failed.status, failed.code) == (CallStatus.ERROR, ErrorCode.TOOL_ERROR)
    assert "the demo tool failed on purpose" in failed.text
    assert failed.text.startswith("Error [tool_error]: ")

    invalid = await client.call("demo:lookup", {"town": "Cairo"})
    assert invalid.code is ErrorCode.INVALID_ARGUMENTS

    big = await client.call("demo:report", {"rows": 300})
    assert big.status is CallStatus.OK
    assert big.overflow is not None and big.overflow.original_size > 50_000
    assert big.text.startswith('{"text": "00000 ')  # the preview
    assert big.overflow.path in big.text  # and the note saying where the rest is
    assert len(big.text) < big.overflow.original_size
    assert big.visualization is not None and big.visualization["type"] == "table"
    assert "_visualization" not in big.text and '"table"' not in big.text  # people only


async def test_an_unknown_tool_is_an_outcome_with_suggestions(client: Client) -> None:
    outcome = await client.call("demo:lookpu", {"city": "Cairo"})
    assert (outcome.status, outcome.code) == (CallStatus.ERROR, ErrorCode.TOOL_NOT_FOUND)
    assert "demo:lookup" in outcome.text  # did you mean


async def test_a_rate_limit_is_an_outcome(served_toolgate: ServedToolgate, client: Client) -> None:
    outcomes = [await client.call("demo:note", {"text": f"rate {i}"}) for i in range(3)]
    assert [o.status for o in outcomes[:2]] == [CallStatus.OK, CallStatus.OK]
    assert (outcomes[2].status, outcomes[2].code) == (CallStatus.ERROR, ErrorCode.RATE_LIMITED)
    assert _sent(served_toolgate, "note|rate") == ["note|rate 0", "note|rate 1"]


async def test_a_denial_comes_back_as_user_rejection(
    served_toolgate: ServedToolgate, client: Client
) -> None:
    arguments = {"amount": 41}
    pending = await client.call("demo:charge", arguments, tool_call_id="deny-1")
    assert pending.approval is not None
    served_toolgate.deny(pending.approval.id, message="not this month")
    refused = await client.call("demo:charge", arguments, tool_call_id="deny-1")
    assert (refused.status, refused.code) == (CallStatus.ERROR, ErrorCode.USER_REJECTION)
    assert "not this month" in refused.text
    assert _sent(served_toolgate, "charge|41") == []
    assert (await client.approval(pending.approval.id)).decision_message == "not this month"


async def test_always_allow_stops_asking_in_that_workspace(
    served_toolgate: ServedToolgate, client: Client, tmp_path: Path
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    assert await client.approval_needed("demo:charge", workspace=str(here)) is True
    pending = await client.call("demo:charge", {"amount": 7}, workspace=str(here))
    assert pending.approval is not None
    decided = await client.decide(pending.approval.id, "always", by="alice")
    assert (decided.status, decided.decided_by) == ("approved", "ops")  # the key's operator
    assert await client.approval_needed("demo:charge", workspace=str(here)) is False
    assert await client.approval_needed("demo:charge", workspace=str(elsewhere)) is True
    assert await client.approval_needed("demo:lookup") is False  # read-only: never asks

    ran = await client.call("demo:charge", {"amount": 8}, workspace=str(here))
    assert ran.status is CallStatus.OK, ran.text
    assert _sent(served_toolgate, "charge|8") == ["charge|8"]
    with pytest.raises(RemoteConflictError, match="not pending"):
        await client.decide(pending.approval.id, "deny", by="alice")


async def test_request_approval_makes_the_calls_request_without_running_it(
    served_toolgate: ServedToolgate, client: Client, tmp_path: Path
) -> None:
    arguments = {"to": "eve@example.com", "body": "asked, not run"}
    asked = await client.request_approval(
        "demo:send_email", arguments, session_id="s-ask", tool_call_id="ask-1"
    )
    assert asked is not None and asked.status == "pending"
    assert (asked.tool_id, asked.agent, asked.arguments) == (
        "demo:send_email",
        "planner",
        arguments,
    )
    assert asked.title and asked.facts  # what a person is shown, as GET /v1/approvals/{id}
    assert (await client.approval(asked.id)).status == "pending"  # in the queue for people
    again = await client.request_approval(
        "demo:send_email", arguments, session_id="s-ask", tool_call_id="ask-1"
    )
    assert again is not None and again.id == asked.id
    call = await client.call("demo:send_email", arguments, session_id="s-ask", tool_call_id="ask-1")
    assert call.status is CallStatus.PENDING_APPROVAL
    assert call.approval is not None and call.approval.id == asked.id  # the call attaches
    served_toolgate.approve(asked.id)
    decided = await client.request_approval(
        "demo:send_email", arguments, session_id="s-ask", tool_call_id="ask-1"
    )
    # Shown as it stands, never taken: the call takes it and runs once.
    assert decided is not None and (decided.id, decided.status) == (asked.id, "approved")
    assert _sent(served_toolgate, "asked, not run") == []
    ran = await client.call(
        "demo:send_email",
        arguments,
        session_id="s-ask",
        tool_call_id="ask-1",
        idempotency_key="s-ask:ask-1",
    )
    assert ran.status is CallStatus.OK, ran.text
    assert _sent(served_toolgate, "asked, not run") == ["eve@example.com|asked, not run"]
    # It ran under that key: the call would replay it, so nobody is asked again.
    replays = await client.request_approval(
        "demo:send_email",
        arguments,
        session_id="s-ask",
        tool_call_id="ask-1",
        idempotency_key="s-ask:ask-1",
    )
    assert replays is None


async def test_request_approval_is_none_when_nobody_would_be_asked(
    served_toolgate: ServedToolgate, client: Client, tmp_path: Path
) -> None:
    assert await client.request_approval("demo:lookup", {"city": "Oslo"}) is None  # read-only
    assert await client.request_approval("demo:charge", {"amount": "many"}) is None  # invalid
    here = tmp_path / "granted"
    here.mkdir()
    first = await client.request_approval(
        "demo:charge", {"amount": 301}, workspace=str(here), tool_call_id="g-1"
    )
    assert first is not None
    served_toolgate.decide(first.id, "always")
    # A grant covers the tool in that workspace now: nobody is asked, and nothing ran.
    granted = await client.request_approval(
        "demo:charge", {"amount": 302}, workspace=str(here), tool_call_id="g-2"
    )
    assert granted is None
    assert _sent(served_toolgate, "charge|30") == []

    async with Client(served_toolgate.url, key=served_toolgate.reader_key) as reader:
        # A tool the reader may not see: the 404 of every tool route, None as in-process.
        email = {"to": "x@example.com", "body": "hidden ask"}
        assert await reader.request_approval("demo:send_email", email) is None
    answer = httpx2.post(
        f"{served_toolgate.url}/v1/tools/demo:send_email/approval",
        json={"arguments": email},
        headers={"Authorization": f"Bearer {served_toolgate.reader_key}"},
        timeout=10,
    )
    assert (answer.status_code, answer.json()["code"]) == (404, "tool_not_found")
    assert answer.headers["content-type"] == "application/problem+json"
    assert _sent(served_toolgate, "hidden ask") == []


def test_the_approval_route_takes_a_call_body_only(served_toolgate: ServedToolgate) -> None:
    def post(path: str, content: bytes) -> httpx2.Response:
        headers = {
            "Authorization": f"Bearer {served_toolgate.agent_key}",
            "Content-Type": "application/json",
        }
        return httpx2.post(served_toolgate.url + path, content=content, headers=headers, timeout=10)

    path = "/v1/tools/demo:send_email/approval"
    bare = post(path, b'{"to": "ann@example.com", "body": "bare"}')
    assert bare.status_code == 422
    assert 'put them under "arguments"' in bare.json()["detail"]  # as the call route says
    duplicate = post(path, b'{"arguments": {}, "arguments": {"to": "x"}}')
    assert duplicate.status_code == 400  # the gateway's strict JSON, as for a call
    relative = post(path, b'{"arguments": {}, "workspace": "relative/dir"}')
    assert relative.status_code == 422
    missing = post(path, b'{"arguments": {}, "workspace": "/no/such/folder/at/all"}')
    assert missing.status_code == 422 and "no such folder" in missing.json()["detail"]
    read_only = post("/v1/tools/demo:lookup/approval", b'{"arguments": {"city": "Oslo"}}')
    assert read_only.json() == {"tool": "demo:lookup", "approval": None}
    assert _sent(served_toolgate, "bare") == []


async def test_an_idempotency_key_replays_the_first_outcome(
    served_toolgate: ServedToolgate, client: Client
) -> None:
    arguments = {"to": "bob@example.com", "body": "idempotent"}
    pending = await client.call("demo:send_email", arguments, idempotency_key="k-1")
    assert pending.approval is not None
    await client.decide(pending.approval.id, "approve", by="alice")
    first = await client.call("demo:send_email", arguments, idempotency_key="k-1")
    replayed = await client.call("demo:send_email", arguments, idempotency_key="k-1")
    assert first.status is replayed.status is CallStatus.OK
    assert replayed.metadata["idempotency"]["replayed"] is True
    assert replayed.text == first.text
    assert _sent(served_toolgate, "idempotent") == ["bob@example.com|idempotent"]


async def test_deciding_needs_an_operator_key(served_toolgate: ServedToolgate) -> None:
    async with Client(served_toolgate.url, key=served_toolgate.agent_key) as agent_only:
        pending = await agent_only.call("demo:charge", {"amount": 99}, tool_call_id="nokey")
        assert pending.approval is not None
        with pytest.raises(ApproverKeyRequiredError) as raised:
            await agent_only.decide(pending.approval.id, "approve", by="alice")
        message = str(raised.value)
        assert "approver_key=" in message
        assert f"toolgate approvals approve {pending.approval.id}" in message
    # The agent's own key as the approver: the API refuses (operators only).
    async with Client(
        served_toolgate.url, key=served_toolgate.agent_key, approver_key=served_toolgate.agent_key
    ) as self_approving:
        with pytest.raises(RemoteAuthError) as refused:
            await self_approving.decide(pending.approval.id, "approve", by="planner")
        assert refused.value.status == 403
    assert (await self_approving.approval(pending.approval.id)).status == "pending"


async def test_a_wrong_key_is_a_typed_authentication_error(
    served_toolgate: ServedToolgate,
) -> None:
    remote = Client(served_toolgate.url, key="tg_not-a-key-of-this-server-000000000000000")
    try:
        with pytest.raises(RemoteAuthError) as raised:
            await remote.list_tools()
        assert raised.value.status == 401
        assert raised.value.problem_code == "unauthenticated"
        assert str(raised.value) == raised.value.problem["detail"]
    finally:
        await remote.aclose()
    with pytest.raises(RemoteNotFoundError):
        async with Client(served_toolgate.url, key=served_toolgate.reader_key) as reader:
            await reader.approval("apr_0000000000000000")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_a_server_that_is_down_is_a_clear_error_naming_the_url() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    remote = Client(url, key="tg_whatever")
    with pytest.raises(
        GatewayUnreachableError, match=f"cannot reach the toolgate gateway at {url}"
    ):
        await remote.call("demo:lookup", {"city": "Cairo"})
    with pytest.raises(GatewayUnreachableError, match=url):
        _ = remote.agent
    await remote.aclose()


@pytest.mark.parametrize(
    "tool_id",
    [
        "..",
        "../../approvals",
        "demo:lookup/../../me",
        "demo:lookup?city=Cairo",
        "demo:lookup#fragment",
        "demo:look up",
        "%2e%2e/%2e%2e/me",
        "demo:lookup/call",
    ],
)
async def test_hostile_tool_ids_stay_inside_their_route(client: Client, tool_id: str) -> None:
    outcome = await client.call(tool_id, {"city": "Cairo"})
    # The server took the whole text as the tool's id: nothing else was reached.
    assert (outcome.status, outcome.code, outcome.tool_id) == (
        CallStatus.ERROR,
        ErrorCode.TOOL_NOT_FOUND,
        tool_id,
    )
    assert await client.approval_needed(tool_id) is False
    assert await client.request_approval(tool_id, {"city": "Cairo"}) is None
    with pytest.raises(RemoteNotFoundError):
        await client.approval(tool_id)


class _Redirect(BaseHTTPRequestHandler):
    """Answers every request with a redirect to :attr:`target`; records what it was sent."""

    target = ""
    seen: list[dict[str, str]] = []  # noqa: RUF012 - shared by the test's two servers

    def do_GET(self) -> None:
        _Redirect.seen.append({"path": self.path, **dict(self.headers)})
        if self.target:
            self.send_response(307)
            self.send_header("Location", self.target)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


async def test_keys_never_follow_a_redirect_to_another_origin() -> None:
    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), type("Elsewhere", (_Redirect,), {}))
    redirecting = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        type("Here", (_Redirect,), {"target": f"http://127.0.0.1:{elsewhere.server_port}/x"}),
    )
    _Redirect.seen = []
    for server in (elsewhere, redirecting):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        remote = Client(f"http://127.0.0.1:{redirecting.server_port}", key="tg_secret-key")
        with pytest.raises(RemoteError, match="redirect"):
            await remote.connect()
        await remote.aclose()
        assert [seen["path"] for seen in _Redirect.seen] == ["/v1/me"]  # only the one asked
    finally:
        for server in (elsewhere, redirecting):
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize(
    "url",
    [
        "ftp://127.0.0.1/",
        "file:///etc/passwd",
        "127.0.0.1:8470",
        "http://user:pw@127.0.0.1:8470",
        "http://127.0.0.1:8470/?x=1",
        "http:///nohost",
    ],
)
def test_only_an_http_url_without_credentials_is_accepted(url: str) -> None:
    with pytest.raises(ToolgateError):
        Client(url)


def test_the_repr_never_shows_a_key() -> None:
    remote = Client("http://127.0.0.1:8470/", key="tg_agent-secret", approver_key="tg_ops-secret")
    assert repr(remote) == "Client('http://127.0.0.1:8470')"
    assert "secret" not in repr(remote) and "secret" not in str(vars(remote).get("url"))


def test_the_guides_example_runs_against_a_real_server(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(doc_block("client:tools.py"))
    (tmp_path / "toolgate.yaml").write_text(doc_block("client:toolgate.yaml"))
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}
    commands = doc_block("client:commands").splitlines()
    assert commands[-2:] == [
        "toolgate serve --port 8470 &",
        "export TOOLGATE_URL=http://127.0.0.1:8470",
    ]
    for line in commands[:-2]:  # the keys, as the guide makes them
        match = re.fullmatch(r"export (\w+)=\$\(toolgate agents add (\w+)\)", line)
        assert match, line
        added = subprocess.run(
            [TOOLGATE, "agents", "add", match[2]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        env[match[1]] = added.stdout.strip()
    with serving(tmp_path, env) as (url, _pid):
        ran = subprocess.run(
            [sys.executable, "-c", doc_block("client:example.py")],
            env={**env, "TOOLGATE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:4] == [
        "calling as planner",
        "demo__lookup ['city']",
        "demo__send_email ['body', 'to']",
        "ok sunny in Cairo",
    ]
    assert lines[4].startswith("waiting for apr_")
    assert lines[5:] == ["ok sent to ada@example.com"]


def test_one_client_serves_one_event_loop_after_another(served_toolgate: ServedToolgate) -> None:
    # As a framework's synchronous entry point uses it: asyncio.run for each call.
    remote = served_toolgate.client()
    assert remote.agent == "planner"  # asked outside any event loop
    for city in ("Oslo", "Lima"):
        outcome = asyncio.run(remote.call("demo:lookup", {"city": city}))
        assert outcome.text == f"sunny in {city}"
    asyncio.run(remote.aclose())


def test_import_toolgate_loads_no_http_client() -> None:
    probe = (
        "import sys, toolgate\n"
        "assert 'httpx2' not in sys.modules and 'toolgate.client' not in sys.modules\n"
        "from toolgate import Client\n"
        "assert 'Client' in toolgate.__all__ and 'Client' in dir(toolgate)\n"
        "assert Client.__module__.startswith('toolgate.client') and 'httpx2' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, timeout=60)
