"""A cheap timeout for awaiting one coroutine.

``asyncio.timeout`` costs ~6 µs per use on this project's reference machine, and even a bare
``call_later`` timer ~3 µs: a large share of the pipeline's budget, paid by every async call
although most trivial tools finish without ever suspending. So the coroutine's first step runs
eagerly: if it finishes there, no timer is armed at all. Only a coroutine that really suspends gets
a timer, with the deadline counted from the start.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final, TypeVar

__all__ = ["CALLER_GONE", "CallTimedOut", "run_watched", "run_with_timeout"]

T = TypeVar("T")

#: The message a serving surface cancels a call's task with when its caller went away
#: (``task.cancel(CALLER_GONE)``): the Execute stage then ends the call ``cancelled`` — audited —
#: instead of letting the cancellation pass through unrecorded.
CALLER_GONE: Final = "toolgate: the caller went away"


class CallTimedOut(Exception):
    """Our deadline passed. Distinct from ``TimeoutError``, which a tool may raise on its own."""


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Go on driving a coroutine whose first step already ran, inside the current task.

    Whatever the coroutine yields (the future it waits on) is passed up to the task, and what
    the task sends or throws back is passed down, exactly as if the task ran it directly.
    """
    while True:
        try:
            value = yield yielded
        except BaseException as exc:  # noqa: BLE001 - cancellation and errors thrown in by the task
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                result: T = stop.value
                return result
        else:
            try:
                yielded = coro.send(value)
            except StopIteration as stop:
                result = stop.value
                return result


async def run_with_timeout(coro: Coroutine[Any, Any, T], seconds: float) -> T:
    """Await ``coro``; after ``seconds`` cancel it and raise :class:`CallTimedOut`.

    Cancellation that comes from elsewhere (the caller's own cancel) propagates unchanged.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    try:
        first = coro.send(None)
    except StopIteration as stop:
        done: T = stop.value
        return done

    task = asyncio.current_task()
    assert task is not None, "run_with_timeout must run inside a task"
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    handle = loop.call_at(deadline, expire)
    try:
        result = await _resume(coro, first)
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise CallTimedOut(f"timed out after {seconds} s") from None
        raise
    finally:
        handle.cancel()
    if expired:
        # The work swallowed our cancellation and finished anyway: keep its result, and take
        # back the cancel request so it does not hit the caller's next await.
        task.uncancel()
    return result


async def run_watched(
    coro: Coroutine[Any, Any, T], arm: Callable[[asyncio.Task[Any]], Callable[[], object]]
) -> T:
    """Await ``coro``, watched only if it suspends: its first step runs eagerly, and only when it
    does not finish there is ``arm(task)`` called (the task running it: e.g. to start a watcher
    that may cancel it); the function ``arm`` returns is called when ``coro`` ends. A call that
    finishes without suspending pays for no watcher at all."""
    try:
        first = coro.send(None)
    except StopIteration as stop:
        done: T = stop.value
        return done
    task = asyncio.current_task()
    assert task is not None, "run_watched must run inside a task"
    disarm = arm(task)
    try:
        return await _resume(coro, first)
    finally:
        disarm()
