"""Idempotency keys through the public API: replay (ok and errors), concurrent duplicates running
once, key conflicts, failed renders, windows, persistence and processes sharing the store."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gateway_support import Clock, gateway_with
from toolgate import CallStatus, ErrorCode, Gateway, ToolError, tool
from toolgate._json import digest
from toolgate.pipeline.idempotency import (
    IdempotencyStage,
    KeyTemplateError,
    render_key,
    stored_key,
)
from toolgate.stores.idempotency import IdempotencyRecord, IdempotencyStatus
from toolgate.stores.sqlite_idempotency import SQLiteIdempotencyStore

RUNS: list[dict[str, Any]] = []
_RUNS_LOCK = threading.Lock()


def _ran(**arguments: Any) -> int:
    with _RUNS_LOCK:
        RUNS.append(arguments)
        return len(RUNS)


@tool(namespace="pay", idempotency_key="{{ args.order_id }}")
def charge(order_id: str, amount: int) -> dict[str, Any]:
    """Charge an order."""
    if amount < 0:
        _ran(order_id=order_id, amount=amount)
        raise ToolError(f"cannot charge a negative amount ({amount})")
    return {"charge": _ran(order_id=order_id, amount=amount), "amount": amount}


@tool(namespace="pay", idempotency_key="{{ args.order_id }}")
async def slow_charge(order_id: str, amount: int) -> dict[str, Any]:
    """Charge slowly (asynchronously)."""
    await asyncio.sleep(0.2)
    return {"charge": _ran(order_id=order_id, amount=amount)}


@tool(namespace="pay", idempotency_key="{{ args.order_id }}")
def slow_sync_charge(order_id: str, amount: int) -> dict[str, Any]:
    """Charge slowly (synchronously)."""
    time.sleep(0.2)
    return {"charge": _ran(order_id=order_id, amount=amount)}


@tool(
    namespace="pay",
    idempotency_key="{{ tool }}/{{ agent | default('anon') }}/{{ args.email | lower }}"
    "/{{ args.ref | default('none') }}/{{ args | hash }}",
)
def keyed(email: str, ref: str | None = None) -> int:
    """A tool with a key built from several sources."""
    return _ran(email=email, ref=ref)


@tool(namespace="pay", idempotency_key="{{ args.missing }}")
def missing_key(x: int) -> int:
    """The key needs an argument that does not exist."""
    return _ran(x=x)


@tool(namespace="pay", idempotency_key="{{ args.__class__.__mro__ }}")
def unsafe_key(x: int) -> int:
    """The key template breaks the sandbox."""
    return _ran(x=x)


@tool(namespace="pay", idempotency_key="{{ args.x ")
def broken_key(x: int) -> int:
    """The key template is malformed."""
    return _ran(x=x)


@tool(namespace="pay", idempotent=True)
def safe_to_repeat(x: int) -> int:
    """Idempotent by declaration, without a key template."""
    return _ran(x=x)


@tool(namespace="pay", idempotency_key="{{ args.order_id }}", idempotency_window=60)
def short_window(order_id: str) -> int:
    """A tool whose keys last a minute."""
    return _ran(order_id=order_id)


@tool(namespace="pay", idempotency_key="{{ args.order_id }}", approval=True)
def refund(order_id: str) -> int:
    """A refund, which needs a person's approval."""
    return _ran(order_id=order_id)


TOOLS: list[Any] = [
    charge,
    slow_charge,
    slow_sync_charge,
    keyed,
    missing_key,
    unsafe_key,
    broken_key,
    safe_to_repeat,
    short_window,
    refund,
]


@pytest.fixture(autouse=True)
def _reset_runs() -> None:
    RUNS.clear()


@pytest.fixture
def gateway() -> Iterator[Gateway]:
    with Gateway(stages=[IdempotencyStage()]) as gw:
        gw.add(TOOLS)
        yield gw


# -- replay ----------------------------------------------------------------------------------------


def test_a_repeated_key_replays_the_stored_outcome(gateway: Gateway) -> None:
    first = gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": 5})
    second = gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": 5})
    assert first.ok and second.ok
    assert first.content == second.content == {"charge": 1, "amount": 5}
    assert len(RUNS) == 1
    assert first.metadata["idempotency"] == {"key": "o-1", "replayed": False}
    assert second.metadata["idempotency"] == {
        "key": "o-1",
        "replayed": True,
        "original_call_id": first.call_id,
    }
    assert second.call_id != first.call_id
    assert second.duration == first.duration
    assert gateway.call_sync("pay:charge", {"order_id": "o-2", "amount": 5}).content == {
        "charge": 2,
        "amount": 5,
    }


