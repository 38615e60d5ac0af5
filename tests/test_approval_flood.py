"""One agent cannot flood a person's approval inbox (issue 24).

An agent calling a tool that needs approval in a loop, with new arguments each time, gets a
request for the first calls only — up to ``approval.max_pending_per_tool`` for one tool and
``approval.max_pending_per_agent`` in all — and ``rate_limited`` for the rest, with a message
saying how many of its requests already wait; no request is created for them. Another agent is
not affected, a repeated call attaches to its waiting request, and once the person decides some,
new ones are accepted again. Through the ``Gateway`` API and through ``toolgate serve`` (HTTP and
the real CLI), on the embedded SQLite state and on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from gateway_support import gateway_with
from postgres_support import scratch_database
from serve_support import TOOLGATE, serving
from toolgate import tool
from toolgate.errors import ErrorCode
from toolgate.model import CallStatus

pytestmark = pytest.mark.slow


@tool(namespace="chat", effect="external_write")
def send(text: str) -> str:
    """Send a message."""
    return f"sent {text}"


@tool(namespace="chat", effect="external_write")
def post(text: str) -> str:
    """Post a message."""
    return f"posted {text}"


async def test_one_agent_flooding_a_tool_is_rate_limited_without_new_requests(
    tmp_path: Path,
) -> None:
    with gateway_with(
        approver="queue",
        state_path=tmp_path / "state.db",
        approval_max_pending_per_tool=3,
        approval_max_pending_per_agent=5,
    ) as gateway:
        gateway.add(send)
        gateway.add(post)
        assert gateway.approvals is not None
        outcomes = [
            await gateway.call("chat:send", {"text": f"m{i}"}, agent="looper") for i in range(8)
        ]
        assert [o.status for o in outcomes[:3]] == [CallStatus.PENDING_APPROVAL] * 3
        for refused in outcomes[3:]:
            assert refused.code is ErrorCode.RATE_LIMITED, refused.message
            assert refused.approval is None
        message = outcomes[3].message or ""
        assert "Agent 'looper' already has 3 requests for tool chat:send waiting" in message
        assert "the limit is 3" in message
        assert "Wait until the person has decided them" in message
        assert "approval.max_pending_per_tool" in message
        # Only the first three reached the person's inbox.
        assert len(gateway.approvals.pending()) == 3

        # A retry of a waiting call is not a new request: it attaches, even at the limit.
        again = await gateway.call("chat:send", {"text": "m1"}, agent="looper")
        assert again.status is CallStatus.PENDING_APPROVAL, again.message
        assert again.approval is not None and outcomes[1].approval is not None
        assert again.approval.id == outcomes[1].approval.id

        # Another agent is not affected.
        other = await gateway.call("chat:send", {"text": "m0"}, agent="careful")
        assert other.status is CallStatus.PENDING_APPROVAL, other.message

        # The per-agent limit counts every tool: two more for another tool, then it is full.
        posts = [
            await gateway.call("chat:post", {"text": f"p{i}"}, agent="looper") for i in range(3)
        ]
        assert [p.status for p in posts[:2]] == [CallStatus.PENDING_APPROVAL] * 2
        assert posts[2].code is ErrorCode.RATE_LIMITED
        assert "Agent 'looper' already has 5 requests waiting" in (posts[2].message or "")
        assert "approval.max_pending_per_agent" in (posts[2].message or "")

        # The person decides two of the agent's requests: it may ask for two more.
        first, second = (o.approval for o in outcomes[:2])
        assert first is not None and second is not None
        gateway.approvals.decide(first.id, "deny", by="person")
        gateway.approvals.decide(second.id, "approve", by="person")
        accepted = await gateway.call("chat:send", {"text": "m8"}, agent="looper")
        assert accepted.status is CallStatus.PENDING_APPROVAL, accepted.message
        accepted = await gateway.call("chat:post", {"text": "p8"}, agent="looper")
        assert accepted.status is CallStatus.PENDING_APPROVAL, accepted.message
        refused = await gateway.call("chat:post", {"text": "p9"}, agent="looper")
        assert refused.code is ErrorCode.RATE_LIMITED, refused.message


async def test_the_default_limits_hold_a_loop_of_a_hundred_calls(tmp_path: Path) -> None:
    with gateway_with(approver="queue", state_path=tmp_path / "state.db") as gateway:
        gateway.add(send)
        assert gateway.approvals is not None
        codes = [
            (await gateway.call("chat:send", {"text": f"m{i}"}, agent="looper")).code
            for i in range(100)
        ]
        assert codes[:10] == [None] * 10
        assert codes[10:] == [ErrorCode.RATE_LIMITED] * 90
        assert len(gateway.approvals.pending()) == 10


@pytest.mark.parametrize("state", ["sqlite", "postgresql"])
def test_a_flood_over_http_is_rate_limited_and_the_inbox_stays_usable(
    tmp_path: Path, state: str
) -> None:
    with contextlib.ExitStack() as stack:
        url = None if state == "sqlite" else stack.enter_context(scratch_database())
        _flood_over_http(tmp_path, url)


def _flood_over_http(tmp_path: Path, database: str | None) -> None:
    (tmp_path / "tools.py").write_text(
        "from toolgate import tool\n\n"
        "@tool(effect='external_write')\n"
        "def send(text: str) -> str:\n"
        '    """Send a message."""\n'
        "    return f'sent {text}'\n"
    )
    state = "" if database is None else f"state: {json.dumps(database)}\n"
    (tmp_path / "toolgate.yaml").write_text(
        "python:\n  - ./tools.py\napproval:\n  max_pending_per_tool: 4\n" + state
    )
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TOOLGATE, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    if database is not None:  # a new shared database gets its tables first
        upgraded = cli("db", "upgrade")
        assert upgraded.returncode == 0, upgraded.stderr

    with serving(tmp_path, env) as (url, _pid), httpx.Client(base_url=url, timeout=30) as http:

        def call(text: str) -> dict[str, object]:
            answer = http.post("/v1/tools/tools:send/call", json={"arguments": {"text": text}})
            body: dict[str, object] = answer.json()
            return body

        answers = [call(f"m{i}") for i in range(10)]
        assert [a["status"] for a in answers[:4]] == ["pending_approval"] * 4, answers[:4]
        for refused in answers[4:]:
            assert refused["status"] == "error" and refused["code"] == "rate_limited", refused
        assert "already has 4 requests for tool tools:send waiting" in str(answers[4]["message"])
        # The same call again attaches to its request.
        again = call("m2")
        assert again["status"] == "pending_approval", again
        assert again["approval"]["id"] == answers[2]["approval"]["id"]  # type: ignore[index]
        # The person's inbox holds the four, and deciding one there lets one more in.
        listed = cli("approvals", "list")
        assert listed.returncode == 0, listed.stderr
        ids = [a["approval"]["id"] for a in answers[:4]]  # type: ignore[index]
        assert all(request_id in listed.stdout for request_id in ids), listed.stdout
        denied = cli("approvals", "deny", ids[0])
        assert denied.returncode == 0, denied.stderr
        assert call("m10")["status"] == "pending_approval"
        assert call("m11")["code"] == "rate_limited"


async def test_a_burst_at_once_creates_no_more_requests_than_the_limit(tmp_path: Path) -> None:
    """Found by the review: 200 calls at once all passed a count made before their requests
    existed. The count is made again with the creation, under a lock."""
    import asyncio

    with gateway_with(
        approver="queue", state_path=tmp_path / "state.db", approval_max_pending_per_tool=5
    ) as gateway:
        gateway.add(send)
        assert gateway.approvals is not None
        outcomes = await asyncio.gather(
            *(gateway.call("chat:send", {"text": f"m{i}"}, agent="looper") for i in range(60))
        )
        statuses = [o.status for o in outcomes]
        assert statuses.count(CallStatus.PENDING_APPROVAL) == 5
        assert [o.code for o in outcomes].count(ErrorCode.RATE_LIMITED) == 55
        assert len(gateway.approvals.pending()) == 5
