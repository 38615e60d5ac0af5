"""The floor under ``g_full_pg``: its round trips through the bare drivers, no toolgate around them.

Registered into :data:`scenarios.SCENARIOS` on import (``run.py`` imports this module).
``g_full_pg_floor`` makes, per sample, exactly the round trips a fresh-key ``g_full_pg`` call
needs for its guarantees, with the same SQL and the same durability, from one thread:

1. the rate-limit counter in Redis (``EVALSHA`` of an increment-and-expire script, as the
   ``limits`` storage does);
2. the idempotency claim (toolgate's ``INSERT … ON CONFLICT … RETURNING``), a durable commit;
3. the key's outcome (toolgate's conditional ``UPDATE``), a durable commit;
4. the call's audit record and the health figures' summary rows in one statement (toolgate's,
   built from a representative record), a durable commit.

It is what any client pays on this machine for those commits and round trips, so the
difference ``g_full_pg − g_full_pg_floor`` is toolgate's own cost (its Python around the round
trips), and ``g_full_pg_floor / g_full_sql`` shows how far the hardware alone is from 3×.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

from scenarios import Context, Samples, scenario

#: Redis: one counter per window, incremented and given its expiry in one script.
_INCR_EXPIRE = """
local current = redis.call('incrby', KEYS[1], ARGV[2])
if tonumber(current) == tonumber(ARGV[2]) then redis.call('expire', KEYS[1], ARGV[1]) end
return current
"""


#: The key's outcome, stored while the call holds the key and still runs (as the store does).
_COMPLETE = (
    "UPDATE idempotency_keys SET status = %s, outcome = %s, expires_at = %s "
    "WHERE tool_id = %s AND key = %s AND call_id = %s AND status = 'running'"
)


def _statements() -> tuple[str, str, list[Any]]:
    """The claim's SQL, and the record + summary statement with its parameters for a
    representative call (psycopg's placeholders)."""
    from toolgate.audit.postgres_log import ROLLUP_ROWS, _insert, _one_statement, _storable
    from toolgate.audit.record import AuditRecord
    from toolgate.audit.rollup import rollup_of, upserts
    from toolgate.audit.sqlite_rows import row_from_record
    from toolgate.stores.postgres_db import _to_psycopg
    from toolgate.stores.sql_idempotency import _CLAIM

    record = AuditRecord(
        time=time.time(),
        call_id="call_floor",
        tool_id="bench:add_full",
        status="ok",
        duration=0.0001,
        agent="bench-agent",
        idempotency_key="1-2",
        args={"a": 1, "b": "[REDACTED]"},
        result=3,
    )
    row = [_storable(value) for value in row_from_record(record)]
    sql, params = _one_statement([(_insert(1), row), *upserts(rollup_of([record]), ROLLUP_ROWS)])
    return _to_psycopg(_CLAIM), _to_psycopg(sql), params


@scenario(
    "g_full_pg_floor",
    "floor of g_full_pg: 1 Redis round trip + 3 durable PostgreSQL commits, bare drivers",
    group="toolgate",
    baseline="call_sync",
    note="the same SQL and durability as a fresh-key g_full_pg call, without toolgate: claim, "
    "outcome, then record + summary in one statement (psycopg, redis-py)",
)
async def g_full_pg_floor(ctx: Context) -> Samples:
    import psycopg
    import redis

    fx = ctx.fixtures
    client = redis.Redis.from_url(fx.redis_url)
    increment = client.register_script(_INCR_EXPIRE)
    conn = psycopg.connect(fx.postgres_url, autocommit=True, prepare_threshold=5)
    claim_sql, commit_sql, commit_params = _statements()
    keys = itertools.count()
    prefix = uuid.uuid4().hex

    def one() -> None:
        key = f"{prefix}-{next(keys)}"
        now = time.time()
        increment(keys=["toolgate-bench-floor"], args=[60, 1])
        taken = conn.execute(
            claim_sql,
            {
                "tool_id": "t",
                "key": key,
                "arguments_digest": "d",
                "call_id": "c",
                "status": "running",
                "outcome": None,
                "created_at": now,
                "expires_at": now + 86_400,
                "now": now,
            },
        ).fetchone()
        if taken is None:
            raise RuntimeError("the floor's fresh key was taken")
        conn.execute(
            _COMPLETE, ("done", '{"status":"ok","content":3}', now + 86_400, "t", key, "c")
        )
        conn.execute(commit_sql, commit_params)

    try:
        return ctx.budget.measure(one)
    finally:
        conn.close()
        client.close()
