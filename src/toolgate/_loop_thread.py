"""A private event loop on a daemon thread, for running coroutines from synchronous code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """Starts on first use; ``run`` blocks the calling thread until the coroutine is done.

    Works from any thread, including one whose own event loop is running (the loop is blocked
    for the duration, as with any synchronous call).
    """

    def __init__(self, name: str = "toolgate-loop") -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the private loop and return its result."""
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        return future.result()

    @property
    def started(self) -> bool:
        """Whether the loop runs (it starts on first use)."""
        return self._loop is not None

    def close(self) -> None:
        """Stop the loop and join its thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.close()