def test_errors_are_replayed_too(gateway: Gateway) -> None:
    first = gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": -1})
    second = gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": -1})
    assert first.code is second.code is ErrorCode.TOOL_ERROR
    assert second.message == first.message and "negative amount" in (second.message or "")
    assert second.metadata["idempotency"]["replayed"] is True
    assert len(RUNS) == 1


async def test_the_async_api_replays_as_well(gateway: Gateway) -> None:
    first = await gateway.call("pay:charge", {"order_id": "o-1", "amount": 5})
    second = await gateway.call("pay:charge", {"order_id": "o-1", "amount": 5})
    assert second.content == first.content
    assert second.metadata["idempotency"]["original_call_id"] == first.call_id
    assert len(RUNS) == 1


def test_the_same_key_with_other_arguments_is_a_conflict(gateway: Gateway) -> None:
    first = gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": 5})
    other = gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": 6})
    assert other.code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert first.call_id in (other.message or "") and "'o-1'" in (other.message or "")
    assert len(RUNS) == 1
    # The original arguments still replay.
    assert gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": 5}).content == (
        first.content
    )


def test_keys_are_scoped_per_tool(gateway: Gateway) -> None:
    assert gateway.call_sync("pay:charge", {"order_id": "o-1", "amount": 5}).ok
    assert gateway.call_sync("pay:short_window", {"order_id": "o-1"}).ok
    assert len(RUNS) == 2


def test_tools_declared_idempotent_without_a_template_are_not_deduplicated(
    gateway: Gateway,
) -> None:
    outcomes = [gateway.call_sync("pay:safe_to_repeat", {"x": 1}) for _ in range(3)]
    assert [o.content for o in outcomes] == [1, 2, 3]
    assert all("idempotency" not in o.metadata for o in outcomes)


# -- concurrency -----------------------------------------------------------------------------------


async def test_concurrent_duplicates_run_once_and_share_the_outcome(gateway: Gateway) -> None:
    outcomes = await asyncio.gather(
        *(gateway.call("pay:slow_charge", {"order_id": "o-1", "amount": 5}) for _ in range(10))
    )
    assert len(RUNS) == 1
    assert all(o.ok and o.content == {"charge": 1} for o in outcomes)
    originals = [o for o in outcomes if not o.metadata["idempotency"]["replayed"]]
    assert len(originals) == 1
    assert {o.metadata["idempotency"].get("original_call_id") for o in outcomes} == {
        None,
        originals[0].call_id,
    }


def test_concurrent_duplicates_from_threads_run_once(gateway: Gateway) -> None:
    barrier = threading.Barrier(8)

    def call(tool_id: str) -> Any:
        barrier.wait()
        return gateway.call_sync(tool_id, {"order_id": "o-1", "amount": 5})

    for tool_id in ("pay:slow_sync_charge", "pay:slow_charge"):
        RUNS.clear()
        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(call, [tool_id] * 8))
        assert len(RUNS) == 1, tool_id
        assert all(o.ok and o.content == {"charge": 1} for o in outcomes)
        assert sum(o.metadata["idempotency"]["replayed"] for o in outcomes) == 7


async def test_a_concurrent_duplicate_with_other_arguments_is_a_conflict_at_once(
    gateway: Gateway,
) -> None:
    running = asyncio.create_task(gateway.call("pay:slow_charge", {"order_id": "o-1", "amount": 5}))
    await asyncio.sleep(0.05)
    other = await gateway.call("pay:slow_charge", {"order_id": "o-1", "amount": 7})
    assert other.code is ErrorCode.IDEMPOTENCY_CONFLICT
    assert not running.done()  # it answered without waiting for the running call
    assert (await running).ok
    assert len(RUNS) == 1


async def test_a_cancelled_call_gives_its_key_up(gateway: Gateway) -> None:
    running = asyncio.create_task(gateway.call("pay:slow_charge", {"order_id": "o-1", "amount": 5}))
    await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    again = await gateway.call("pay:slow_charge", {"order_id": "o-1", "amount": 5})
    assert again.ok and again.metadata["idempotency"]["replayed"] is False


def test_gateways_sharing_a_database_wait_for_each_other(tmp_path: Path) -> None:
    """Like two processes: the second one polls the shared store until the first has an
    outcome, then replays it."""
    path = tmp_path / "state.db"
    with (
        Gateway(stages=[IdempotencyStage.sqlite(path)]) as one,
        Gateway(stages=[IdempotencyStage.sqlite(path)]) as two,
    ):
        for gw in (one, two):
            gw.add(slow_sync_charge)
        barrier = threading.Barrier(2)

        def call(gw: Gateway) -> Any:
            barrier.wait()
            return gw.call_sync("pay:slow_sync_charge", {"order_id": "o-1", "amount": 5})

        with ThreadPoolExecutor(2) as pool:
            outcomes = list(pool.map(call, [one, two]))
    assert len(RUNS) == 1
    assert outcomes[0].content == outcomes[1].content == {"charge": 1}
    assert sorted(o.metadata["idempotency"]["replayed"] for o in outcomes) == [False, True]


