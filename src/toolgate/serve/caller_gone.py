"""A caller that goes away while its tool runs: the call is cut off, unless its tool has an
idempotency key.

Every serving surface treats it alike. The call's task is cancelled with
:data:`~toolgate.pipeline.timeouts.CALLER_GONE`: the tool is cancelled (a script's process tree
killed) and the Execute stage records the call ``cancelled`` in the audit log, instead of the
cancellation passing through unrecorded. A tool with an idempotency key is not cut off: its call
runs to its end and its outcome is stored under its key, so that the caller's retry receives it
(replayed) rather than running the tool twice or learning nothing.

Two ways to learn that the caller left:

* :func:`unless_gone` — an ASGI request answered here (the HTTP call route, MCP's fast path):
  watch the request for ``http.disconnect``.
* :func:`outliving_cancellation` — a call made inside an MCP SDK handler: the SDK cancels the
  handler when the peer sends ``notifications/cancelled``, when a 2026-07-28 POST's connection
  drops, or when the session or stdio stream ends. That cancellation would pass through the
  pipeline unrecorded; the call runs in a task of its own and is cut off as above instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

import anyio
from starlette.types import Receive

from ..gateway import Gateway
from ..pipeline.timeouts import CALLER_GONE, run_watched

__all__ = ["GONE", "Gone", "outliving_cancellation", "runs_to_its_end", "unless_gone"]

T = TypeVar("T")


class Gone:
    """The type of :data:`GONE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "GONE"


#: What :func:`unless_gone` returns when the caller went away: there is nobody to answer.
GONE: Final = Gone()


def runs_to_its_end(gateway: Gateway, tool: str) -> bool:
    """Whether a call of ``tool`` (an id or provider-safe name) goes on when its caller goes
    away: a tool with an idempotency key, so that its outcome is recorded and the caller's retry
    with the same key receives it (replayed) instead of an unknown result."""
    entry = gateway.registry.get(tool)
    return entry is not None and bool(entry.tool.idempotency.key_template)


def _nothing() -> None:
    pass


async def unless_gone(
    call: Coroutine[Any, Any, T], receive: Receive, keep_going: Callable[[], bool]
) -> T | Gone:
    """Await ``call`` (a gateway call answering an ASGI request); when the client disconnects
    while it runs, cut it off as gone (see the module docstring) unless ``keep_going()``.

    ``receive`` is the request's, read past its body (what it replays first is skipped). Only a
    call that suspends is watched: one that finishes at once pays for nothing. Returns
    :data:`GONE` when the client went away, whatever became of the call: nobody is left to
    answer."""
    gone: list[bool] = []

    def arm(task: asyncio.Task[Any]) -> Callable[[], object]:
        if keep_going():
            return _nothing
        return asyncio.ensure_future(_cut_off_when_gone(receive, task, gone)).cancel

    try:
        result = await run_watched(call, arm)
    except asyncio.CancelledError as exc:
        if gone and exc.args[:1] == (CALLER_GONE,):
            # Cut off before the tool ran (waiting for its turn, say): nothing to record.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            return GONE
        raise
    return GONE if gone else result


async def _cut_off_when_gone(receive: Receive, task: asyncio.Task[Any], gone: list[bool]) -> None:
    """Wait for the client to disconnect, then cancel the call's ``task`` with
    :data:`~toolgate.pipeline.timeouts.CALLER_GONE`. Cancelled itself when the call ends first."""
    while (await receive())["type"] != "http.disconnect":
        pass  # the body, replayed: the request was read already
    gone.append(True)
    task.cancel(CALLER_GONE)


async def outliving_cancellation(call: Coroutine[Any, Any, T], keep_going: Callable[[], bool]) -> T:
    """Await ``call`` in a task of its own, so that a cancellation of the awaiting task (an MCP
    SDK handler's: the peer cancelled the request or went away) does not cut it off unrecorded.

    On such a cancellation the call is cancelled with
    :data:`~toolgate.pipeline.timeouts.CALLER_GONE` — unless ``keep_going()`` — and waited for,
    shielded from further cancellation, so that its audit record is written (or, kept going,
    its outcome stored under its idempotency key); then the cancellation goes on."""
    task = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        if not keep_going():
            task.cancel(CALLER_GONE)
        # The SDK cancels through anyio cancel scopes, which cancel again at every await:
        # shielded, the wait is not interrupted.
        with anyio.CancelScope(shield=True):
            await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation below is what the handler reports
        raise
