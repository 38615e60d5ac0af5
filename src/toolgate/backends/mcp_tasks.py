"""Upstream tools that must run as MCP tasks (protocol 2025-11-25, the tasks utility).

A tool whose upstream ``tools/list`` entry says ``execution.taskSupport: "required"`` refuses a
plain ``tools/call`` (the TypeScript SDK answers ``-32601``). toolgate calls such a tool as a task,
so that every surface — the HTTP API, ``toolgate call``, a plain MCP call — gets its final result:

1. ``tools/call`` with ``params.task: {ttl}`` → a ``CreateTaskResult`` (the upstream's task id);
2. ``tasks/get`` until the task is terminal, waiting the ``pollInterval`` the upstream asks for
   (bounded: :data:`MIN_POLL` to :data:`MAX_POLL` seconds), or until it says ``input_required``;
3. ``tasks/result`` → the ``CallToolResult``, handled as a plain call's result.

All of it within the tool's timeout. A call that ends early — its timeout, the toolgate caller
cancelling or going away — sends ``tasks/cancel`` upstream (shielded, bounded by
:data:`CANCEL_LIMIT`), so the upstream's work stops rather than running on unseen.

``input_required``: the upstream wants something from the requestor (an elicitation, which the
spec delivers on the ``tasks/result`` stream). toolgate's upstream client declares no
elicitation, so it asks ``tasks/result`` at once; the upstream's request is refused and the
upstream goes on as it decides (the reference server falls back to a default).

The task support is read from the raw listing the connection keeps (:func:`task_support`), not
from toolgate's ``Tool`` model.

The SDK (mcp 2.3) leaves ``tasks/*`` out of its method tables: ``tasks/get``, ``tasks/result``
and ``tasks/cancel`` go through the session's ``send_request`` with the SDK's own models. A
task-augmented ``tools/call`` cannot: the session checks every ``tools/call`` result as a
``CallToolResult`` and a ``CreateTaskResult`` has no ``content``; it, and ``tasks/result`` (whose
answer is a plain JSON object), are sent through the session's dispatcher (:func:`_send_raw`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio

from ..errors import ToolError
from .base import ToolTimeoutError

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

__all__ = [
    "CANCEL_LIMIT",
    "MAX_POLL",
    "MIN_POLL",
    "TERMINAL",
    "call_as_task",
    "task_required",
    "task_support",
]

log = logging.getLogger("toolgate.mcp")

#: Bounds on the wait between two ``tasks/get`` (seconds), whatever the upstream asks for.
MIN_POLL: Final = 0.05
MAX_POLL: Final = 5.0
#: The wait when the upstream suggests none.
DEFAULT_POLL: Final = 0.5
#: Seconds a ``tasks/cancel`` sent for an abandoned call may take.
CANCEL_LIMIT: Final = 5.0
#: Seconds the upstream is asked to keep the task past the call's timeout (so that its result is
#: still there when the last poll sees it done).
TTL_MARGIN: Final = 60.0
#: Statuses after which a task never changes.
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})


def task_support(tools: Iterable[Mapping[str, Any]] | None, name: str) -> str | None:
    """What the upstream listing ``tools`` declares as ``execution.taskSupport`` for tool
    ``name`` (``None`` when it says nothing, or the tool is not listed)."""
    for entry in tools or ():
        if entry.get("name") != name:
            continue
        execution = entry.get("execution")
        if isinstance(execution, Mapping):
            support = execution.get("taskSupport")
            if isinstance(support, str):
                return support
        return None
    return None


def task_required(tools: Iterable[Mapping[str, Any]] | None, name: str) -> bool:
    """Whether the upstream listing says tool ``name`` may only be called as a task."""
    return task_support(tools, name) == "required"


async def _send_raw(
    session: ClientSession, method: str, params: dict[str, Any], timeout: float
) -> dict[str, Any]:
    # The session's public send_request validates a tools/call result as a CallToolResult,
    # which a CreateTaskResult is not; the dispatcher below it sends the same request unchecked.
    dispatcher = session._dispatcher  # no public unchecked request in mcp 2.3
    raw: dict[str, Any] = await dispatcher.send_raw_request(method, params, {"timeout": timeout})
    return raw


def _poll_seconds(task: Any) -> float:
    interval = getattr(task, "poll_interval", None)
    if not isinstance(interval, int | float) or interval <= 0:
        return DEFAULT_POLL
    return min(MAX_POLL, max(MIN_POLL, interval / 1000))


async def call_as_task(
    session: ClientSession,
    tool: str,
    arguments: dict[str, Any],
    timeout: float,
    *,
    server: str,
    meta: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``tool`` on the upstream ``session`` as a task, within ``timeout`` seconds; the final
    ``CallToolResult`` in its JSON form. ``server`` names the upstream in messages; ``meta``
    (the trace context) goes in the ``tools/call`` request's ``_meta``.

    Raises :class:`~toolgate.backends.base.ToolTimeoutError` when the timeout passes (the
    upstream task is cancelled), :class:`~toolgate.ToolError` when the upstream refuses a step,
    answers one wrongly or its task ends ``cancelled``; a cancellation of the caller cancels the
    upstream task and propagates. A closed connection (``MCPError`` ``CONNECTION_CLOSED``, a
    closed stream) propagates as it is, for the connection to handle as a plain call's
    (:meth:`~toolgate.backends.mcp_connection.Connection.call_task`).
    """
    import mcp_types as types
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED
    from pydantic import ValidationError

    deadline = time.monotonic() + timeout
    ttl_ms = math.ceil((timeout + TTL_MARGIN) * 1000)
    params: dict[str, Any] = {"name": tool, "arguments": arguments, "task": {"ttl": ttl_ms}}
    if meta:
        params["_meta"] = dict(meta)
    task_id: str | None = None
    finished = False
    try:
        with anyio.fail_after(timeout):
            created = await _send_raw(session, "tools/call", params, timeout)
            if not isinstance(created, Mapping):
                raise ToolError(_wrongly(server, "tools/call", "not a JSON object"))
            if "task" not in created:
                # The upstream ran the call in place of a task (its choice): that is the result.
                finished = True
                return created
            task = types.CreateTaskResult.model_validate(created, by_name=False).task
            task_id = task.task_id
            log.info("MCP server %s: %s runs as task %s", server, tool, task_id)
            while task.status not in TERMINAL and task.status != "input_required":
                await anyio.sleep(_poll_seconds(task))
                task = await session.send_request(
                    types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)),
                    types.GetTaskResult,
                    request_read_timeout_seconds=max(0.1, deadline - time.monotonic()),
                )
            if task.status == "cancelled":
                finished = True
                message = f": {task.status_message}" if task.status_message else ""
                raise ToolError(
                    f"The MCP server {server} cancelled the task running {tool}{message}"
                )
            # Terminal (or waiting for input, delivered on the result stream): the result,
            # which the upstream sends once the task is terminal.
            result = await _send_raw(
                session,
                "tasks/result",
                {"taskId": task_id},
                max(0.1, deadline - time.monotonic()),
            )
            finished = True
            return result
    except TimeoutError:
        raise ToolTimeoutError(
            f"the task running {tool} on the MCP server {server} did not finish within "
            f"{timeout:g} s; it was cancelled"
        ) from None
    except ValidationError as exc:
        # A CreateTaskResult or GetTaskResult that is not one: a protocol fault, worded as
        # toolgate words others (bounded, no pydantic dump).
        raise ToolError(_wrongly(server, "task request", _problems(exc))) from None
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            raise  # the connection's to handle: it marks itself lost and says so
        raise ToolError(
            f"The MCP server {server} refused the task running {tool}: {exc.message} "
            f"(MCP error {exc.code})"
        ) from None
    finally:
        if task_id is not None and not finished:
            await _cancel(session, server, task_id)