def test_an_expired_record_can_be_taken_again(tmp_path: Path) -> None:
    """A record past its expiry counts as absent (as a running record of an earlier version,
    kept only for its owner's lease: a cut-off call is now kept for the window, see
    test_outcome_unknown.py)."""
    clock = Clock()
    store = SQLiteIdempotencyStore(tmp_path / "state.db")
    arguments = {"order_id": "o-1", "amount": 5}
    store.claim(
        IdempotencyRecord(
            tool_id="pay:charge",
            key=stored_key(None, "o-1"),  # what the stage stores for a call without agent
            arguments_digest=digest(arguments),
            call_id="call_dead",
            status=IdempotencyStatus.RUNNING,
            created_at=clock.now - 100,
            expires_at=clock.now - 1,
        ),
        now=clock.now - 100,
    )
    with Gateway(stages=[IdempotencyStage(store, clock=clock)]) as gw:
        gw.add(charge)
        outcome = gw.call_sync("pay:charge", arguments)
    assert outcome.ok and outcome.metadata["idempotency"]["replayed"] is False
    assert len(RUNS) == 1


def test_a_caller_waits_at_most_the_lease_for_a_running_duplicate(tmp_path: Path) -> None:
    store = SQLiteIdempotencyStore(tmp_path / "state.db")
    arguments = {"order_id": "o-1", "amount": 5}
    now = time.time()
    store.claim(
        IdempotencyRecord(
            tool_id="pay:charge",
            key=stored_key(None, "o-1"),  # what the stage stores for a call without agent
            arguments_digest=digest(arguments),
            call_id="call_elsewhere",
            status=IdempotencyStatus.RUNNING,
            created_at=now,
            expires_at=now + 3600,
        ),
        now=now,
    )
    # A lease of 0.3 s: twice the timeout (a wait for a slot, then the run), less itself.
    lease_grace = 0.3 - 2 * charge.tool.timeout
    with Gateway(stages=[IdempotencyStage(store, lease_grace=lease_grace)]) as gw:
        gw.add(charge)
        # The other call never finishes: this one waits until its lease has ended, then takes
        # it for cut off (the hang guard fails the test if it waited for ever).
        outcome = gw.call_sync("pay:charge", arguments)
    assert outcome.code is ErrorCode.OUTCOME_UNKNOWN
    assert "call_elsewhere" in (outcome.message or "")
    assert RUNS == []


# -- rendering -------------------------------------------------------------------------------------


def test_the_template_sees_args_agent_session_tool_and_the_filters(gateway: Gateway) -> None:
    arguments = {"email": "Ann@Example.org"}
    first = gateway.call_sync("pay:keyed", arguments, agent="bot")
    assert first.metadata["idempotency"]["key"] == (
        f"pay:keyed/bot/ann@example.org/none/{digest(arguments)}"
    )
    assert (
        gateway.call_sync("pay:keyed", arguments)
        .metadata["idempotency"]["key"]
        .startswith("pay:keyed/anon/")
    )
    key = render_key(
        "{{ session }}:{{ args.tags | hash }}",
        arguments={"tags": [1, {"b": 2, "a": 1}]},
        agent=None,
        session="s-1",
        tool_id="x:y",
    )
    assert key == f"s-1:{digest([1, {'a': 1, 'b': 2}])}"


def test_an_undefined_variable_is_invalid_arguments_and_the_tool_does_not_run(
    gateway: Gateway,
) -> None:
    outcome = gateway.call_sync("pay:missing_key", {"x": 1})
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS
    assert "idempotency key" in (outcome.message or "") and "missing" in (outcome.message or "")
    assert RUNS == []


@pytest.mark.parametrize("tool_id", ["pay:unsafe_key", "pay:broken_key"])
def test_a_broken_template_is_unavailable_and_the_tool_does_not_run(
    gateway: Gateway, tool_id: str
) -> None:
    outcome = gateway.call_sync(tool_id, {"x": 1})
    assert outcome.code is ErrorCode.UNAVAILABLE
    assert "idempotency key template" in (outcome.message or "")
    assert RUNS == []


def test_hash_of_an_undefined_value_and_an_empty_key_fail_to_render() -> None:
    for template in ("{{ args.nope | hash }}", "{{ args.ref | default('') }}"):
        with pytest.raises(KeyTemplateError) as failure:
            render_key(template, arguments={}, agent=None, session=None, tool_id="x:y")
        assert failure.value.code is ErrorCode.INVALID_ARGUMENTS


