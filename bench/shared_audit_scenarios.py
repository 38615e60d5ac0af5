"""Sustained audit into the shared PostgreSQL database (issue 12): the ``COPY`` writer's
throughput, and the records acknowledged per second when every call waits for its commit.

Registered into :data:`scenarios.SCENARIOS` on import (``run.py`` imports this module). Both
run once, after the rounds, like ``audit_rate`` (SQLite), which they are read beside:

* ``audit_rate_pg``: N × ``call_sync`` with the log's acknowledgement off (the caller does not
  wait), then ``flush()``: what the writer sustains, as ``audit_rate`` measures SQLite's.
* ``audit_rate_pg_durable``: N calls through the async API, ``CONCURRENCY`` in flight, each
  answered only once its record is committed (the default with ``state:``): calls that end
  while a batch is being committed share the next one.
"""

from __future__ import annotations

import asyncio
import gc
from itertools import repeat
from time import perf_counter_ns
from typing import Any

from scenarios import (
    ARGS,
    GUARANTEE_AGENT,
    Context,
    Samples,
    _check_outcome,
    add_audit,
    scenario,
)
from toolgate import AuditSettings, Gateway, GatewaySettings

#: Calls in flight at once in ``audit_rate_pg_durable`` (many agents on one replica).
CONCURRENCY = 256


def _pg_gateway(ctx: Context, name: str) -> Gateway:
    from toolgate.stores.postgres_db import PostgresDatabase

    fx = ctx.fixtures
    gateway = Gateway(
        # The path is unused: the log is in PostgreSQL.
        GatewaySettings(audit=AuditSettings(path=fx.state_dir / f"{name}.db")),
        state_database=PostgresDatabase(fx.postgres_url),
    )
    gateway.add(add_audit)
    if type(gateway.audit).__name__ != "PostgresAuditLog":
        raise RuntimeError(f"the audit log is {gateway.audit!r}, not in PostgreSQL")
    return gateway


def _report(
    ctx: Context, key: str, n: int, start: int, calls_end: int, end: int, log: Any, flushed: bool
) -> Samples:
    written = log.written - 1  # the check call
    ctx.fixtures.audit_throughputs[key] = {
        "calls": n,
        "written": written,
        "lost": log.lost,
        "flushed": flushed,
        "calls_s": (calls_end - start) / 1e9,
        "flush_s": (end - calls_end) / 1e9,
        "total_s": (end - start) / 1e9,
        "calls_per_s": n / ((calls_end - start) / 1e9),
        "written_per_s": written / ((end - start) / 1e9),
    }
    return Samples([(end - start) / max(written, 1)], [n])


@scenario(
    "audit_rate_pg",
    "sustained audit into PostgreSQL (COPY): N × call_sync, then flush",
    group="toolgate",
    timing="throughput",
    note="runs once; the caller does not wait for the commit here: the writer's own rate",
)
async def audit_rate_pg(ctx: Context) -> Samples:
    n = ctx.plan.audit_calls
    gateway = _pg_gateway(ctx, "audit-pg")
    try:
        log = gateway.audit
        assert log is not None
        call, tool_id = gateway.call_sync, "bench:add_audit"
        _check_outcome(call(tool_id, ARGS, agent=GUARANTEE_AGENT))
        log.durable = False  # measure the writer, not one caller's commit round trips
        gc.collect()
        start = perf_counter_ns()
        for _ in repeat(None, n):
            call(tool_id, ARGS, agent=GUARANTEE_AGENT)
        calls_end = perf_counter_ns()
        flushed = log.flush(120.0)
        end = perf_counter_ns()
        return _report(ctx, "audit_rate_pg", n, start, calls_end, end, log, flushed)
    finally:
        gateway.close()


@scenario(
    "audit_rate_pg_durable",
    f"durable audit into PostgreSQL: N calls, {CONCURRENCY} in flight, each answered on commit",
    group="toolgate",
    timing="throughput",
    note="runs once; sample = wall time / records acknowledged",
)
async def audit_rate_pg_durable(ctx: Context) -> Samples:
    n = ctx.plan.audit_calls
    gateway = _pg_gateway(ctx, "audit-pg-durable")
    try:
        log = gateway.audit
        assert log is not None and log.durable
        tool_id = "bench:add_audit"
        _check_outcome(await gateway.call(tool_id, ARGS, agent=GUARANTEE_AGENT))
        unrecorded = 0

        async def caller(count: int) -> None:
            nonlocal unrecorded
            for _ in repeat(None, count):
                outcome = await gateway.call(tool_id, ARGS, agent=GUARANTEE_AGENT)
                unrecorded += "audit" in outcome.metadata

        share, extra = divmod(n, CONCURRENCY)
        gc.collect()
        start = perf_counter_ns()
        await asyncio.gather(*(caller(share + (i < extra)) for i in range(CONCURRENCY)))
        end = perf_counter_ns()
        if unrecorded:
            raise RuntimeError(f"{unrecorded} calls were answered as not recorded")
        return _report(ctx, "audit_rate_pg_durable", n, start, end, end, log, True)
    finally:
        gateway.close()
