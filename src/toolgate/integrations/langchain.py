"""toolgate's tools as LangChain ``BaseTool``s, with approvals as LangGraph interrupts.

:func:`toolgate_tools` lists the tools a :class:`~toolgate.integrations.base.ToolGateway` lets its
agent call and makes one :class:`ToolgateTool` per tool. Each tool's ``args_schema`` is the JSON
Schema exactly as declared (a dict: LangChain hands it to the model unchanged, no pydantic
model in between), and every call goes through the gateway with:

* ``session_id`` — the one given, else the LangGraph thread (``configurable.thread_id``);
* ``workspace`` — the adapter option;
* ``tool_call_id`` — the model's tool call id, so each tool call has its own approval request;
* ``idempotency_key`` — derived from the session, tool and tool call id: when LangGraph runs a
  node again after an interrupt, every tool of that node runs again, and the key makes the
  gateway replay a call that already finished instead of running it twice.

A call that waits for a person calls :func:`langgraph.types.interrupt` with an
:class:`approval payload <approval_payload>` (the approval's id, title, facts, tool, arguments and
tool call id). The value the graph is resumed with is the person's decision: ``"approve"``,
``"always"`` or ``"deny"``, or a dict ``{"decision": ..., "by": ..., "message": ...}``, or one
bound to its approval with ``"approval_id"`` (see :func:`decision_for`). The decision is recorded
in toolgate (audit, "always allow" grants) and the call is made again with the same tool call id:
an approved call runs once, a denied one reaches the model as an error ``ToolMessage``
(``Error [user_rejection]: ...``).

Outside LangGraph (``approvals="message"``, or a plain LangChain loop) a waiting call answers
with an error ``ToolMessage`` telling the model that it waits for a person; the model's later
call with the same arguments runs once the request is approved.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import threading
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, PrivateAttr

from ..model import ApprovalRequest, CallOutcome
from ..model.approval import ApprovalStatus, Decision
from .base import ToolGateway, ToolSpec

__all__ = [
    "APPROVAL_PAYLOAD_TYPE",
    "ToolgateTool",
    "approval_payload",
    "atoolgate_tools",
    "decision_for",
    "send_tool_calls",
    "toolgate_tools",
]

#: The ``type`` of every interrupt payload this adapter raises.
APPROVAL_PAYLOAD_TYPE = "toolgate.approval"

#: The most characters of an idempotency key the gateway takes.
_KEY_LIMIT = 200

#: Interrupts one call may raise in one run of its node before it gives up: each needs a
#: person's answer, so this only stops a loop that no answer could end.
_MAX_ROUNDS = 8

_DECISIONS = {
    "approve": Decision.APPROVE,
    "always": Decision.ALWAYS,
    "deny": Decision.DENY,
    # LangChain's HumanInTheLoopMiddleware calls a denial "reject".
    "reject": Decision.DENY,
}

_T = TypeVar("_T")


class _NotRecorded(Exception):
    """A resume value's decision that toolgate did not record; the person is asked again."""


@dataclass(frozen=True, slots=True)
class _Decision:
    decision: Decision
    by: str | None = None
    message: str | None = None


def decision_for(
    payload: Mapping[str, Any] | Any,
    decision: str,
    *,
    by: str | None = None,
    message: str | None = None,
) -> dict[str, Any]:
    """A resume value bound to the approval of one interrupt.

    ``payload`` is the interrupt (``langgraph.types.Interrupt``) or its value. The result names
    the approval, so it reaches the right tool call however LangGraph hands resume values out —
    use it when several approvals can wait in one node (a plain ``ToolNode`` running parallel
    tool calls gives resume values out by order, not by interrupt)::

        Command(resume={i.id: decision_for(i, "approve", by="alice") for i in interrupts})
    """
    value = getattr(payload, "value", payload)
    if not isinstance(value, Mapping) or value.get("type") != APPROVAL_PAYLOAD_TYPE:
        raise ValueError("decision_for takes a toolgate approval interrupt or its payload")
    _parse_decision(decision)
    bound: dict[str, Any] = {"approval_id": value["approval_id"], "decision": decision}
    if by is not None:
        bound["by"] = by
    if message is not None:
        bound["message"] = message
    return bound


def approval_payload(request: ApprovalRequest, *, tool_call_id: str | None) -> dict[str, Any]:
    """What a waiting call shows through ``interrupt()``: JSON-ready, with the arguments and
    facts as people are shown them (credentials in URLs masked)."""
    return {
        "type": APPROVAL_PAYLOAD_TYPE,
        "approval_id": request.id,
        "tool_call_id": tool_call_id,
        "tool": request.tool_id,
        "title": request.title,
        "risk": request.risk,
        "facts": [[label, value] for label, value in request.shown_facts()],
        "arguments": request.shown_arguments(),
        "expires_at": request.expires_at,
        "decisions": ["approve", "always", "deny"],
    }