def test_the_sandbox_is_immutable() -> None:
    with pytest.raises(KeyTemplateError) as failure:
        render_key(
            "{{ args.tags.append(1) }}",
            arguments={"tags": []},
            agent=None,
            session=None,
            tool_id="x:y",
        )
    assert failure.value.code is ErrorCode.UNAVAILABLE


# -- windows, approvals, persistence --------------------------------------------------------------


def test_a_key_expires_with_its_window() -> None:
    clock = Clock()
    with Gateway(clock=clock) as gw:
        gw.add(short_window)
        assert gw.call_sync("pay:short_window", {"order_id": "o-1"}).content == 1
        clock.now += 59
        replayed = gw.call_sync("pay:short_window", {"order_id": "o-1"})
        assert replayed.content == 1 and replayed.metadata["idempotency"]["replayed"]
        clock.now += 1
        fresh = gw.call_sync("pay:short_window", {"order_id": "o-1"})
        assert fresh.content == 2 and not fresh.metadata["idempotency"]["replayed"]


def test_pending_approval_is_not_stored_and_the_approved_call_is(tmp_path: Path) -> None:
    with gateway_with(
        approver="queue", state_path=tmp_path / "state.db", stages=[IdempotencyStage()]
    ) as gw:
        gw.add(refund)
        first = gw.call_sync("pay:refund", {"order_id": "o-1"})
        assert first.status is CallStatus.PENDING_APPROVAL and first.approval is not None
        again = gw.call_sync("pay:refund", {"order_id": "o-1"})
        assert again.status is CallStatus.PENDING_APPROVAL
        assert again.approval is not None and again.approval.id == first.approval.id
        assert RUNS == []
        assert gw.approvals is not None
        gw.approvals.decide(first.approval.id, "approve", by="alice")
        assert RUNS == []  # the decision only records; nothing is stored under the key
        ran = gw.call_sync("pay:refund", {"order_id": "o-1"})  # the agent's retry runs it
        assert ran.ok and ran.content == 1  # under its key
        assert ran.metadata["idempotency"]["replayed"] is False
        replayed = gw.call_sync("pay:refund", {"order_id": "o-1"})  # the next call: replayed
        assert replayed.ok and replayed.content == 1
        assert replayed.metadata["idempotency"]["replayed"] is True
        assert replayed.metadata["idempotency"]["original_call_id"] == ran.call_id
        assert len(RUNS) == 1


def test_outcomes_persist_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "home" / "state.db"
    stage = IdempotencyStage.sqlite(path)
    with Gateway(stages=[stage]) as gw:
        gw.add(charge)
        first = gw.call_sync("pay:charge", {"order_id": "o-1", "amount": 5})
        stage.close()
    assert path.stat().st_mode & 0o777 == 0o600
    stage = IdempotencyStage.sqlite(path)
    with Gateway(stages=[stage]) as gw:
        gw.add(charge)
        second = gw.call_sync("pay:charge", {"order_id": "o-1", "amount": 5})
        stage.close()
    assert second.content == first.content
    assert second.metadata["idempotency"]["original_call_id"] == first.call_id
    assert len(RUNS) == 1


@pytest.mark.parametrize(
    "template",
    [
        "{{ args.order }}",
        "charge-{{ args.order | lower }}-{{ args.amount }}",
        "zendesk-{{ args.subject | hash }}",
        "{{args.subject|lower|hash}}",
        "{{ args.subject | hash | lower }} and {{ args.amount }}",
        "x{{ args.ratio }}y",
        "{{ args.missing | default('none') }}",  # not simple: Jinja
        "{{ args.items }}",  # a dict method name: Jinja
        "{{ agent }}-{{ args.order }}",  # not simple: Jinja
    ],
)
@pytest.mark.parametrize(
    "arguments",
    [
        {"order": "A1", "amount": 5, "subject": "Hello", "ratio": 0.5, "items": "i"},
        {"order": "ünï", "amount": -1, "subject": "", "ratio": 2.0, "items": 3},
        {"order": True, "amount": None, "subject": ["a"], "ratio": 1e20, "items": None},
    ],
)
def test_the_fast_key_renderer_agrees_with_jinja(
    template: str, arguments: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.pipeline import idempotency

    def render(fast: bool) -> Any:
        if not fast:
            monkeypatch.setattr(idempotency, "_fast_render", lambda source, args: None)
        try:
            return idempotency.render_key(
                template, arguments=arguments, agent="bot", session=None, tool_id="t:x"
            )
        except idempotency.KeyTemplateError as exc:
            return ("error", exc.code)
        finally:
            monkeypatch.undo()

    assert render(fast=True) == render(fast=False)
