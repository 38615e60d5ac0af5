"""Side effects are recorded before they run: a tool above ``local_write`` runs only when the
audit store answers, right before the run, that it can write.

The audit log's health flag lags (it turns false only after a write failed). Each test breaks
the audit store at a chosen moment — in the tool's security check, after the AuditGuard stage
let the call through on a healthy log and before the tool runs — and checks that the tool's
body never ran and the call ended ``unavailable``. No timing is involved.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from postgres_support import upgraded_database
from toolgate import ErrorCode, Gateway, tool

pytestmark = pytest.mark.slow

UNAVAILABLE = (
    "Tool shop:charge is unavailable: the audit log cannot record calls right now, and a "
    "external_write tool never runs unaudited. Try again later or tell the user."
)


def _charging(marker: Path, breaks: Callable[[], None], gateway: list[Gateway]) -> Any:
    """A tool that leaves ``marker`` when its body runs; its security check calls ``breaks``
    once the test arms it (the AuditGuard stage has passed by then: it is first)."""
    armed: list[bool] = []

    def check(payload: dict[str, Any]) -> dict[str, Any]:
        if payload["args"]["order_id"] == "break":
            assert gateway[0].audit is not None and gateway[0].audit.healthy  # the guard let it by
            armed.append(True)
            breaks()
        return {"allowed": True}

    @tool(namespace="shop", effect="external_write", approval=False, security_check=check)
    def charge(order_id: str) -> str:
        """Charge an order."""
        with marker.open("a") as runs:
            runs.write(order_id + "\n")
        return "charged " + order_id

    return charge, armed


def _ran(marker: Path) -> list[str]:
    return marker.read_text().splitlines() if marker.exists() else []


def test_a_sqlite_audit_store_gone_after_the_guard_stops_the_tool(tmp_path: Path) -> None:
    audit = tmp_path / "audit" / "audit.db"
    marker = tmp_path / "ran"

    def breaks() -> None:
        # The database becomes a folder: the log can neither write it nor make it again.
        shutil.rmtree(audit.parent)
        audit.mkdir(parents=True)

    holder: list[Gateway] = []
    charge, armed = _charging(marker, breaks, holder)
    with gateway_with(approver="queue", audit_path=audit) as gateway:
        holder.append(gateway)
        gateway.add(charge)
        assert gateway.call_sync("shop:charge", {"order_id": "before"}).ok
        outcome = gateway.call_sync("shop:charge", {"order_id": "break"})
        assert armed == [True]
        assert outcome.code is ErrorCode.UNAVAILABLE and outcome.message == UNAVAILABLE
        assert gateway.audit is not None and not gateway.audit.healthy
        # While the store stays broken, the guard refuses at once.
        refused = gateway.call_sync("shop:charge", {"order_id": "after"})
        assert refused.code is ErrorCode.UNAVAILABLE
    assert _ran(marker) == ["before"]


@pytest.fixture
def pg_url() -> Iterator[str]:
    pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    with upgraded_database() as url:
        yield url


async def test_a_postgresql_audit_store_gone_after_the_guard_stops_the_tool(
    tmp_path: Path, pg_url: str
) -> None:
    import psycopg

    from toolgate.stores.postgres_db import PostgresDatabase

    marker = tmp_path / "ran"

    def breaks() -> None:
        # Every connection of the gateway to its database is cut (the server stays up for the
        # others): the pooled connections the audit log would use are dead.
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )

    holder: list[Gateway] = []
    charge, armed = _charging(marker, breaks, holder)
    gateway = gateway_with(
        approver="queue", audit_path=tmp_path / "audit.db", state_database=PostgresDatabase(pg_url)
    )
    with gateway:
        holder.append(gateway)
        gateway.add(charge)
        before = await gateway.call("shop:charge", {"order_id": "before"})
        assert before.ok and "audit" not in before.metadata  # recorded, durably
        outcome = await gateway.call("shop:charge", {"order_id": "break"})
        assert armed == [True]
        assert outcome.code is ErrorCode.UNAVAILABLE and outcome.message == UNAVAILABLE
    assert _ran(marker) == ["before"]


async def test_a_reservation_that_must_wait_holds_its_own_call_only(tmp_path: Path) -> None:
    """Found by the review: while another process holds the audit database's write lock, the
    reservation waits for it — in a thread, never on the event loop, so every other call (and a
    server's /healthz) goes on meanwhile; once the lock is gone the waiting call runs."""
    import asyncio
    import sqlite3

    @tool(namespace="shop", effect="external_write", approval=False)
    async def charge(order: str) -> str:
        """Charges an order."""
        return f"charged {order}"

    @tool(namespace="shop", effect="read_only")
    async def ping() -> str:
        """Answers at once."""
        return "pong"

    with gateway_with(audit_path=tmp_path / "audit.db") as gateway:
        gateway.add(charge)
        gateway.add(ping)
        assert (await gateway.call("shop:charge", {"order": "warm"})).ok
        holder = sqlite3.connect(tmp_path / "audit.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # a backup, a `sqlite3 audit.db` shell…
        try:
            waiting = asyncio.create_task(gateway.call("shop:charge", {"order": "o-1"}))
            for _ in range(3):  # the loop is free: other calls are answered meanwhile
                assert (await gateway.call("shop:ping")).content == "pong"
                await asyncio.sleep(0.01)
            assert not waiting.done()
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        outcome = await waiting
        assert outcome.ok and outcome.content == "charged o-1", outcome


async def test_reservations_wait_side_by_side_and_readers_are_not_held(tmp_path: Path) -> None:
    """Found by the review: with the audit database locked by another process, reservations
    waited one after another under the log's own lock (the eighth call 40 s), and so did every
    reader of the log. Now each waits at most its own second, and reading goes on meanwhile."""
    import asyncio
    import sqlite3

    @tool(namespace="shop", effect="external_write", approval=False)
    async def charge(order: str) -> str:
        """Charges an order."""
        return f"charged {order}"

    with gateway_with(audit_path=tmp_path / "audit.db") as gateway:
        gateway.add(charge)
        assert (await gateway.call("shop:charge", {"order": "warm"})).ok
        audit = gateway.audit
        assert audit is not None and audit.flush(10)
        holder = sqlite3.connect(tmp_path / "audit.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            calls = [
                asyncio.create_task(gateway.call("shop:charge", {"order": f"o-{i}"}))
                for i in range(4)
            ]
            await asyncio.sleep(0.05)
            records = await asyncio.to_thread(audit.query, tool_id="shop:charge")
            assert [r.status for r in records] == ["ok"]
            assert not all(call.done() for call in calls)  # read while they still waited
            outcomes = await asyncio.gather(*calls)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # The four waited side by side: each was refused after its own wait.
        assert [o.code for o in outcomes] == [ErrorCode.UNAVAILABLE] * 4
        # Once the refusals are written, the log is healthy again and the tool runs.
        assert audit.flush(10)
        assert (await gateway.call("shop:charge", {"order": "after"})).ok
