"""The gateway's tools as LangChain tools, and what one call does."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any, Literal

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import ensure_config
from langchain_core.tools import BaseTool
from pydantic import ConfigDict, PrivateAttr

from ...model import CallOutcome
from ...model.approval import ApprovalStatus
from ..base import ToolGateway, ToolSpec
from ..keys import idempotency_key, wire_call_id
from ._approvals import (
    RESPONSE_SCHEMA,
    NotRecorded,
    ResumeDecision,
    approval_payload,
    resume_decisions,
)
from ._sync import run_sync
from ._task import RUNTIME_ARG, runtime_schema, sharing_calls, take_runtime

__all__ = ["ToolgateTool", "atoolgate_tools", "session_of", "toolgate_tools"]


def session_of(session_id: str | None, config: RunnableConfig | None) -> str | None:
    """The session of a call: the one given, else the LangGraph thread of the run."""
    if session_id is not None:
        return session_id
    thread_id = (ensure_config(config).get("configurable") or {}).get("thread_id")
    return None if thread_id is None else str(thread_id)


#: The most approvals one resume answer may decide (each is looked up in the gateway).
_MAX_DECISIONS = 100


def _shown(text: str, limit: int = 80) -> str:
    """Resume-value text quoted in a ``problem``: bounded (it is stored in every checkpoint of
    the paused run and shown to the person)."""
    quoted = repr(text)
    return quoted if len(quoted) <= limit else quoted[: limit - 1] + "…"


def _in_langgraph(config: RunnableConfig | None) -> bool:
    """Whether the call runs inside a LangGraph task, where ``interrupt()`` can pause it: the
    run metadata LangGraph gives every task says so (public keys, where the scratchpad
    ``interrupt()`` uses is a private one)."""
    metadata = (config or {}).get("metadata") or {}
    return "langgraph_step" in metadata and "langgraph_checkpoint_ns" in metadata


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

    def get_input_schema(self, config: RunnableConfig | None = None) -> Any:
        """What ``ToolNode`` reads to inject the call's ``ToolRuntime`` (it tells which tool
        calls share the call's task). The model is sent ``args_schema``, never this."""
        properties = self.spec.parameters.get("properties")
        if isinstance(properties, Mapping) and RUNTIME_ARG in properties:
            return super().get_input_schema(config)  # a real argument of that name wins
        return runtime_schema(self.name) or super().get_input_schema(config)

    def get_input_jsonschema(self, config: RunnableConfig | None = None) -> dict[str, Any]:
        """The tool's input as JSON Schema: the declared one (``args_schema``)."""
        return dict(self.spec.parameters)

    @functools.cached_property
    def _injected_args_keys(self) -> frozenset[str]:
        # Kept out of what callbacks and tracers are shown as the tool's input (unless it is
        # one of the tool's own arguments: then nothing is injected under that name).
        properties = self.spec.parameters.get("properties")
        if isinstance(properties, Mapping) and RUNTIME_ARG in properties:
            return frozenset()
        return frozenset({RUNTIME_ARG})

    def _to_args_and_kwargs(
        self, tool_input: str | dict[str, Any], tool_call_id: str | None
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The model's arguments travel as one value, never as keyword arguments of _run: a
        # model-chosen argument named "config" or "run_manager" stays an argument.
        if not isinstance(tool_input, dict):
            raise ValueError(f"{self.name} takes a JSON object of arguments, not a string")
        arguments = dict(tool_input)
        runtime = take_runtime(arguments)
        return (), {"arguments": arguments, "tool_call_id": tool_call_id, "runtime": runtime}

    def _run(
        self,
        arguments: dict[str, Any],
        tool_call_id: str | None = None,
        config: RunnableConfig | None = None,
        runtime: Any = None,
    ) -> Any:
        return run_sync(self._arun(arguments, tool_call_id, config, runtime))

    async def _arun(
        self,
        arguments: dict[str, Any],
        tool_call_id: str | None = None,
        config: RunnableConfig | None = None,
        runtime: Any = None,
    ) -> Any:
        # The run's own config (thread id, LangGraph's scratchpad) is in the context; the
        # ``config`` argument is only what the caller passed to ``invoke``.
        config = ensure_config(config)
        pause = self.approvals == "interrupt" and _in_langgraph(config)
        session_id = session_of(self.session_id, config)
        # Without a pause there is no resume: the model's own retry (a new tool call id) must
        # find the request a person decided, so the request is keyed by the arguments alone.
        call_id = wire_call_id(tool_call_id) if pause else None
        # The key follows the tool call either way: LangGraph runs a node again when any of
        # its tasks' tools paused, and a call that already finished must replay then.
        key = idempotency_key(session_id, self.spec.id, tool_call_id, arguments)

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
        # Other tool calls in this LangGraph task get their answers from the same list, by
        # order of asking: a bare answer could be another call's.
        shared = bool(sharing_calls(runtime, tool_call_id)) if pause else False
        problem: str | None = None
        # No cap on the rounds: each one takes the next of the task's answers from LangGraph
        # (a finite list, every earlier answer replayed on each run of the node) or pauses —
        # a cap would, after enough unusable answers, tell the model the call waits instead.
        while pause and outcome.status == "pending_approval" and outcome.approval is not None:
            request = outcome.approval
            payload = approval_payload(request, tool_call_id=tool_call_id, name=self.name)
            if shared:
                payload["bound_decision_required"] = True
            if problem is not None:
                payload["problem"] = problem
            value = _interrupt(payload)
            try:
                await self._record(
                    resume_decisions(value, request.id, shared=shared), request.id, session_id
                )
                problem = None
            except (ValueError, NotRecorded) as exc:
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
        self, decisions: Mapping[str, ResumeDecision], own_id: str, session_id: str | None
    ) -> None:
        """Record each decision in toolgate, unless toolgate already has one (made in the CLI,
        the HTTP API or the web UI): that one stands — every surface reads the same request,
        and the call runs (or not) by what toolgate recorded first.

        Raises :class:`NotRecorded` (the person is asked again) for an approval of another
        conversation, or a decision the gateway would not take. An answer naming an approval it
        may not decide is refused whole: nothing of it is recorded."""
        gateway = self._gateway
        if len(decisions) > _MAX_DECISIONS:
            raise NotRecorded(f"an answer decides at most {_MAX_DECISIONS} approvals")
        pending: list[tuple[str, ResumeDecision]] = []
        for approval_id, decision in decisions.items():
            try:
                request = await gateway.approval(approval_id)
            except Exception as exc:  # unknown here, or another agent's (a remote 404)
                raise NotRecorded(
                    f"approval {_shown(approval_id)} cannot be read: {_shown(str(exc), 300)}"
                ) from exc
            if approval_id != own_id and (
                request.agent != gateway.agent or request.session_id != session_id
            ):
                raise NotRecorded(
                    f"approval {_shown(approval_id)} belongs to another agent or session than this "
                    "call; a resume value decides only this conversation's approvals"
                )
            if request.status is ApprovalStatus.PENDING:
                pending.append((approval_id, decision))
        for approval_id, decision in pending:
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
                    raise NotRecorded(
                        f"the decision on {_shown(approval_id)} could not be recorded in "
                        f"toolgate ({_shown(str(exc), 300)}); decide it in toolgate (web UI, "
                        "CLI, HTTP API) and resume"
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

    return interrupt(payload, response_schema=RESPONSE_SCHEMA)


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
    return run_sync(
        atoolgate_tools(
            gateway,
            session_id=session_id,
            workspace=workspace,
            approvals=approvals,
            decided_by=decided_by,
        )
    )
