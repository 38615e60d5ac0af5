"""The RateLimit stage: ``callsPerMinute`` and ``callsPerDay`` per tool (optionally per agent).

The algorithm is the ``limits`` library's fixed-window strategy; the counters live in a
``limits`` :class:`~limits.storage.Storage`: :class:`~toolgate.stores.limits_memory.
MemoryRateLimitStorage` (the Python API's default), :class:`~toolgate.stores.sql_limits.
SQLiteRateLimitStorage` (the embedded store, so a daily limit survives a restart), or any storage
of ``limits`` itself (``limits.storage.storage_from_string("redis://…")``) for a shared one.

A window starts at the first call counted in it and lasts a minute (a day); the count is
incremented atomically by the storage, so of N concurrent callers exactly ``limit`` succeed.
With both limits the stage first tests both (a read) and only then counts the call against each,
shortest window first: a call refused by the daily limit does not spend the per-minute budget
(only a call that loses a race for the last daily slot may, and at most until its minute ends).

A refused call ends in ``rate_limited`` saying how many seconds until a retry can succeed (the
end of the latest exhausted window); the same number is in ``metadata["rate_limit"]``.

``limits`` is imported when a stage is built, not by ``import toolgate``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .._urls import redact_url
from ..errors import ErrorCode, StateUnavailableError
from ..model import CallOutcome, RateLimit
from ..registry import RegisteredTool
from .approval_keys import APPROVAL_TAKEN
from .state import CallState, Handler, error_outcome

if TYPE_CHECKING:
    from limits import RateLimitItem
    from limits.storage import Storage

__all__ = ["RateLimitStage"]

#: Identifies toolgate's counters in a shared storage.
_NAMESPACE = "toolgate"

#: Seconds to wait for Redis before a rate-limited call ends ``unavailable``.
_REDIS_TIMEOUT = 1.0


@dataclass(frozen=True, slots=True)
class _Limit:
    item: RateLimitItem
    calls: int
    per: str  # "minute" / "day"


class RateLimitStage:
    """Refuses calls over a tool's ``callsPerMinute`` / ``callsPerDay`` with ``rate_limited``."""

    name = "rate_limit"
    suspends = False  # storage calls are short and synchronous (a lock, one SQLite statement)

    def __init__(
        self,
        storage: Storage | None = None,
        *,
        per_agent: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """
        Args:
            storage: Where the counters live (default: in memory, for this stage's lifetime).
            per_agent: Count each agent separately (each agent gets the tool's full limits)
                instead of all callers together.
            clock: Unix seconds, to turn window ends into "retry in N s" (default: the
                storage's ``clock`` attribute if it has one, else :func:`time.time`).
        """
        from limits.errors import StorageError
        from limits.strategies import FixedWindowRateLimiter

        self._storage_errors = StorageError
        self.where = "the rate-limit storage"
        """Where the counters live, for messages."""
        self.in_redis = False
        """Whether the counters live in Redis (built by :meth:`redis`)."""

        if storage is None:
            from ..stores.limits_memory import MemoryRateLimitStorage

            storage = (
                MemoryRateLimitStorage() if clock is None else MemoryRateLimitStorage(clock=clock)
            )
        self.storage = storage
        self.per_agent = per_agent
        found: Callable[[], float] = getattr(storage, "clock", time.time)
        self.clock: Callable[[], float] = found if clock is None else clock
        self._limiter = FixedWindowRateLimiter(storage)
        self.already_counted: Callable[[CallState], bool] | None = None
        """Tells calls counted before (a retry attaching to a decided approval request); set
        by the gateway to :meth:`ApprovalStage.decided`."""
        self._limits: dict[RateLimit, tuple[_Limit, ...]] = {}

    @classmethod
    def sqlite(
        cls,
        path: Path | str,
        *,
        per_agent: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> RateLimitStage:
        """A stage whose counters persist in the SQLite database at ``path``."""
        from ..stores.sqlite_limits import SQLiteRateLimitStorage

        return cls(SQLiteRateLimitStorage(path, clock=clock), per_agent=per_agent, clock=clock)

    @classmethod
    def redis(
        cls, url: str, *, per_agent: bool = False, key_prefix: str = "toolgate"
    ) -> RateLimitStage:
        """A stage whose counters live in Redis at ``url``, shared by every replica using it.

        A Redis that does not answer within a second makes rate-limited calls ``unavailable``
        (never unlimited); calls to tools without limits do not touch it.
        """
        from limits.storage import RedisStorage

        storage = RedisStorage(
            url,
            key_prefix=key_prefix,
            wrap_exceptions=True,
            socket_timeout=_REDIS_TIMEOUT,
            socket_connect_timeout=_REDIS_TIMEOUT,
        )
        stage = cls(storage, per_agent=per_agent)
        stage.where = f"Redis at {redact_url(url)}"
        stage.in_redis = True
        return stage

    def close(self) -> None:
        """Release the storage, when it has anything to release."""
        close: Any = getattr(self.storage, "close", None)
        if callable(close):
            close()

    def applies_to(self, entry: RegisteredTool) -> bool:
        rate = entry.tool.safety.rate_limit
        return rate is not None and (
            rate.calls_per_minute is not None or rate.calls_per_day is not None
        )

    def _limits_for(self, rate: RateLimit) -> tuple[_Limit, ...]:
        found = self._limits.get(rate)
        if found is None:
            from limits import RateLimitItemPerDay, RateLimitItemPerMinute

            made: list[_Limit] = []
            if rate.calls_per_minute is not None:
                item: RateLimitItem = RateLimitItemPerMinute(
                    rate.calls_per_minute, namespace=_NAMESPACE
                )
                made.append(_Limit(item, rate.calls_per_minute, "minute"))
            if rate.calls_per_day is not None:
                item = RateLimitItemPerDay(rate.calls_per_day, namespace=_NAMESPACE)
                made.append(_Limit(item, rate.calls_per_day, "day"))
            found = self._limits[rate] = tuple(made)
        return found

    def identifiers(self, tool_id: str, agent: str | None) -> tuple[str, ...]:
        """What a counter is keyed by (quoted: ``/`` separates them in ``limits``' keys)."""
        if self.per_agent:
            return _quoted(tool_id), "agent", _quoted(agent or "")
        return (_quoted(tool_id),)

    def acquire(self, rate: RateLimit, tool_id: str, agent: str | None) -> _Refusal | None:
        """Count one call; ``None`` when it may run, else why not and when to retry."""
        limits = self._limits_for(rate)
        ids = self.identifiers(tool_id, agent)
        limiter = self._limiter
        if len(limits) > 1:
            exhausted = [limit for limit in limits if not limiter.test(limit.item, *ids)]
            if exhausted:
                return self._refusal(exhausted, ids)
        for limit in limits:
            if not limiter.hit(limit.item, *ids):
                exhausted = [other for other in limits if not limiter.test(other.item, *ids)]
                return self._refusal(exhausted or [limit], ids)
        return None

    def _refusal(self, exhausted: list[_Limit], ids: tuple[str, ...]) -> _Refusal:
        now = self.clock()
        resets = [
            self._limiter.get_window_stats(limit.item, *ids).reset_time for limit in exhausted
        ]
        retry_after = max(1, math.ceil(max(resets) - now))
        return _Refusal(exhausted[-1], retry_after)

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        rate = state.tool.safety.rate_limit
        if rate is None or APPROVAL_TAKEN in state.metadata:
            # The run a person's approval starts was counted when the agent asked: counting it
            # again would refuse an approved call (and use the approval up) for the same call.
            return await proceed(state)
        if self.already_counted is not None and self.already_counted(state):
            # Likely the agent's retry after a person decided (it runs the approved call, or
            # collects the refusal): the call counted when it asked. The approval stage
            # charges it after all when it turns out to be a new call (a grant, a race lost).
            state.uncounted = self.refusal
            return await proceed(state)
        refusal = self.refusal(state)
        return await proceed(state) if refusal is None else refusal

    def refusal(self, state: CallState) -> CallOutcome | None:
        """Count this call against its tool's limits: ``None`` when it may proceed, else the
        ``rate_limited`` outcome. Raises :class:`StateUnavailableError` when the counters
        cannot be reached (fail closed, never unlimited)."""
        rate = state.tool.safety.rate_limit
        if rate is None:
            return None
        try:
            refusal = self.acquire(rate, state.tool.id, state.agent)
        except self._storage_errors as exc:  # Redis down: fail closed, never unlimited
            raise StateUnavailableError(
                f"the rate-limit counters in {self.where} are unavailable ({exc})"
            ) from exc
        if refusal is None:
            return None
        limit = refusal.limit
        scope = f" for agent {state.agent or '(anonymous)'}" if self.per_agent else ""
        state.metadata["rate_limit"] = {
            "limit": limit.calls,
            "per": limit.per,
            "per_agent": self.per_agent,
            "retry_after": refusal.retry_after,
        }
        return error_outcome(
            state,
            ErrorCode.RATE_LIMITED,
            f"Tool {state.tool.id} is rate limited: it allows at most {limit.calls} "
            f"call{'s' if limit.calls != 1 else ''} per {limit.per}{scope}, and that limit is "
            f"used up. Retry in {refusal.retry_after} s; do not retry sooner.",
        )


@lru_cache(maxsize=4096)
def _quoted(name: str) -> str:
    # Tool ids and agent names repeat on every call: quote each once.
    return quote(name, safe="")


@dataclass(frozen=True, slots=True)
class _Refusal:
    limit: _Limit
    """The exhausted limit the message names (the longest one when several are)."""
    retry_after: int
    """Whole seconds until a retry can succeed."""