#: Most problems, and characters, quoted from a wrong answer.
_MAX_PROBLEMS: Final = 3
_MAX_PROBLEM_TEXT: Final = 300


def _problems(exc: Any) -> str:
    """What is wrong with an answer, from a pydantic ``ValidationError``: at most
    :data:`_MAX_PROBLEMS` field paths and messages, bounded, without the input or pydantic's
    links."""
    errors = exc.errors(include_url=False, include_input=False)
    found = [
        f"{'.'.join(str(part) for part in error.get('loc', ())) or 'the answer'}: "
        f"{error.get('msg', 'invalid')}"
        for error in errors[:_MAX_PROBLEMS]
    ]
    more = len(errors) - len(found)
    text = "; ".join(found) + (f" (and {more} more)" if more > 0 else "")
    return text if len(text) <= _MAX_PROBLEM_TEXT else text[: _MAX_PROBLEM_TEXT - 1] + "…"


def _wrongly(server: str, what: str, problem: str) -> str:
    return f"The MCP server {server} answered the {what} wrongly: {problem}"


async def _cancel(session: ClientSession, server: str, task_id: str) -> None:
    """``tasks/cancel`` for a task whose caller is gone (best effort, shielded and bounded)."""
    import mcp_types as types

    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_LIMIT):
        try:
            answer = await session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
                types.CancelTaskResult,
                request_read_timeout_seconds=CANCEL_LIMIT,
            )
        except Exception as exc:  # noqa: BLE001 - the task may have ended meanwhile
            log.info("MCP server %s: cancelling task %s failed: %s", server, task_id, exc)
            return
        log.info("MCP server %s: task %s cancelled (%s)", server, task_id, answer.status)
