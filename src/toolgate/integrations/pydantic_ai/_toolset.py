"""The gateway's tools as a Pydantic AI toolset."""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from pydantic_ai import ApprovalRequired, RunContext, ToolFailed
from pydantic_ai.messages import ToolCallPart, ToolReturnPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ..._json import thaw
from ...errors import ToolgateError
from ...model import ApprovalStatus, CallOutcome, CallStatus
from ...search.query import DEFAULT_LIMIT, MAX_LIMIT
from ...search.tool import SEARCH_TOOL_ID
from ..base import ToolGateway, ToolSpec
from ..keys import idempotency_key, wire_call_id
from ._results import METADATA_KEY, approval_facts, is_closed, tool_result

__all__ = ["ToolgateToolset"]

# The gateway validates the arguments against the tool's own JSON Schema (and answers
# ``invalid_arguments`` by JSON pointer), so the framework passes them through unchanged.
_ANY_ARGUMENTS = SchemaValidator(schema=core_schema.dict_schema(core_schema.str_schema()))

log = logging.getLogger(__name__)

#: Pending calls remembered to record a framework-side denial (oldest forgotten first).
MAX_AWAITING = 10_000


class ToolgateToolset(AbstractToolset[Any]):
    """The tools a :class:`~toolgate.integrations.base.ToolGateway` lets its agent call, as a
    Pydantic AI toolset; every call goes through the gateway's pipeline.

    * The tools are listed at every run step (``get_tools``), with their JSON Schema exactly as
      declared, so a tool that ``toolgate__search_tools`` finds under progressive disclosure
      joins the list for the next model request.
    * Each call carries the session (``session_id``, else the run's ``conversation_id``),
      ``workspace``, Pydantic AI's tool call id and an idempotency key stable across a resume
      (:func:`toolgate.integrations.keys.idempotency_key`), so a resumed run never runs a side
      effect twice.
    * A call that waits for a person raises :class:`~pydantic_ai.ApprovalRequired` with the
      approval's facts under ``metadata["toolgate"]`` (``approval_id``, ``title``, ``facts``…):
      the run ends with :class:`~pydantic_ai.DeferredToolRequests` — so the agent needs
      ``output_type=[..., DeferredToolRequests]``. Record the person's decision with
      :func:`~toolgate.integrations.pydantic_ai.record_decisions` (or read the decisions made
      in toolgate with :func:`~toolgate.integrations.pydantic_ai.decisions_from_toolgate`) and
      run again with the ``DeferredToolResults`` they return.
    * A resume the application approved without telling toolgate (plain
      ``DeferredToolResults(approvals={id: True})``) is recorded as an approval by
      ``decided_by`` — of the request the paused run raised: this toolset remembers it, and in
      another process the results must carry the deferral's metadata
      (``requests.build_results(approvals=..., metadata=requests.metadata)``), else the run
      pauses again. A ``ToolDenied`` resume is recorded as a denial when this toolset raised
      the request (Pydantic AI never calls a denied tool, so only the history tells). A
      decision already made in toolgate (CLI, HTTP API, web UI) stands: a call toolgate denied
      never runs, whatever the framework says.
    """

    def __init__(
        self,
        gateway: ToolGateway,
        *,
        session_id: str | None = None,
        workspace: str | os.PathLike[str] | None = None,
        id: str | None = "toolgate",
        max_retries: int = 1,
        decided_by: str = "pydantic-ai",
    ) -> None:
        """``gateway``: the in-process :class:`~toolgate.integrations.base.LocalGateway` or a
        :class:`toolgate.Client`; its agent is the one every call is made as.
        ``session_id``: the session every call belongs to (default: each run's
        ``conversation_id``, which a resumed run keeps). ``workspace``: the folder calls act
        in. ``id``: the toolset's id among the agent's toolsets. ``max_retries``: how often
        the model may correct arguments the gateway refused. ``decided_by``: who a decision
        made only in the framework is recorded as."""
        if not isinstance(gateway, ToolGateway):
            raise TypeError(
                f"ToolgateToolset needs a ToolGateway (LocalGateway or toolgate.Client), "
                f"not {type(gateway).__name__}"
            )
        if session_id is not None and not isinstance(session_id, str):
            raise TypeError(f"session_id must be a string, not {type(session_id).__name__}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be a whole number ≥ 0, not {max_retries!r}")
        if not isinstance(decided_by, str) or not decided_by.strip():
            raise ValueError(
                "decided_by must name who decides in the framework (a non-empty string)"
            )
        self.gateway = gateway
        self.session_id = session_id
        self.workspace = None if workspace is None else os.fspath(workspace)
        self.max_retries = max_retries
        self.decided_by = decided_by
        self._id = id
        self._ids: dict[str, str] = {}
        # Pydantic AI never calls a tool whose call was denied (``ToolDenied`` short-circuits
        # before ``call_tool``), so the toolset remembers the requests it raised and records a
        # denial when it finds the denied return in the history.
        # Keyed by session and tool call id: ids are model- or framework-chosen and repeat
        # across conversations (``TestModel`` names its calls after the tool).
        self._awaiting: OrderedDict[tuple[str | None, str], str] = OrderedDict()

    @property
    def id(self) -> str | None:
        """The toolset's id among the agent's toolsets (``"toolgate"`` unless given)."""
        return self._id

    def session(self, ctx: RunContext[Any]) -> str | None:
        """The session of the run's calls: ``session_id`` if given, else the conversation's."""
        return self.session_id or ctx.conversation_id or ctx.run_id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        """The tools the gateway's agent may call now in this run's session, by provider-safe
        name; first records any denial the framework answered since the last step."""
        await self._record_denials(ctx)
        specs = await self.gateway.list_tools(session_id=self.session(ctx))
        tools: dict[str, ToolsetTool[Any]] = {}
        for spec in specs:
            self._ids[spec.name] = spec.id
            tools[spec.name] = ToolsetTool(
                toolset=self,
                tool_def=_definition(spec),
                max_retries=self.max_retries,
                args_validator=_ANY_ARGUMENTS,
            )
        return tools

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        """Call the tool through the gateway: its result as a ``ToolReturn``, an error as
        ``ToolFailed``/``ModelRetry``, a call waiting for a person as ``ApprovalRequired``."""
        tool_id = self._ids.get(name)
        if tool_id is None:  # only a name this toolset listed is dispatched here
            raise ToolFailed(f"Error [tool_not_found]: no tool is named {name!r}")
        session = self.session(ctx)
        tool_call_id = ctx.tool_call_id
        key = idempotency_key(session, tool_id, tool_call_id, tool_args)

        async def call() -> CallOutcome:
            return await self.gateway.call(
                tool_id,
                tool_args,
                session_id=session,
                workspace=self.workspace,
                tool_call_id=wire_call_id(tool_call_id),
                idempotency_key=key,
            )

        outcome = await call()
        if (
            outcome.status is CallStatus.PENDING_APPROVAL
            and ctx.tool_call_approved
            and outcome.approval is not None
            and self._answered(outcome.approval.id, ctx)
        ):
            # The application approved in the framework only: record it, then the same call
            # (same tool call id) runs the approved request, once.
            await self._approve(outcome.approval.id)
            outcome = await call()
        if outcome.status is CallStatus.PENDING_APPROVAL:
            approval = outcome.approval
            if approval is None or approval.status is not ApprovalStatus.PENDING:
                raise ToolFailed(outcome.text)  # e.g. the approved call is running elsewhere
            if tool_call_id is not None:
                self._remember((session, tool_call_id), approval.id)
            raise ApprovalRequired(metadata={METADATA_KEY: approval_facts(approval)})
        if tool_call_id is not None:
            self._awaiting.pop((session, tool_call_id), None)
        if tool_id == SEARCH_TOOL_ID and outcome.ok:
            await self._disclose(tool_args, session)
        return tool_result(outcome)

    def _answered(self, approval_id: str, ctx: RunContext[Any]) -> bool:
        """Whether the framework's approval answers this very request: the one the paused run
        raised (this toolset remembers it, or the results' metadata names it). A request made
        since — the old one expired, or the approved call already ran and its outcome was
        collected — was never put to the person, so it pauses the run again."""
        known = _recorded(ctx.tool_call_metadata).get("approval_id")
        if known is None and ctx.tool_call_id is not None:
            known = self._awaiting.get((self.session(ctx), ctx.tool_call_id))
        return known == approval_id

    async def _approve(self, approval_id: str) -> None:
        """Record the framework's approval of a request toolgate still has pending: approved
        once, by ``decided_by``. ``ToolApproved`` means "once", and whatever else the results'
        metadata says ("always", another decider's name) is the application's state carried
        back, not a decision anyone recorded — an "always allow" grant is only ever made by
        ``record_decisions`` or in toolgate itself."""
        try:
            await self.gateway.decide(approval_id, "approve", by=self.decided_by)
        except ToolgateError as exc:
            if not is_closed(exc):
                # No right to decide (a remote client without an operator key), or no gateway:
                # the call must not run, and pausing again would only loop — say why.
                raise
            # Decided meanwhile (CLI, web UI): that decision stands, and the retry gets it.

    async def _record_denials(self, ctx: RunContext[Any]) -> None:
        """Record in toolgate each denial the framework answered for a request of ours: a
        denied return of one of this toolset's tools, after the call that raised the request
        (an older denial of a reused tool call id answered an older request)."""
        if not self._awaiting:
            return
        session = self.session(ctx)
        asked: dict[str, int] = {}  # tool call id -> where its latest call is in the history
        denied: dict[str, tuple[int, ToolReturnPart]] = {}
        for index, message in enumerate(ctx.messages):
            for part in message.parts:
                if isinstance(part, ToolCallPart):
                    asked[part.tool_call_id] = index
                elif (
                    isinstance(part, ToolReturnPart)
                    and part.outcome == "denied"
                    and part.tool_name in self._ids
                ):
                    denied[part.tool_call_id] = (index, part)
        for tool_call_id, (index, part) in denied.items():
            if index < asked.get(tool_call_id, index):
                continue
            approval_id = self._awaiting.pop((session, tool_call_id), None)
            if approval_id is None:
                continue
            note = part.model_response_str()[:1000]
            try:
                await self.gateway.decide(approval_id, "deny", by=self.decided_by, message=note)
            except ToolgateError as exc:
                # Already decided in toolgate: that decision is the record. Otherwise the
                # denial still holds (the call never runs) and the request expires
                # unanswered: worth a warning, not the end of the run.
                if not is_closed(exc):
                    log.warning(
                        "could not record the denial of approval request %s in toolgate: %s",
                        approval_id,
                        exc,
                    )

    def _remember(self, call: tuple[str | None, str], approval_id: str) -> None:
        self._awaiting[call] = approval_id
        self._awaiting.move_to_end(call)
        while len(self._awaiting) > MAX_AWAITING:
            self._awaiting.popitem(last=False)

    async def _disclose(self, arguments: Mapping[str, Any], session: str | None) -> None:
        """Under progressive disclosure, the tools a search found join the session's list (the
        next step's ``get_tools`` shows them). ``ToolGateway.search_tools`` is the protocol's
        one way to record that, so the model's (already answered) query is asked again."""
        query = arguments.get("query")
        limit = arguments.get("limit", DEFAULT_LIMIT)
        if not isinstance(query, str) or not isinstance(limit, int) or isinstance(limit, bool):
            return
        await self.gateway.search_tools(
            query, session_id=session, limit=max(1, min(limit, MAX_LIMIT))
        )


def _definition(spec: ToolSpec) -> ToolDefinition:
    return ToolDefinition(
        name=spec.name,
        description=spec.description,
        parameters_json_schema=thaw(spec.parameters),
        metadata={
            METADATA_KEY: {"tool_id": spec.id, "title": spec.title, "side_effect": spec.side_effect}
        },
    )


def _recorded(metadata: Any) -> dict[str, Any]:
    """The toolgate part of ``DeferredToolResults.metadata[tool_call_id]``, if any."""
    if isinstance(metadata, Mapping):
        part = metadata.get(METADATA_KEY)
        if isinstance(part, Mapping):
            return dict(part)
    return {}
