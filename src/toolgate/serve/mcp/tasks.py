"""MCP tasks toward the client: task-augmented ``tools/call`` through toolgate (2025-11-25).

A client that negotiated protocol 2025-11-25 may send ``tools/call`` with ``params.task:
{ttl}``. toolgate answers at once with a ``CreateTaskResult`` and runs the call — the whole
pipeline, as ``gateway.call``: access, approvals, limits, audit — in the background:

* ``tasks/get`` — the task: ``working``; ``input_required`` while a person's approval is pending
  (the status message says where to decide; the decision is made in the web UI or with
  ``toolgate approvals``, not by the client); then ``completed``, ``failed`` (the result is an
  ``isError`` result) or ``cancelled``.
* ``tasks/result`` — waits for the end and returns the ``CallToolResult`` a plain call would have
  returned, with ``_meta["io.modelcontextprotocol/related-task"]``.
* ``tasks/cancel`` — cuts the call off (audited ``cancelled``; an upstream MCP task is cancelled
  upstream, see :mod:`toolgate.backends.mcp_tasks`); a terminal task cannot be cancelled
  (``-32602``).
* ``tasks/list`` — the caller's own tasks, newest first (one page: they are bounded).

Tasks belong to their caller: the agent, its credentials' namespaces and the session — on
stateful HTTP the session the SDK's session manager opened (its own ``Mcp-Session-Id``, bound to
the credential that opened it), on stdio the connection (one client per process). With
``stateless=True`` HTTP has no sessions, and the ``Mcp-Session-Id`` header a client sends is its
own word, never an identity: a task then belongs to the agent, its namespaces and the credential
(a digest of the ``Authorization`` header), so any request made with that credential reaches it.
Another caller asking for a task id gets the answer an unknown id gets (``-32602``, "Task not
found"); ids are 192-bit random.

Bounds: an agent (with one set of namespaces) holds at most ``max_live`` unfinished tasks across
all its sessions, and at most ``max_kept`` tasks in all (its oldest finished ones are forgotten
first); the surface holds at most ``max_live_total`` unfinished and ``max_kept_total`` tasks in
all. More is refused at ``tools/call`` (``-32600``). At most ``max_waiting`` ``tasks/result``
requests of an agent wait for an unfinished task at once (``-32600`` past that: poll
``tasks/get``). A task and its result are kept for its ``ttl`` from creation — the requested one,
capped at ``max_ttl`` — and at least :data:`GRACE` after it finished, then forgotten.

When a session ends (the client's ``DELETE``, its idle timeout, a stdio client gone) its
unfinished tasks are cut off like a plain call whose caller went away
(:mod:`toolgate.serve.caller_gone`: audited ``cancelled``; a tool with an idempotency key runs
to its end) and its tasks are forgotten: nobody can reach them any more. At shutdown
(:meth:`McpTasks.aclose`) every unfinished task is cut off the same way and waited for, so that
its audit record is written.

Which tools: on 2025-11-25 connections (and only there: no other protocol version has the field)
``tools/list`` says for each tool what toolgate
accepts. An upstream MCP tool keeps the ``execution`` its server listed (nothing said means
``forbidden``): a task-augmented call is accepted when that is ``optional`` or ``required`` and
refused with ``-32601`` otherwise, as the spec asks. Every other tool is toolgate's own and says
``taskSupport: "optional"`` (our declaration). An upstream tool whose server says ``required`` is
run as an upstream task by toolgate itself, so a plain call through toolgate works as well.
The ``initialize`` answer announces ``capabilities.tasks`` (``list``, ``cancel``,
``requests.tools.call``).

Other protocol versions (2025-06-18 and older, 2026-07-28) have no tasks. Nothing is
announced, ``execution`` is left out of ``tools/list`` entries (an upstream's too), ``tasks/*``
are answered ``-32601`` (Method not found), and a ``task`` field in their ``tools/call`` is
ignored (the call runs and answers as a plain call) — the spec's rule for a receiver without the
capability.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CancelTaskRequestParams,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    PaginatedRequestParams,
)

from ...errors import ErrorCode
from ...model import CallOutcome, CallStatus, McpEntry, Tool
from ...pipeline.timeouts import CALLER_GONE
from ..caller_gone import runs_to_its_end
from .approvals import pending_result
from .changes import _connection_of

if TYPE_CHECKING:
    from .server import McpSurface

__all__ = [
    "DEFAULT_TTL",
    "GRACE",
    "MAX_KEPT",
    "MAX_KEPT_TOTAL",
    "MAX_LIVE",
    "MAX_LIVE_TOTAL",
    "MAX_TTL",
    "MAX_WAITING",
    "RELATED_TASK_KEY",
    "TASKS_VERSION",
    "McpTasks",
]

logger = logging.getLogger(__name__)

#: The one protocol version with the tasks utility.
TASKS_VERSION: Final = "2025-11-25"
#: ``_meta`` key tying a message to its task.
RELATED_TASK_KEY: Final = "io.modelcontextprotocol/related-task"
#: Seconds a task is kept when the client asks for no ``ttl``, and the most it may ask for.
DEFAULT_TTL: Final = 600.0
MAX_TTL: Final = 3600.0
#: Seconds a finished task is kept at least (a task that outlived its ttl can still be read).
GRACE: Final = 60.0
#: Unfinished tasks per agent (all its sessions), and tasks kept per agent in all.
MAX_LIVE: Final = 16
MAX_KEPT: Final = 256
#: Unfinished tasks, and tasks kept, of every caller together.
MAX_LIVE_TOTAL: Final = 256
MAX_KEPT_TOTAL: Final = 4096
#: ``tasks/result`` requests of one agent waiting for an unfinished task at once.
MAX_WAITING: Final = 64
#: The ``pollInterval`` suggested to clients (milliseconds).
POLL_INTERVAL_MS: Final = 500
#: Seconds ``tasks/cancel`` waits for the cut-off call to be recorded.
CANCEL_WAIT: Final = 10.0
#: Seconds a session's end (and shutdown) waits for its cut-off calls to be recorded; below the
#: SDK's bound on a connection's clean-up (5 s in mcp 2.3).
END_WAIT: Final = 4.0
#: Where a connection remembers the session token its tasks are owned by.
_SESSION_KEY: Final = "toolgate.tasks.session"
#: What ``capabilities.tasks`` says in ``initialize``.
CAPABILITY: Final[dict[str, Any]] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}

_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})

#: Who owns a task: agent, credentials' namespaces, session (or, stateless, the credential).
Owner = tuple["str | None", "frozenset[str] | None", "str | None"]
#: Whose bounds a task counts against: agent and namespaces.
Holder = tuple["str | None", "frozenset[str] | None"]


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


@dataclass(slots=True, eq=False)
class _Task:
    """One task-augmented call and, once it ended, its result."""

    id: str
    owner: Owner
    tool: str
    ttl: float
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    status: str = "working"
    message: str | None = None
    result: dict[str, Any] | None = None
    runner: asyncio.Task[None] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)
    finished_at: float | None = None
    cancelling: bool = False

    def set(self, status: str, message: str | None) -> None:
        if self.status in _TERMINAL:
            return
        self.status, self.message, self.updated = status, message, time.time()

    def finish(self, status: str, message: str | None, result: dict[str, Any]) -> None:
        if self.status in _TERMINAL:
            return
        self.set(status, message)
        self.result = result
        self.finished_at = time.monotonic()
        self.done.set()

    def expired(self, now_wall: float, now: float) -> bool:
        if self.finished_at is None:
            return False
        return now_wall > self.created + self.ttl and now > self.finished_at + GRACE

    def wire(self) -> dict[str, Any]:
        """The ``Task`` object of the protocol."""
        task: dict[str, Any] = {
            "taskId": self.id,
            "status": self.status,
            "ttl": round(self.ttl * 1000),
            "createdAt": _iso(self.created),
            "lastUpdatedAt": _iso(self.updated),
            "pollInterval": POLL_INTERVAL_MS,
        }
        if self.message:
            task["statusMessage"] = self.message
        return task


class McpTasks:
    """The tasks of one MCP surface: task-augmented calls and ``tasks/*``."""

    def __init__(
        self,
        surface: McpSurface,
        *,
        max_ttl: float = MAX_TTL,
        max_live: int = MAX_LIVE,
        max_kept: int = MAX_KEPT,
        max_live_total: int = MAX_LIVE_TOTAL,
        max_kept_total: int = MAX_KEPT_TOTAL,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        if (
            max_ttl <= 0
            or max_live < 1
            or max_kept < max_live
            or max_live_total < 1
            or max_kept_total < max_live_total
            or max_waiting < 1
        ):
            raise ValueError(
                "max_ttl must be positive; max_live, max_live_total and max_waiting at least 1; "
                "max_kept at least max_live and max_kept_total at least max_live_total"
            )
        self.surface = surface
        self.max_ttl = max_ttl
        self.max_live = max_live
        self.max_kept = max_kept
        self.max_live_total = max_live_total
        self.max_kept_total = max_kept_total
        self.max_waiting = max_waiting
        self._tasks: dict[str, _Task] = {}
        self._waiting: dict[Holder, int] = {}

    def install(self, server: Server[Any]) -> None:
        """Serve ``tasks/*`` on ``server``, and task-augmented ``tools/call``."""
        server.add_request_handler("tasks/get", GetTaskRequestParams, self._get)
        server.add_request_handler("tasks/result", GetTaskPayloadRequestParams, self._result)
        server.add_request_handler("tasks/cancel", CancelTaskRequestParams, self._cancel)
        server.add_request_handler("tasks/list", PaginatedRequestParams, self._list)
        server.middleware.append(self._middleware)

    def close(self) -> None:
        """Cut off every unfinished task (at shutdown) without waiting: prefer :meth:`aclose`,
        which waits for their audit records."""
        self._cut_off(list(self._tasks.values()))

    async def aclose(self) -> None:
        """Cut off every unfinished task (at shutdown) and wait, bounded by :data:`END_WAIT`,
        for the cut-off calls to be recorded ``cancelled``."""
        runners = self._cut_off(list(self._tasks.values()))
        if runners:
            await asyncio.wait(runners, timeout=END_WAIT)

    def _cut_off(self, tasks: list[_Task]) -> list[asyncio.Task[None]]:
        """Cancel the unfinished ``tasks`` as calls whose caller went away (a tool with an
        idempotency key runs on, as a plain call's does); the runners cancelled."""
        cut = []
        for task in tasks:
            runner = task.runner
            if runner is None or runner.done():
                continue
            if runs_to_its_end(self.surface.gateway, task.tool):
                continue
            runner.cancel(CALLER_GONE)  # the pipeline records the call cancelled
            cut.append(runner)
        return cut

    async def _session_ended(self, session: str) -> None:
        """A session's connection closed: cut off its unfinished tasks, wait (bounded) for them
        to be recorded, and forget its tasks — nobody can reach them any more."""
        mine = [task for task in self._tasks.values() if task.owner[2] == session]
        runners = self._cut_off(mine)
        if runners:
            await asyncio.wait(runners, timeout=END_WAIT)
        for task in mine:
            self._tasks.pop(task.id, None)

    # -- the middleware: initialize, tools/list, task-augmented tools/call ----------------------

    async def _middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        method = ctx.method
        tasks_era = ctx.protocol_version == TASKS_VERSION
        if method.startswith("tasks/") and not tasks_era:
            # Only 2025-11-25 has the tasks utility; nothing announced it to this client.
            raise MCPError(
                METHOD_NOT_FOUND,
                f"Method not found: {method} (protocol {ctx.protocol_version} has no tasks)",
            )
        if method == "tools/call" and tasks_era:
            params = ctx.params
            if isinstance(params, Mapping) and params.get("task") is not None:
                # Answered here: the SDK checks every tools/call result as a CallToolResult,
                # which a CreateTaskResult is not.
                return await self._create(ctx, params)
        result = await call_next(ctx)
        if method == "initialize" and isinstance(result, dict):
            if result.get("protocolVersion") == TASKS_VERSION:
                capabilities = dict(result.get("capabilities") or {})
                capabilities["tasks"] = CAPABILITY
                result = {**result, "capabilities": capabilities}
        elif (
            method == "tools/list"
            and isinstance(result, dict)
            and isinstance(result.get("tools"), list)
        ):
            if tasks_era:
                tools = [self._with_task_support(entry) for entry in result["tools"]]
            else:
                # No other protocol version has `execution`: an upstream's is left out too.
                tools = [_without_execution(entry) for entry in result["tools"]]
            result = {**result, "tools": tools}
        return result

    def _with_task_support(self, entry: Any) -> Any:
        """A ``tools/list`` entry with ``execution`` as toolgate declares it: an upstream MCP
        tool's own ``execution`` is passed through as listed (absent means ``forbidden``); every
        other tool is ours, and ours accept a task (``optional``)."""
        if not isinstance(entry, Mapping) or _upstream_tool(self.surface, entry.get("name")):
            return entry
        return {**entry, "execution": {"taskSupport": "optional"}}

    # -- ownership ------------------------------------------------------------------------------

    def _owner(self, ctx: ServerRequestContext[Any, Any]) -> Owner:
        """Who owns the tasks this request creates or asks about (see the module docstring).

        The session part is never a header the client chose: on stateful HTTP the connection's
        session id is the one the SDK's session manager issued and checked (against the
        credential that opened it); on stdio (no HTTP request) the connection is the client;
        stateless HTTP has no session, and the credential stands in for it."""
        surface = self.surface
        agent, namespaces = surface.agent(ctx), surface.namespaces(ctx)
        connection = _connection_of(ctx.session)
        if connection is not None and (connection.session_id or ctx.request is None):
            session = connection.state.get(_SESSION_KEY)
            if not isinstance(session, str):
                session = f"session:{secrets.token_urlsafe(12)}"
                connection.state[_SESSION_KEY] = session
                # The connection unwinds its exit stack when it closes: the session ended.
                connection.exit_stack.push_async_callback(self._session_ended, session)
            return agent, namespaces, session
        if ctx.request is None:
            # No connection to watch (an SDK without one): the surface's own session.
            return agent, namespaces, surface.session_of(ctx)
        return agent, namespaces, _credential(ctx.request)

    def _purge(self) -> None:
        now_wall, now = time.time(), time.monotonic()
        for task_id in [key for key, task in self._tasks.items() if task.expired(now_wall, now)]:
            del self._tasks[task_id]

    def _find(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> _Task:
        self._purge()
        task = self._tasks.get(task_id)
        if task is None or task.owner != self._owner(ctx):
            # Another caller's task is answered as a missing one: nothing tells them apart.
            raise MCPError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return task

    # -- tools/call with a task -----------------------------------------------------------------

    async def _create(
        self, ctx: ServerRequestContext[Any, Any], raw: Mapping[str, Any]
    ) -> dict[str, Any]:
        surface = self.surface
        params = CallToolRequestParams.model_validate(raw, by_name=False)
        agent, namespaces, _session = owner = self._owner(ctx)
        conversation = surface.conversation(ctx)
        name = params.name
        entry = surface.gateway.registry.get(name)
        # An unknown tool, one hidden from the caller or not shown to its session, is the
        # protocol error a plain call gets, now rather than in the task.
        if (
            entry is None
            or not surface.callable_by(entry.tool.id, agent, namespaces)
            or not surface._shown(conversation, name, agent, namespaces)
        ):
            raise surface.unknown_tool(name, agent, namespaces, conversation)
        support = _declared_support(entry.tool)
        if support not in ("optional", "required"):
            # The spec's answer for a task-augmented call to a tool that does not take one; the
            # upstream said so in the listing the client was given.
            raise MCPError(
                METHOD_NOT_FOUND,
                f"Tool {name} cannot be called as a task: its MCP server declares taskSupport "
                f"{support or 'forbidden (by saying nothing)'!r}; call it without 'task'",
            )
        self._make_room(owner)
        requested = params.task.ttl if params.task is not None else None
        ttl = DEFAULT_TTL if requested is None else max(0.0, requested / 1000)
        task = _Task(secrets.token_urlsafe(24), owner, name, min(ttl, self.max_ttl))
        self._tasks[task.id] = task
        arguments = dict(params.arguments or {})
        # The call carries the session plain calls carry (audit, overflow files), not the owner's.
        session = surface.session_of(ctx)
        task.runner = asyncio.ensure_future(
            self._run(task, arguments, (agent, namespaces, session), conversation)
        )
        return {"task": task.wire()}

    def _make_room(self, owner: Owner) -> None:
        """Refuse a new task past the bounds on unfinished tasks (the agent's, across its
        sessions, and everyone's); forget the oldest finished ones past the bounds on kept
        tasks."""
        self._purge()
        holder = owner[:2]
        everyone = list(self._tasks.values())
        mine = [task for task in everyone if task.owner[:2] == holder]
        if sum(task.status not in _TERMINAL for task in mine) >= self.max_live:
            raise MCPError(
                INVALID_REQUEST,
                f"Too many tasks in flight: at most {self.max_live} unfinished tasks per caller "
                "(an agent's sessions together); wait for one to finish or cancel one",
            )
        if sum(task.status not in _TERMINAL for task in everyone) >= self.max_live_total:
            raise MCPError(
                INVALID_REQUEST,
                f"Too many tasks in flight: toolgate runs at most {self.max_live_total} "
                "unfinished tasks in all; try again later",
            )
        for pool, bound in ((mine, self.max_kept), (everyone, self.max_kept_total)):
            finished = sorted(
                (task for task in pool if task.status in _TERMINAL and task.id in self._tasks),
                key=lambda task: task.created,
            )
            kept = sum(task.id in self._tasks for task in pool)
            for old in finished[: max(0, kept + 1 - bound)]:
                del self._tasks[old.id]

    async def _run(
        self, task: _Task, arguments: dict[str, Any], owner: Owner, conversation: object
    ) -> None:
        surface = self.surface
        agent, namespaces, session = owner
        outcome: CallOutcome | None = None
        try:
            outcome = await surface.gateway.call(
                task.tool, arguments, agent=agent, session_id=session, namespaces=namespaces
            )
            if outcome.status is CallStatus.PENDING_APPROVAL:
                outcome = await self._approval(task, outcome)
            result = surface.result(outcome, agent, task.tool, namespaces, conversation)
        except asyncio.CancelledError:
            task.finish("cancelled", "The call was cancelled.", _cancelled_result())
            raise
        except MCPError as error:
            # The tool went away (or out of the caller's reach) after the task was created.
            result = {"content": [{"type": "text", "text": error.error.message}], "isError": True}
        except Exception:
            logger.exception("task %s (%s) failed", task.id, task.tool)
            result = {
                "content": [{"type": "text", "text": "The call failed inside toolgate."}],
                "isError": True,
            }
        failed = bool(result.get("isError"))
        text = _first_text(result) if failed else None
        if task.cancelling or (outcome is not None and outcome.code is ErrorCode.CANCELLED):
            task.finish("cancelled", "Cancelled by the client.", result)
        else:
            task.finish("failed" if failed else "completed", text, result)

    async def _approval(self, task: _Task, outcome: CallOutcome) -> CallOutcome:
        """Wait (``input_required``) for a person's decision on a pending call; the outcome
        then, or the pending outcome when nobody decided in time."""
        service = self.surface.gateway.approvals
        request = outcome.approval
        if service is None or request is None:
            return outcome
        pending = pending_result(outcome, self.surface.approvals_url)
        task.set("input_required", _first_text(pending))
        # Until the request expires (`approvals.ttl`), as long as a person may still decide.
        decided = await service.wait(request, max(0.0, request.expires_at - service.clock()))
        task.set("working", None)
        return outcome if decided is None else decided

    # -- tasks/* --------------------------------------------------------------------------------

    async def _get(
        self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams
    ) -> dict[str, Any]:
        return self._find(ctx, params.task_id).wire()

    async def _result(
        self, ctx: ServerRequestContext[Any, Any], params: GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if not task.done.is_set():
            holder = task.owner[:2]
            waiting = self._waiting.get(holder, 0)
            if waiting >= self.max_waiting:
                raise MCPError(
                    INVALID_REQUEST,
                    f"Too many tasks/result requests waiting: at most {self.max_waiting} per "
                    "caller; poll tasks/get and ask for the result once the task has ended",
                )
            self._waiting[holder] = waiting + 1
            try:
                await task.done.wait()
            finally:
                left = self._waiting.get(holder, 1) - 1
                if left > 0:
                    self._waiting[holder] = left
                else:
                    self._waiting.pop(holder, None)
        result = dict(task.result or _cancelled_result())
        meta = dict(result.get("_meta") or {})
        meta[RELATED_TASK_KEY] = {"taskId": task.id}
        result["_meta"] = meta
        return result

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams
    ) -> dict[str, Any]:
        task = self._find(ctx, params.task_id)
        if task.status in _TERMINAL:
            raise MCPError(
                INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{task.status}'"
            )
        runner = task.runner
        if runner is not None and not runner.done():
            task.cancelling = True
            runner.cancel(CALLER_GONE)  # the pipeline records the call cancelled
            # Answer once the call is recorded (and an upstream task was told), bounded.
            await asyncio.wait([runner], timeout=CANCEL_WAIT)
        task.finish("cancelled", "Cancelled by the client.", _cancelled_result())
        return task.wire()

    async def _list(
        self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams
    ) -> dict[str, Any]:
        if params.cursor is not None:
            raise MCPError(INVALID_PARAMS, "Invalid cursor: tasks/list has one page")
        self._purge()
        owner = self._owner(ctx)
        mine = [task for task in self._tasks.values() if task.owner == owner]
        mine.sort(key=lambda task: task.created, reverse=True)
        return {"tasks": [task.wire() for task in mine]}


def _credential(request: Any) -> str:
    """The stateless owner's stand-in for a session: a digest of the request's credential
    (its ``Authorization`` header; none when the server asks for none)."""
    headers = getattr(request, "headers", None)
    value = headers.get("authorization") if isinstance(headers, Mapping) else None
    if not isinstance(value, str) or not value:
        return "credential:none"
    return "credential:" + hashlib.sha256(value.encode()).hexdigest()[:32]


def _without_execution(entry: Any) -> Any:
    if isinstance(entry, Mapping) and "execution" in entry:
        return {key: value for key, value in entry.items() if key != "execution"}
    return entry


def _cancelled_result() -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "The call was cancelled."}], "isError": True}


def _first_text(result: Mapping[str, Any]) -> str | None:
    for block in result.get("content") or ():
        if isinstance(block, Mapping) and isinstance(block.get("text"), str):
            text: str = block["text"]
            return text
    return None


def _declared_support(tool: Tool) -> str:
    """``taskSupport`` as toolgate lists it for ``tool``: the upstream's word for an upstream
    MCP tool (``""`` when it said nothing), ``optional`` for every tool of ours."""
    if not isinstance(tool.entry, McpEntry):
        return "optional"
    metadata = tool.entry.metadata
    execution = metadata.execution if metadata is not None else None
    support = execution.get("taskSupport") if execution is not None else None
    return support if isinstance(support, str) else ""


def _upstream_tool(surface: McpSurface, name: Any) -> bool:
    found = surface.gateway.registry.get(name) if isinstance(name, str) else None
    return found is not None and isinstance(found.tool.entry, McpEntry)
