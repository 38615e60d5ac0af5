"""Running the adapter's coroutines from synchronous code."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_sync"]

_T = TypeVar("_T")


class _SyncLoop:
    """One private event loop on a daemon thread, where every synchronous use of the adapter
    runs its coroutines: a gateway client that keeps connections (``toolgate.Client``) is
    always used on the same loop, and a sync caller inside a running loop does not fail."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="toolgate-langchain", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` to its end, in the caller's context (LangGraph finds its run's
        config, and ``interrupt()`` its task, through context variables)."""
        loop = self._ensure()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coroutine.close()
            # Waiting here for the loop this very code runs on would never end.
            raise RuntimeError(
                "a synchronous toolgate LangChain call was made from inside the adapter's own "
                "event loop; use the async API (ainvoke, atoolgate_tools) there"
            )
        context = contextvars.copy_context()

        async def in_context() -> _T:
            return await loop.create_task(coroutine, context=context)

        return asyncio.run_coroutine_threadsafe(in_context(), loop).result()


_sync_loop = _SyncLoop()


def run_sync(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coroutine`` on the adapter's private loop and return its result."""
    return _sync_loop.run(coroutine)