def _parse_decision(value: object) -> Decision:
    if isinstance(value, Decision):
        return value
    if isinstance(value, str) and value in _DECISIONS:
        return _DECISIONS[value]
    raise ValueError(
        f"{value!r} is not a decision: resume with 'approve', 'always' or 'deny' "
        "(or a dict with 'decision')"
    )


def _optional_text(data: Mapping[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"the decision's {key!r} must be a string, not {type(value).__name__}")
    return value


def _one_decision(value: object) -> _Decision:
    if isinstance(value, Mapping):
        return _Decision(
            _parse_decision(value.get("decision", value.get("type"))),
            by=_optional_text(value, "by"),
            message=_optional_text(value, "message"),
        )
    return _Decision(_parse_decision(value))


def _resume_decisions(value: object, own_id: str) -> dict[str, _Decision]:
    """The decisions a resume value carries, by approval id.

    A bare decision is the receiving call's own; one with ``approval_id`` (or a mapping of
    approval ids to decisions) names its approvals, whichever call LangGraph handed it to.
    """
    if isinstance(value, Mapping):
        if "decision" in value or "type" in value:
            approval_id = value.get("approval_id", own_id)
            if not isinstance(approval_id, str):
                raise ValueError("the decision's 'approval_id' must be a string")
            return {approval_id: _one_decision(value)}
        if value and all(isinstance(key, str) for key in value):
            return {key: _one_decision(item) for key, item in value.items()}
    return {own_id: _one_decision(value)}


def _idempotency_key(session_id: str | None, tool_id: str, tool_call_id: str | None) -> str | None:
    """A key stable across a pause and resume of the same tool call, or ``None`` when the call
    has no such identity (no session or no tool call id): then no key, rather than one two
    conversations could share."""
    if session_id is None or not tool_call_id:
        return None
    key = f"langchain:{session_id}:{tool_id}:{tool_call_id}"
    if len(key) <= _KEY_LIMIT:
        return key
    # The session and tool call id are framework/model-chosen text of any length.
    return "langchain:sha256:" + hashlib.sha256(key.encode("utf-8")).hexdigest()


def _in_langgraph(config: RunnableConfig | None) -> bool:
    """Whether the call runs inside a LangGraph node, where ``interrupt()`` can pause it."""
    try:
        from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
    except ImportError:  # LangGraph is not installed, or moved its constants.
        return False
    configurable = (config or {}).get("configurable") or {}
    return CONFIG_KEY_SCRATCHPAD in configurable


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
        context = contextvars.copy_context()

        async def in_context() -> _T:
            return await loop.create_task(coroutine, context=context)

        return asyncio.run_coroutine_threadsafe(in_context(), loop).result()


_sync_loop = _SyncLoop()


def _run_sync(coroutine: Coroutine[Any, Any, _T]) -> _T:
    return _sync_loop.run(coroutine)


def _json_ready(value: Any) -> Any:
    # ToolMessage artifacts live in LangGraph checkpoints: keep them plain JSON.
    return json.loads(json.dumps(value, default=str))


def _content_blocks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """MCP content blocks as LangChain standard content blocks."""
    converted: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            converted.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind in ("image", "audio") and "data" in block:
            converted.append(
                {"type": kind, "base64": block["data"], "mime_type": block.get("mimeType", "")}
            )
        elif kind == "resource_link":
            converted.append(
                {"type": "text", "text": f"[resource {block.get('name', '')}: {block.get('uri')}]"}
            )
        else:
            # Embedded resources and anything newer: say it is there, never dump it raw.
            converted.append({"type": "text", "text": f"[{kind} content]"})
    return converted


def _artifact(outcome: CallOutcome) -> dict[str, Any]:
    """What the application may read and the model never sees (``ToolMessage.artifact``)."""
    data: dict[str, Any] = {
        "status": str(outcome.status),
        "tool": outcome.tool_id,
        "call_id": outcome.call_id,
    }
    if outcome.code is not None:
        data["code"] = str(outcome.code)
    if outcome.visualization is not None:
        data["visualization"] = outcome.visualization
    if outcome.overflow is not None:
        data["overflow"] = {
            "path": outcome.overflow.path,
            "original_size": outcome.overflow.original_size,
        }
    if outcome.approval is not None:
        data["approval_id"] = outcome.approval.id
    if outcome.metadata:
        data["metadata"] = dict(outcome.metadata)
    return {"toolgate": _json_ready(data)}


class ToolgateTool(BaseTool):
    """One gateway tool as a LangChain tool; every call goes through the gateway.

    Make them with :func:`toolgate_tools`. ``args_schema`` is the tool's JSON Schema as
    declared; the arguments reach the gateway untouched (its own validation is the one that
    counts).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    spec: ToolSpec
    """The gateway's description of the tool."""
    gateway: Any
    """The :class:`~toolgate.integrations.base.ToolGateway` the calls go through."""
    session_id: str | None = None
    """The session of every call; ``None``: the LangGraph thread id, when there is one."""
    workspace: str | None = None
    approvals: Literal["interrupt", "message"] = "interrupt"
    """``interrupt``: a waiting call pauses the graph; ``message``: it answers the model."""
    decided_by: str = "langgraph"
    """Who a decision is recorded as when the resume value does not say (``by``)."""

    _gateway: ToolGateway = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        super().model_post_init(context)
        if not isinstance(self.gateway, ToolGateway):
            raise TypeError(
                f"gateway must be a toolgate ToolGateway (LocalGateway or toolgate.Client), "
                f"not {type(self.gateway).__name__}"
            )
        self._gateway = self.gateway

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The model's arguments travel as one value, never as keyword arguments of _run: a
        # model-chosen argument named "config" or "run_manager" stays an argument.
        if not isinstance(tool_input, dict):
            raise ValueError(f"{self.name} takes a JSON object of arguments, not a string")
        return (), {"arguments": dict(tool_input), "tool_call_id": tool_call_id}

    def _run(
        self,
        arguments: dict[str, Any],
        tool_call_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> Any:
        return _run_sync(self._arun(arguments, tool_call_id, config))

    async def _arun(
        self,
        arguments: dict[str, Any],
        tool_call_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> Any:
        # The run's own config (thread id, LangGraph's scratchpad) is in the context; the
        # ``config`` argument is only what the caller passed to ``invoke``.
        config = ensure_config(config)
        pause = self.approvals == "interrupt" and _in_langgraph(config)
        session_id = self.session_id
        if session_id is None:
            thread_id = ((config or {}).get("configurable") or {}).get("thread_id")
            session_id = None if thread_id is None else str(thread_id)
        # Without a pause there is no resume: the model's own retry (a new tool call id) must
        # find the request a person decided, so the request is keyed by the arguments alone.
        call_id = tool_call_id if pause else None
        key = _idempotency_key(session_id, self.spec.id, call_id)

        async def call() -> CallOutcome:
            return await self._gateway.call(
                self.spec.id,
                arguments,
                session_id=session_id,
                workspace=self.workspace,
                tool_call_id=call_id,
                idempotency_key=key,
            )

        outcome = await call()
        rounds = 0
        problem: str | None = None
        while pause and outcome.status == "pending_approval" and outcome.approval is not None:
            rounds += 1
            if rounds > _MAX_ROUNDS:
                break
            request = outcome.approval
            payload = approval_payload(request, tool_call_id=tool_call_id)
            if problem is not None:
                payload["problem"] = problem
            value = _interrupt(payload)
            try:
                await self._record(_resume_decisions(value, request.id), request.id, session_id)
                problem = None
            except (ValueError, _NotRecorded) as exc:
                # A resume value that is no decision, or one toolgate would not take: ask
                # again rather than fail the run, so the same approval can still be answered.
                problem = str(exc)
                continue
            if (await self._gateway.approval(request.id)).status is ApprovalStatus.PENDING:
                # The value was another approval's (LangGraph handed it to this call): ask
                # again for this one.
                continue
            outcome = await call()
        return self._result(outcome, tool_call_id)

    async def _record(
        self, decisions: Mapping[str, _Decision], own_id: str, session_id: str | None
    ) -> None:
        """Record each decision in toolgate, unless toolgate already has one (made in the CLI,
        the HTTP API or the web UI): that one stands — every surface reads the same request,
        and the call runs (or not) by what toolgate recorded first.

        Raises :class:`_NotRecorded` (the person is asked again) for an approval of another
        conversation, or a decision the gateway would not take."""
        gateway = self._gateway
        for approval_id, decision in decisions.items():
            try:
                request = await gateway.approval(approval_id)
            except Exception as exc:  # unknown here, or another agent's (a remote 404)
                raise _NotRecorded(f"approval {approval_id!r} cannot be read: {exc}") from exc
            if approval_id != own_id and (
                request.agent != gateway.agent or request.session_id != session_id
            ):
                raise _NotRecorded(
                    f"approval {approval_id!r} belongs to another agent or session than this "
                    "call; a resume value decides only this conversation's approvals"
                )
            if request.status is not ApprovalStatus.PENDING:
                continue
            try:
                await gateway.decide(
                    approval_id,
                    str(decision.decision),
                    by=decision.by or self.decided_by,
                    message=decision.message,
                )
            except Exception as exc:
                # Decided elsewhere in between: toolgate's decision stands. Otherwise the
                # gateway refused it (a remote client without an operator key...): say why.
                if (await gateway.approval(approval_id)).status is ApprovalStatus.PENDING:
                    raise _NotRecorded(
                        f"the decision on {approval_id!r} could not be recorded in toolgate "
                        f"({exc}); decide it in toolgate (web UI, CLI, HTTP API) and resume"
                    ) from exc

    def _result(self, outcome: CallOutcome, tool_call_id: str | None) -> Any:
        """The outcome as LangChain expects a tool's result: a ``ToolMessage`` (error status
        for errors and waiting calls, toolgate's facts in ``artifact``), or plain text when the
        tool was invoked without a tool call."""
        if tool_call_id is None:
            return outcome.text
        blocks = outcome.blocks
        content: str | list[str | dict[str, Any]] = outcome.text
        if blocks:
            content = list(_content_blocks(blocks))
        return ToolMessage(
            content=content,
            tool_call_id=tool_call_id,
            name=self.name,
            status="success" if outcome.ok else "error",
            artifact=_artifact(outcome),
        )


def _interrupt(payload: dict[str, Any]) -> Any:
    from langgraph.types import interrupt

    return interrupt(payload)


def send_tool_calls(
    state: Mapping[str, Any] | list[Any], *, node: str = "tools", messages_key: str = "messages"
) -> Any:
    """A conditional edge running each tool call of the last AI message as its own LangGraph
    task (as ``create_agent`` does), or ``END`` when there is none::

        graph.add_conditional_edges("agent", send_tool_calls, ["tools", END])

    Each waiting call then surfaces as its own interrupt with its own id, and LangGraph gives
    each resume value to the task it names — where one ``ToolNode`` task for all calls would
    hand bare decisions out by order.
    """
    from langgraph.graph import END
    from langgraph.types import Send

    messages = state if isinstance(state, list) else state.get(messages_key, [])
    tool_calls = getattr(messages[-1], "tool_calls", None) if messages else None
    if not tool_calls:
        return END
    return [Send(node, [call]) for call in tool_calls]


def _make_tools(
    specs: list[ToolSpec],
    gateway: ToolGateway,
    *,
    session_id: str | None,
    workspace: str | None,
    approvals: Literal["interrupt", "message"],
    decided_by: str,
) -> list[BaseTool]:
    return [
        ToolgateTool(
            name=spec.name,
            description=spec.description or spec.title or spec.id,
            args_schema=dict(spec.parameters),
            spec=spec,
            gateway=gateway,
            session_id=session_id,
            workspace=workspace,
            approvals=approvals,
            decided_by=decided_by,
        )
        for spec in specs
    ]


async def atoolgate_tools(
    gateway: ToolGateway,
    *,
    session_id: str | None = None,
    workspace: str | None = None,
    approvals: Literal["interrupt", "message"] = "interrupt",
    decided_by: str = "langgraph",
) -> list[BaseTool]:
    """The tools ``gateway``'s agent may call now, as LangChain tools.

    The async form of :func:`toolgate_tools`, with the same options.
    """
    specs = await gateway.list_tools(session_id=session_id)
    return _make_tools(
        specs,
        gateway,
        session_id=session_id,
        workspace=workspace,
        approvals=approvals,
        decided_by=decided_by,
    )


def toolgate_tools(
    gateway: ToolGateway,
    *,
    session_id: str | None = None,
    workspace: str | None = None,
    approvals: Literal["interrupt", "message"] = "interrupt",
    decided_by: str = "langgraph",
) -> list[BaseTool]:
    """The tools ``gateway``'s agent may call now, as LangChain tools.

    ``session_id`` is every call's session (default: the LangGraph thread id of the run);
    ``workspace`` every call's workspace. ``approvals="interrupt"`` pauses a LangGraph run with
    ``interrupt()`` while a call waits for a person; ``"message"`` (and any call outside
    LangGraph) answers the model that the call waits instead. ``decided_by`` names the person
    a resume value's decision is recorded as when it does not say ``by``.

    From async code use :func:`atoolgate_tools`.
    """
    return _run_sync(
        atoolgate_tools(
            gateway,
            session_id=session_id,
            workspace=workspace,
            approvals=approvals,
            decided_by=decided_by,
        )
    )
