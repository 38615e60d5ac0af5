"""A call cut off by a crash, end to end: ``toolgate serve`` is killed (SIGKILL) while an
idempotency-keyed tool runs; a new server on the same state answers every retry with the key
``outcome_unknown`` naming the first call and when it started — the tool does not run again —
unless the tool is declared ``idempotent`` (re-running it is harmless), which runs again.

Both state stores are covered: the SQLite state file of one server, and the PostgreSQL database
(with Redis) that replicas share.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest

from gateway_support import gateway_with
from postgres_support import scratch_database

pytestmark = pytest.mark.slow

TOOLGATE = str(Path(sys.executable).parent / "toolgate")
REDIS_URL = os.environ.get("TOOLGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
KEY = "tg_bot_" + uuid.uuid4().hex
#: The tools' timeout and the lease grace set in toolgate.yaml: a retry after their sum finds
#: the first call cut off (short, so the test waits about 2.5 s for the lease to pass).
TIMEOUT = 2.0
LEASE_GRACE = 0.5

TOOLS = '''
import time
from pathlib import Path

from toolgate import ToolContext, tool

FOLDER = Path({folder!r})


def _started(what: str, context: ToolContext) -> None:
    with open(FOLDER / "runs.log", "a") as log:
        log.write(f"{{what}} {{context.call_id}} {{time.time()}}\\n")
    if (FOLDER / "hang").exists():
        time.sleep(30)  # the first attempt: the test kills the gateway meanwhile


@tool(effect="external_write", approval=False, idempotency_key="{{{{ args.order_id }}}}",
      timeout={timeout})
def charge(order_id: str, context: ToolContext) -> str:
    """Charge an order (charging twice costs the customer twice)."""
    _started("charge " + order_id, context)
    return "charged " + order_id


@tool(effect="external_write", approval=False, idempotency_key="{{{{ args.name }}}}",
      idempotent=True, timeout={timeout})
def set_flag(name: str, context: ToolContext) -> str:
    """Set a flag (setting it twice is the same as once: declared idempotent)."""
    _started("set_flag " + name, context)
    return "set " + name
'''


def _redis_up() -> None:
    redis = pytest.importorskip("redis", reason="toolgate[redis] is not installed")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError:
        pytest.skip("Redis is not running at 127.0.0.1:6379 (or TOOLGATE_TEST_REDIS)")


@contextmanager
def _state(kind: str) -> Iterator[dict[str, Any]]:
    """The toolgate.yaml keys of the state store ``kind``."""
    if kind == "sqlite":
        yield {}
        return
    pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    _redis_up()
    with scratch_database() as url:
        yield {"state": url, "redis": REDIS_URL}


def _start(folder: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """``toolgate serve --port 0`` in ``folder``, once ``/healthz`` answers."""
    process = subprocess.Popen(
        [TOOLGATE, "serve", "--port", "0"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    banner = process.stdout.readline()
    match = re.search(r"on (http://127\.0\.0\.1:\d+)", banner)
    if not match:
        process.kill()
        raise AssertionError(f"serve did not start: {banner}{process.stdout.read()}")
    url = match.group(1)
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx2.get(url + "/healthz", timeout=5).status_code == 200:
                return process, url
        except httpx2.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "serve did not start"
        time.sleep(0.1)


def _call(url: str, tool: str, **arguments: Any) -> dict[str, Any]:
    response = httpx2.post(
        f"{url}/v1/tools/shop:{tool}/call",
        json={"arguments": arguments},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    body: dict[str, Any] = response.json()
    return body


def _cut_off(url: str, tool: str, **arguments: Any) -> None:
    """A call whose gateway is killed before it answers."""
    with pytest.raises(httpx2.TransportError):
        _call(url, tool, **arguments)


def _runs(folder: Path) -> list[tuple[str, str, float]]:
    """The tool runs so far: (what, call id, started at)."""
    path = folder / "runs.log"
    lines = path.read_text().splitlines() if path.exists() else []
    runs = []
    for line in lines:
        what, call_id, started = line.rsplit(" ", 2)
        runs.append((what, call_id, float(started)))
    return runs


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_retry_after_a_crash_mid_call_is_outcome_unknown_unless_the_tool_is_idempotent(
    tmp_path: Path, kind: str
) -> None:
    (tmp_path / "shop_tools.py").write_text(TOOLS.format(folder=str(tmp_path), timeout=TIMEOUT))
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}
    env.pop("TOOLGATE_DATABASE_URL", None)
    env.pop("TOOLGATE_REDIS_URL", None)
    with _state(kind) as state:
        config = {
            **state,
            "python": [{"module": "shop_tools.py", "namespace": "shop"}],
            "agents": {"bot": {"key_sha256": hashlib.sha256(KEY.encode()).hexdigest()}},
            "idempotency": {"lease_grace": LEASE_GRACE},
        }
        (tmp_path / "toolgate.yaml").write_text(json.dumps(config))
        if state:
            upgrade = subprocess.run(
                [TOOLGATE, "db", "upgrade"], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            assert upgrade.returncode == 0, upgrade.stderr

        # The first attempts: both tools start, then the whole gateway is killed.
        (tmp_path / "hang").touch()
        first, url = _start(tmp_path, env)
        try:
            callers = [
                threading.Thread(target=_cut_off, args=(url, "charge"), kwargs={"order_id": "o-1"}),
                threading.Thread(target=_cut_off, args=(url, "set_flag"), kwargs={"name": "f-1"}),
            ]
            for caller in callers:
                caller.start()
            deadline = time.monotonic() + 30
            while len(_runs(tmp_path)) < 2:
                assert time.monotonic() < deadline, "the tools did not start"
                time.sleep(0.01)
            first.send_signal(signal.SIGKILL)
            first.wait(30)
            for caller in callers:
                caller.join(30)
        finally:
            if first.poll() is None:
                first.kill()
        (tmp_path / "hang").unlink()
        started = {what: (call_id, at) for what, call_id, at in _runs(tmp_path)}
        charge_call, charge_started = started["charge o-1"]

        # A new gateway on the same state; the retries come after the first calls' lease.
        second, url = _start(tmp_path, env)
        try:
            lease_end = max(at for _, at in started.values()) + TIMEOUT + LEASE_GRACE
            time.sleep(max(0.0, lease_end + 0.2 - time.time()))
            retry = _call(url, "charge", order_id="o-1")
            again = _call(url, "charge", order_id="o-1")
            rerun = _call(url, "set_flag", name="f-1")
            replayed = _call(url, "set_flag", name="f-1")
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(30) == 0

    # The charge did not run again, and its retries are told why, naming the first call.
    assert [what for what, _, _ in _runs(tmp_path)].count("charge o-1") == 1
    assert retry["status"] == "error" and retry["code"] == "outcome_unknown", retry
    message = retry["message"]
    assert charge_call in message and "may or may not have taken effect" in message
    assert "new idempotency key" in message
    meta = retry["metadata"]["idempotency"]
    assert meta["original_call_id"] == charge_call and meta["replayed"] is False
    started_at = datetime.fromisoformat(meta["started_at"])
    assert started_at.utcoffset() is not None and started_at.utcoffset().total_seconds() == 0
    assert abs(started_at.timestamp() - charge_started) < 2  # when the first call took the key
    assert meta["started_at"] in message
    # Every later retry in the window gets the same answer.
    assert again["code"] == "outcome_unknown" and again["message"] == message
    assert again["metadata"]["idempotency"] == meta

    # The tool declared idempotent ran again, once; the next retry replays that run.
    assert rerun["status"] == "ok" and rerun["content"] == "set f-1", rerun
    assert rerun["metadata"]["idempotency"]["replayed"] is False
    assert replayed["status"] == "ok" and replayed["metadata"]["idempotency"]["replayed"] is True
    assert [what for what, _, _ in _runs(tmp_path)].count("set_flag f-1") == 2


async def test_a_call_that_waited_for_a_slot_is_not_taken_for_cut_off() -> None:
    """Found by the review: the lease counts the wait for a concurrency slot. A retry while the
    first call runs, after waiting its turn longer than timeout + grace, waits for it and gets
    its outcome; it is not told ``outcome_unknown``, and nothing runs twice."""
    import asyncio

    from toolgate import ErrorCode, tool
    from toolgate.pipeline.concurrency import ConcurrencyLimit, ConcurrencySettings

    go = {"A": asyncio.Event(), "B": asyncio.Event()}
    ran: list[str] = []

    @tool(namespace="shop", timeout=2, idempotency_key="{{ args.order }}")
    async def charge(order: str) -> str:
        """Charges an order when the test lets it."""
        ran.append(order)
        await go[order].wait()
        return f"charged {order}"

    limits = ConcurrencySettings(ConcurrencyLimit(running=1, waiting=4))
    with gateway_with(concurrency=limits, idempotency_lease_grace=0.2) as gateway:
        gateway.add(charge)
        first = asyncio.create_task(gateway.call("shop:charge", {"order": "A"}))
        while ran != ["A"]:
            await asyncio.sleep(0.01)
        second = asyncio.create_task(gateway.call("shop:charge", {"order": "B"}))  # takes its key
        await asyncio.sleep(1.5)  # B waits for A's slot meanwhile
        go["A"].set()
        await asyncio.sleep(0.9)  # B runs now: past timeout + grace (2.2 s) since it took its key
        retry = asyncio.create_task(gateway.call("shop:charge", {"order": "B"}))
        await asyncio.sleep(0.2)
        go["B"].set()
        outcomes = await asyncio.gather(first, second, retry)
        assert [o.content for o in outcomes] == ["charged A", "charged B", "charged B"], outcomes
        assert outcomes[2].code is not ErrorCode.OUTCOME_UNKNOWN
        assert outcomes[2].metadata["idempotency"]["replayed"] is True
        assert ran == ["A", "B"]
