"""The worker protocol (``protocol: worker``): one long-lived process answers a JSON line per call.

Real workers through a real gateway: the shipped helpers for Python and JavaScript, concurrency
(one call per worker at a time), the audit, and every way a worker can break the protocol — it
answers garbage, two lines, nothing (it crashes, or never answers), too much, or talks while it
has no call — each ending that call with a clear error, the worker stopped with what it started,
and the next call served by a new worker.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from folder_tools import clean_environ, gone, write_tool
from gateway_support import gateway_with
from toolgate import CallStatus, ErrorCode, Gateway
from toolgate.backends.workers import WorkerSettings
from toolgate.worker_helpers import HELPERS

# A worker written against the protocol directly, whose input says how to misbehave.
HOSTILE = """import json, os, subprocess, sys, time
child = None

def answer(value, call):
    print(json.dumps({**value, "_call": call}), flush=True)

for n, line in enumerate(sys.stdin):
    request = json.loads(line)
    call = request.pop("_call")
    mode = request.get("mode")
    if mode == "garbage":
        print("this is not json", flush=True)
    elif mode == "two":
        first, second = json.dumps({"a": 1, "_call": call}), json.dumps({"b": 2, "_call": call})
        print(first + "\\n" + second, flush=True)
    elif mode == "crash":
        sys.stderr.write("boom: the worker fell over\\n")
        sys.stderr.flush()
        os._exit(3)
    elif mode == "hang":
        child = subprocess.Popen(["sleep", "300"])
        with open(request["child_file"], "w") as f:
            f.write(str(child.pid))
        time.sleep(300)
    elif mode == "huge":
        sys.stdout.write("x" * 300000)
        sys.stdout.flush()
        time.sleep(300)
    elif mode == "chatty":
        answer({"pid": os.getpid(), "n": n}, call)
        time.sleep(0.2)
        print("and one more thing", flush=True)
    elif mode == "late":
        answer({"pid": os.getpid(), "secret": request["secret"]}, call)
        time.sleep(0.05)
        answer({"pid": os.getpid(), "secret": request["secret"], "late": True}, call)
    elif mode == "forgetful":
        print(json.dumps({"pid": os.getpid()}), flush=True)
    elif mode == "error":
        answer({"error": "the file is missing"}, call)
    else:
        answer({"pid": os.getpid(), "n": n, "request": request}, call)
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    return folder


@pytest.fixture
def gateway(root: Path) -> Iterator[Gateway]:
    write_tool(root, "hostile", HOSTILE, runtime="python", protocol="worker", timeout=1500)
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        yield gateway


def _call(gateway: Gateway, mode: str | None = None, **arguments: Any) -> Any:
    return gateway.call_sync("local:hostile", {"mode": mode, **arguments})


def test_one_worker_answers_call_after_call(gateway: Gateway) -> None:
    outcomes = [_call(gateway, word=f"w{i}") for i in range(5)]
    assert all(o.status is CallStatus.OK for o in outcomes)
    assert {o.metadata["process"] for o in outcomes} == {"worker"}
    assert len({o.content["pid"] for o in outcomes}) == 1
    assert [o.content["n"] for o in outcomes] == [0, 1, 2, 3, 4]
    assert outcomes[3].content["request"]["word"] == "w3"
    assert outcomes[3].content["request"]["sessionId"] == "default"


def test_a_reported_error_fails_the_call_and_keeps_the_worker(gateway: Gateway) -> None:
    first = _call(gateway)
    failed = _call(gateway, "error")
    after = _call(gateway)
    assert failed.status is CallStatus.ERROR and failed.code is ErrorCode.TOOL_ERROR
    assert failed.message == "the file is missing"
    assert after.content["pid"] == first.content["pid"]


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        ("garbage", "answered with something that is not a JSON object: 'this is not json'"),
        ("two", "answered with more than one line"),
        ("crash", "exited with code 3 during the call"),
        ("forgetful", "did not echo '_call'"),
    ],
)
def test_a_worker_that_breaks_the_protocol_is_replaced(
    gateway: Gateway, mode: str, says: str
) -> None:
    first = _call(gateway)
    broken = _call(gateway, mode)
    after = _call(gateway)
    assert broken.status is CallStatus.ERROR and broken.code is ErrorCode.TOOL_ERROR
    assert says in broken.message and "the next call starts a new one" in broken.message
    if mode == "crash":
        assert "boom: the worker fell over" in broken.message  # its stderr
    assert gone(first.content["pid"])
    assert after.status is CallStatus.OK and after.content["pid"] != first.content["pid"]
    assert after.content["n"] == 0  # a new worker


