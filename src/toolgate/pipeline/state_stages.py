"""Where the stateful parts of the pipeline keep their state: in memory, in the SQLite state
file, or in the database (and Redis) that several replicas share.

The gateway asks here once, at construction, and this is the only place the choice is written:
approval requests and grants, idempotency records, rate-limit counters. The stores are imported
only when chosen, so a gateway without state imports neither :mod:`sqlite3` nor a database
driver.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model import Tool
from ..stores import ApprovalStore
from ..stores.idempotency import IdempotencyStore
from ..stores.sql import SqlDatabase
from .idempotency import LEASE_GRACE, IdempotencyStage
from .rate_limit import RateLimitStage

__all__ = ["StateStages", "state_stages"]

Scrub = Callable[[Tool, dict[str, Any]], dict[str, Any]]
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class StateStages:
    """The stores and stages that keep state, chosen together so they always agree on where."""

    approvals: ApprovalStore | None
    """Approval requests and grants (``None``: nobody decides, so none are kept)."""
    rate_limits: RateLimitStage
    idempotency: IdempotencyStage

    def close(self) -> None:
        """Close every store (the gateway's own; a shared database is closed by its owner)."""
        self.rate_limits.close()
        self.idempotency.close()
        if self.approvals is not None:
            self.approvals.close()


def state_stages(
    path: Path | None,
    database: SqlDatabase | None,
    *,
    redis_url: str | None = None,
    approvals: bool,
    per_agent: bool = False,
    lease_grace: float = LEASE_GRACE,
    scrub: Scrub,
    clock: Clock,
) -> StateStages:
    """Each kind of state in the shared database, else in the SQLite file at ``path``, else in
    memory; rate-limit counters in Redis first when ``redis_url`` is given. ``approvals``: keep
    approval requests at all (the gateway has an approver). ``clock`` (Unix seconds) is what
    the stores and stages read the time from."""
    return StateStages(
        approvals=_approval_store(path, database) if approvals else None,
        rate_limits=_rate_limit_stage(path, database, redis_url, per_agent=per_agent, clock=clock),
        idempotency=IdempotencyStage(
            _idempotency_store(path, database), scrub=scrub, lease_grace=lease_grace, clock=clock
        ),
    )


def _approval_store(path: Path | None, database: SqlDatabase | None) -> ApprovalStore:
    if database is not None:
        from ..stores.sql_approvals import SqlApprovalStore

        return SqlApprovalStore(database)
    from ..stores.sqlite_approvals import SQLiteApprovalStore

    return SQLiteApprovalStore(":memory:" if path is None else path)


def _rate_limit_stage(
    path: Path | None,
    database: SqlDatabase | None,
    redis_url: str | None,
    *,
    per_agent: bool,
    clock: Clock,
) -> RateLimitStage:
    if redis_url is not None:
        # Redis keeps its own time: its windows end by the server's clock.
        return RateLimitStage.redis(redis_url, per_agent=per_agent)
    if database is not None:
        from ..stores.sql_limits import SqlRateLimitStorage

        return RateLimitStage(SqlRateLimitStorage(database, clock=clock), per_agent=per_agent)
    if path is not None:
        return RateLimitStage.sqlite(path, per_agent=per_agent, clock=clock)
    return RateLimitStage(per_agent=per_agent, clock=clock)


def _idempotency_store(path: Path | None, database: SqlDatabase | None) -> IdempotencyStore | None:
    if database is not None:
        from ..stores.sql_idempotency import SqlIdempotencyStore

        return SqlIdempotencyStore(database)
    if path is not None:
        from ..stores.sqlite_idempotency import SQLiteIdempotencyStore

        return SQLiteIdempotencyStore(path)
    return None  # the stage's own memory store
