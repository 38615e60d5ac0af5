"""``@tool(run_in="thread")``: an async tool run on an event loop of its own, in its own thread.

An async tool is awaited on the gateway's event loop, which serves every request: one that
computes without awaiting, or calls blocking code, holds them all. Run off the loop, such a tool
only holds its own thread — ``/healthz`` and the other calls go on, and the gateway's timer ends
the call ``timeout`` on time. Python cannot stop a thread: a tool that never yields keeps its
thread (and a share of the GIL) until it returns by itself; cancelling the call cancels the tool's
task on its own loop, which stops a tool that awaits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal

__all__ = ["ABANDONED", "RUN_IN", "RunIn", "on_own_loop"]

#: Where a Python tool runs: ``loop`` (default: awaited on the caller's event loop) or
#: ``thread`` (an async tool on a fresh event loop in a thread of its own).
RunIn = Literal["loop", "thread"]
RUN_IN: Final = ("loop", "thread")

#: Set by the gateway for one call: told of a thread that goes on after its call was cancelled
#: (a timeout, a caller gone), with a future done when that thread returns — so the call's
#: concurrency slot stays taken until then, as for a sync tool's worker thread.
ABANDONED: contextvars.ContextVar[Callable[[concurrent.futures.Future[None]], None] | None] = (
    contextvars.ContextVar("toolgate_off_loop_abandoned", default=None)
)


class _OffLoopCall:
    """One call of the function on its own loop; cancellable from the caller's loop."""

    def __init__(
        self,
        func: Callable[..., Coroutine[Any, Any, Any]],
        kwargs: dict[str, Any],
        caller: asyncio.AbstractEventLoop,
        done: asyncio.Future[Any],
    ) -> None:
        self.func = func
        self.kwargs = kwargs
        self.caller = caller
        self.done = done
        self.context = contextvars.copy_context()
        self._lock = threading.Lock()
        self._cancelled = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self.finished: concurrent.futures.Future[None] = concurrent.futures.Future()
        """Done when the thread returns (whether or not anyone still waits for the result)."""

    def run(self) -> None:
        """The thread's body: run the coroutine to its end on a new loop, hand back the result."""
        try:
            result = self.context.run(asyncio.run, self._main())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, whatever it is
            self._settle(exc, failed=True)
        else:
            self._settle(result, failed=False)
        finally:
            self.finished.set_result(None)

    async def _main(self) -> Any:
        with self._lock:
            if self._cancelled:
                raise asyncio.CancelledError
            self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        return await self.func(**self.kwargs)

    def cancel(self) -> None:
        """Cancel the tool's task on its own loop (a tool that never awaits runs on)."""
        with self._lock:
            self._cancelled = True
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # its loop closed: the tool finished
                loop.call_soon_threadsafe(task.cancel)

    def _settle(self, value: Any, *, failed: bool) -> None:
        def settle() -> None:
            if self.done.done():
                return  # the call was cancelled (or timed out) meanwhile
            if failed:
                self.done.set_exception(value)
            else:
                self.done.set_result(value)

        with contextlib.suppress(RuntimeError):  # the caller's loop closed: nobody waits
            self.caller.call_soon_threadsafe(settle)


def on_own_loop(
    func: Callable[..., Coroutine[Any, Any, Any]], name: str
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """An async function that runs ``func`` on a new event loop in a daemon thread named after
    the tool (``name``), and awaits its result without holding the caller's loop."""

    @functools.wraps(func)
    async def run_off_loop(**kwargs: Any) -> Any:
        caller = asyncio.get_running_loop()
        done: asyncio.Future[Any] = caller.create_future()
        call = _OffLoopCall(func, kwargs, caller, done)
        # A daemon thread per call, not a pool: a tool that never returns holds only its own
        # thread, never a slot other calls queue for, and does not keep the process alive.
        threading.Thread(target=call.run, name=f"toolgate-tool {name}", daemon=True).start()
        try:
            return await done
        except asyncio.CancelledError:
            call.cancel()
            abandoned = ABANDONED.get()
            if abandoned is not None and not call.finished.done():
                abandoned(call.finished)
            raise

    run_off_loop.runs_off_loop = True  # type: ignore[attr-defined]
    return run_off_loop