@pytest.mark.slow
def test_a_worker_that_never_answers_times_out_and_is_killed_with_its_children(
    gateway: Gateway, tmp_path: Path
) -> None:
    first = _call(gateway)
    started = time.monotonic()
    child_file = tmp_path / "child.pid"
    hung = _call(gateway, "hang", child_file=str(child_file))
    assert hung.status is CallStatus.ERROR and hung.code is ErrorCode.TIMEOUT
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 5
    child = int(child_file.read_text())
    while not (gone(first.content["pid"]) and gone(child)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gone(first.content["pid"]) and gone(child)
    after = _call(gateway)
    assert after.status is CallStatus.OK and after.content["n"] == 0


def test_a_worker_that_writes_past_the_cap_is_stopped(gateway: Gateway) -> None:
    gateway._scripts.max_output = 100_000
    huge = _call(gateway, "huge")
    assert huge.status is CallStatus.ERROR
    assert "wrote more than 100,000 bytes without ending the line" in huge.message
    assert _call(gateway).status is CallStatus.OK


@pytest.mark.slow
def test_a_worker_that_talks_between_calls_is_not_trusted_again(gateway: Gateway) -> None:
    chatty = _call(gateway, "chatty")
    assert chatty.status is CallStatus.OK
    time.sleep(0.5)  # it wrote another line while it had no call
    after = _call(gateway)
    assert after.status is CallStatus.OK
    assert after.content["pid"] != chatty.content["pid"]
    assert gone(chatty.content["pid"])


@pytest.mark.slow
def test_a_late_answer_never_reaches_the_next_call(gateway: Gateway) -> None:
    for _ in range(5):  # the late line lands during the next call, or between the two
        alice = _call(gateway, "late", secret="alice's")
        bob = _call(gateway, secret="bob's")
        assert alice.status is CallStatus.OK and alice.content["secret"] == "alice's"
        assert "alice's" not in repr(bob.content) + (bob.message or "")
        if bob.status is CallStatus.ERROR:  # the late line came during it: refused, replaced
            assert "the next call starts a new one" in bob.message
        time.sleep(0.1)
        after = _call(gateway)
        assert after.status is CallStatus.OK and after.content["pid"] != alice.content["pid"]


@pytest.mark.slow
async def test_calls_at_once_get_one_worker_each_then_reuse_them(root: Path) -> None:
    script = """import json, os, sys, time
for line in sys.stdin:
    time.sleep(0.3)
    print(json.dumps({"pid": os.getpid(), "_call": json.loads(line)["_call"]}), flush=True)
"""
    write_tool(root, "slow", script, runtime="python", protocol="worker")
    async with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        burst = await asyncio.gather(*(gateway.call("local:slow", {}) for _ in range(3)))
        again = await asyncio.gather(*(gateway.call("local:slow", {}) for _ in range(3)))
    assert all(o.status is CallStatus.OK for o in (*burst, *again))
    pids = {o.content["pid"] for o in burst}
    assert len(pids) == 3
    assert {o.content["pid"] for o in again} == pids


def test_every_call_of_a_worker_is_audited(root: Path, tmp_path: Path) -> None:
    write_tool(root, "hostile", HOSTILE, runtime="python", protocol="worker")
    with gateway_with(
        tool_folders=[root], environ=clean_environ(), audit_path=tmp_path / "audit.db"
    ) as gateway:
        for mode in (None, "error", None):
            _call(gateway, mode)
        assert gateway.audit is not None and gateway.audit.flush(10)
        records = gateway.audit.query(tool_id="local:hostile")
    assert [r.status for r in reversed(records)] == ["ok", "error", "ok"]


@pytest.mark.slow
def test_idle_workers_are_stopped_and_close_stops_the_rest(root: Path) -> None:
    write_tool(root, "hostile", HOSTILE, runtime="python", protocol="worker")
    with gateway_with(
        tool_folders=[root],
        environ=clean_environ(),
        workers=WorkerSettings(idle_timeout=0.3),
    ) as gateway:
        first = _call(gateway).content["pid"]
        deadline = time.monotonic() + 10
        while not gone(first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(first)
        second = _call(gateway).content["pid"]
        assert second != first
    assert gone(second)


@pytest.mark.parametrize("runtime", ["python", "node", "bun"])
def test_the_shipped_helpers(root: Path, runtime: str) -> None:
    program = {"python": "python3", "node": "node", "bun": "bun"}[runtime]
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    helper = HELPERS[runtime]
    if runtime == "python":
        script = """import os
from toolgate_worker import serve

def handle(request):
    if request.get("fail"):
        raise ValueError("no such name")
    print("a stray print goes to stderr")
    return {"message": "Hello, " + request["name"] + "!", "pid": os.getpid()}

serve(handle)
"""
        name = "script.py"
    else:
        script = """import { serve } from "./toolgate_worker.mjs";
serve(async (request) => {
  if (request.fail) throw new Error("no such name");
  console.log("a stray log goes to stderr");
  return { message: `Hello, ${request.name}!`, pid: process.pid };
});
"""
        name = "script.mjs"
    folder = write_tool(root, "greet", script, runtime=runtime, script_name=name, protocol="worker")
    shutil.copyfile(helper, folder / helper.name)
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        ada = gateway.call_sync("local:greet", {"name": "Ada"})
        failed = gateway.call_sync("local:greet", {"name": "Bo", "fail": True})
        cy = gateway.call_sync("local:greet", {"name": "Cy"})
    assert ada.status is CallStatus.OK, ada.message
    assert ada.content["message"] == "Hello, Ada!"
    assert failed.status is CallStatus.ERROR and "no such name" in failed.message
    assert cy.content["message"] == "Hello, Cy!" and cy.content["pid"] == ada.content["pid"]
