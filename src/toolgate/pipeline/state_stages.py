"""Where the stateful stages keep their state: in memory, in the SQLite state file, or in the
database (and Redis) that several replicas share.

The gateway asks here once, at construction; the stores are imported only when chosen, so a
gateway without state imports neither :mod:`sqlite3` nor a database driver.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..model import Tool
from ..stores import ApprovalStore
from ..stores.sql import SqlDatabase
from .idempotency import LEASE_GRACE, IdempotencyStage
from .rate_limit import RateLimitStage

__all__ = ["approval_store", "idempotency_stage", "rate_limit_stage"]

Scrub = Callable[[Tool, dict[str, Any]], dict[str, Any]]


def approval_store(path: Path | None, database: SqlDatabase | None) -> ApprovalStore:
    """Approvals in the shared database, else in the SQLite file, else in a private memory one."""
    if database is not None:
        from ..stores.sql_approvals import SqlApprovalStore

        return SqlApprovalStore(database)
    from ..stores.sqlite_approvals import SQLiteApprovalStore

    return SQLiteApprovalStore(":memory:" if path is None else path)


def rate_limit_stage(
    path: Path | None, database: SqlDatabase | None, redis_url: str | None, *, per_agent: bool
) -> RateLimitStage:
    """Counters in Redis, else in the shared database, else in the SQLite file, else in memory."""
    if redis_url is not None:
        return RateLimitStage.redis(redis_url, per_agent=per_agent)
    if database is not None:
        from ..stores.sql_limits import SqlRateLimitStorage

        return RateLimitStage(SqlRateLimitStorage(database), per_agent=per_agent)
    if path is not None:
        return RateLimitStage.sqlite(path, per_agent=per_agent)
    return RateLimitStage(per_agent=per_agent)


def idempotency_stage(
    path: Path | None,
    database: SqlDatabase | None,
    *,
    scrub: Scrub,
    lease_grace: float = LEASE_GRACE,
) -> IdempotencyStage:
    """Records in the shared database, else in the SQLite file, else in memory."""
    if database is not None:
        from ..stores.sql_idempotency import SqlIdempotencyStore

        return IdempotencyStage(SqlIdempotencyStore(database), scrub=scrub, lease_grace=lease_grace)
    if path is not None:
        from ..stores.sqlite_idempotency import SQLiteIdempotencyStore

        return IdempotencyStage(SQLiteIdempotencyStore(path), scrub=scrub, lease_grace=lease_grace)
    return IdempotencyStage(scrub=scrub, lease_grace=lease_grace)
