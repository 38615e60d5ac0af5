"""An in-memory rate-limit storage for the ``limits`` library (fixed windows).

The Python API's default: counters live as long as the gateway. Unlike ``limits``' own
``MemoryStorage`` it starts no timer threads (expired counters are dropped lazily) and takes an
injectable clock. Thread-safe: every counter update happens under one lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from limits.storage import Storage

__all__ = ["MemoryRateLimitStorage"]

#: Counter updates between two sweeps of expired counters.
_SWEEP_EVERY: Final = 4096


class MemoryRateLimitStorage(Storage):
    """Fixed-window counters in a dict: ``key → (count, expires_at)``."""

    STORAGE_SCHEME = None  # not reachable through limits' URI registry

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(None)
        self.clock = clock
        """Unix seconds; the rate-limit stage reads reset times against the same clock."""
        self._lock = threading.Lock()
        self._counters: dict[str, tuple[int, float]] = {}
        self._updates = 0

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return ValueError

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Add ``amount`` to the counter (starting a window of ``expiry`` seconds when the
        counter is new or expired); return the new count."""
        now = self.clock()
        with self._lock:
            count, expires_at = self._counters.get(key, (0, 0.0))
            if expires_at <= now:
                count, expires_at = 0, now + expiry
            count += amount
            self._counters[key] = (count, expires_at)
            self._updates += 1
            if self._updates % _SWEEP_EVERY == 0:
                self._sweep(now)
            return count

    def _sweep(self, now: float) -> None:
        for stale in [key for key, (_, at) in self._counters.items() if at <= now]:
            del self._counters[stale]

    def get(self, key: str) -> int:
        """The count of the current window (0 when none is open)."""
        now = self.clock()
        with self._lock:
            count, expires_at = self._counters.get(key, (0, 0.0))
        return count if expires_at > now else 0

    def get_expiry(self, key: str) -> float:
        """When the current window ends (Unix seconds; now when none is open)."""
        now = self.clock()
        with self._lock:
            _, expires_at = self._counters.get(key, (0, 0.0))
        return expires_at if expires_at > now else now

    def check(self) -> bool:
        """Always healthy."""
        return True

    def reset(self) -> int | None:
        """Forget every counter; returns how many there were."""
        with self._lock:
            count = len(self._counters)
            self._counters.clear()
        return count

    def clear(self, key: str) -> None:
        """Forget one counter."""
        with self._lock:
            self._counters.pop(key, None)
