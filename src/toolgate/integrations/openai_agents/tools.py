"""The gateway's tools as the SDK's ``FunctionTool`` values, and the approval helpers of a run
(see :mod:`toolgate.integrations.openai_agents` for how approvals flow)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool import FunctionToolCustomDataContext
from agents.tool_context import ToolContext

from ...errors import ErrorCode, ToolgateError
from ...model import ApprovalRequest, ApprovalStatus, CallOutcome, CallStatus
from ...pipeline.approval_outcomes import denied_outcome
from ..base import ToolGateway, ToolSpec
from ..keys import idempotency_key, wire_call_id
from .calls import (
    MAX_QUERY,
    SEARCH_TOOL,
    ApprovalPendingError,
    CallKey,
    canonical,
    model_output,
    parse_arguments,
)

__all__ = ["ToolgateTools", "toolgate_tools"]

logger = logging.getLogger(__name__)

#: Decided statuses whose retry runs (or collects) the approved call.
_APPROVED = frozenset(
    {
        ApprovalStatus.APPROVED,
        ApprovalStatus.RUNNING,
        ApprovalStatus.COMPLETED,
        ApprovalStatus.DELIVERED,
    }
)


class ToolgateTools:
    """The gateway's tools as SDK ``FunctionTool`` values, and the approval helpers of a run.

    Build it with :func:`toolgate_tools`; give :attr:`tools` to ``Agent(tools=...)``. One
    instance serves one session (``session_id``): keep the id with a saved ``RunState`` and
    pass it again when the run resumes in another process.
    """

    def __init__(
        self,
        gateway: ToolGateway,
        specs: list[ToolSpec],
        *,
        session_id: str,
        workspace: str | None = None,
        approval_wait: float = 300.0,
        search: bool = False,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string (the run's conversation id)")
        if not approval_wait >= 0:
            raise ValueError(f"approval_wait must be seconds, 0 or more, not {approval_wait!r}")
        self.gateway = gateway
        self.session_id = session_id
        self.workspace = workspace
        self.approval_wait = approval_wait
        self._specs: dict[str, ToolSpec] = {}
        self._by_name: dict[str, FunctionTool] = {}
        self._approvals: dict[CallKey, str] = {}
        # Calls approved in the state with nothing in toolgate to decide (no person needed when
        # asked): a security check asking as such a call runs is waited for, not an SDK-only
        # approval to refuse.
        self._unasked: set[CallKey] = set()
        self._visualizations: dict[str, Mapping[str, Any]] = {}
        self.tools: list[FunctionTool] = [self._function_tool(spec) for spec in specs]
        """The ``FunctionTool`` values for ``Agent(tools=...)``."""
        if search:
            self.tools.append(self._search_tool())

    # -- the tools ------------------------------------------------------------------------------

    def _function_tool(self, spec: ToolSpec) -> FunctionTool:
        self._specs[spec.name] = spec
        tool_id = spec.id

        async def needs_approval(
            context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
        ) -> bool:
            return await self._needs_approval(tool_id, arguments, call_id)

        async def invoke(context: ToolContext[Any], arguments: str) -> Any:
            return await self._invoke(tool_id, context, arguments)

        function_tool = FunctionTool(
            name=spec.name,
            description=spec.description,
            # The schema exactly as declared: strict mode would rewrite it (every property
            # required, no additional properties), which changes what the tool accepts.
            params_json_schema=dict(spec.parameters),
            on_invoke_tool=invoke,
            strict_json_schema=False,
            needs_approval=needs_approval,
            custom_data_extractor=self._custom_data,
        )
        self._by_name[spec.name] = function_tool
        return function_tool

    def _search_tool(self) -> FunctionTool:
        schema = {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do."},
            },
            "required": ["query"],
        }

        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            parsed = parse_arguments(arguments)
            query = None if parsed is None else parsed.get("query")
            if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY:
                return (
                    "Error [invalid_arguments]: give the query as a non-empty string of at most "
                    f"{MAX_QUERY} characters."
                )
            found = await self.gateway.search_tools(query, session_id=self.session_id)
            added = self._add_tools(context, found)
            if not found:
                return "No tool matches."
            lines = [f"{spec.name}: {spec.description}" for spec in found]
            note = (
                f"\n\nNow callable: {', '.join(added)}." if added else "\n\nAll already callable."
            )
            return "\n".join(lines) + note

        return FunctionTool(
            name=SEARCH_TOOL,
            description=(
                "Search the tools of this gateway by what they do; the tools found can be "
                "called from the next step on."
            ),
            params_json_schema=schema,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    def _add_tools(self, context: ToolContext[Any], found: list[ToolSpec]) -> list[str]:
        """Give the running agent the tools a search found that it lacks (the SDK reads
        ``Agent.tools`` again at every turn), and keep them in :attr:`tools` for later runs."""
        wanted = [self._by_name.get(spec.name) or self._function_tool(spec) for spec in found]
        known = {tool.name for tool in self.tools}
        self.tools.extend(tool for tool in wanted if tool.name not in known)
        agent = context.agent
        if agent is None:
            return []
        present = {getattr(tool, "name", None) for tool in agent.tools}
        missing = [tool for tool in wanted if tool.name not in present]
        if missing:
            agent.tools = [*agent.tools, *missing]
        return [tool.name for tool in missing]

    # -- calls ----------------------------------------------------------------------------------

    async def _call(self, tool_id: str, arguments: Mapping[str, Any], call_id: str) -> CallOutcome:
        return await self.gateway.call(
            tool_id,
            arguments,
            session_id=self.session_id,
            workspace=self.workspace,
            tool_call_id=wire_call_id(call_id),
            idempotency_key=idempotency_key(self.session_id, tool_id, call_id, arguments),
        )

    async def _ask(self, key: CallKey, arguments: Mapping[str, Any]) -> ApprovalRequest | None:
        """The toolgate request of the call ``key`` — found, or made now and put to people —
        without running the call; ``None`` when it would not wait for a person now."""
        found = await self.gateway.request_approval(
            key.tool_id,
            arguments,
            session_id=self.session_id,
            workspace=self.workspace,
            tool_call_id=wire_call_id(key.call_id),
            # A call that already ran under this key replays: nobody is asked again (a paused
            # state resumed a second time).
            idempotency_key=idempotency_key(self.session_id, key.tool_id, key.call_id, arguments),
        )
        if found is not None:
            self._approvals[key] = found.id
        return found

    async def _needs_approval(
        self, tool_id: str, arguments: Mapping[str, Any], call_id: str
    ) -> bool:
        # The call's request is made now, before the SDK pauses, so a person can decide it in
        # toolgate (web UI, CLI, API) while the run waits — and the call never runs here: it
        # runs in the SDK's invocation, after its guardrails and hooks. A request decided
        # already (this very call, asked in another process) is the call's to take or report.
        key = CallKey(tool_id, call_id, canonical(arguments))
        found = await self._ask(key, arguments)
        return found is not None and found.status is ApprovalStatus.PENDING

    async def _invoke(self, tool_id: str, context: ToolContext[Any], raw: str) -> Any:
        call_id = context.tool_call_id
        arguments = parse_arguments(raw)
        if arguments is None:
            return "Error [invalid_arguments]: the arguments must be a JSON object."
        key = CallKey(tool_id, call_id, canonical(arguments))
        outcome = await self._call(tool_id, arguments, call_id)
        if outcome.status is CallStatus.PENDING_APPROVAL:
            outcome = await self._pending_at_call_time(key, context, outcome)
        self._unasked.discard(key)
        if outcome.visualization is not None:
            self._visualizations[call_id] = outcome.visualization
        return model_output(outcome)

    async def _pending_at_call_time(
        self, key: CallKey, context: ToolContext[Any], outcome: CallOutcome
    ) -> CallOutcome:
        """A call the SDK runs that toolgate still holds for a person. The SDK cannot pause a
        running tool, and "approval pending" must not reach the model as a result: wait for
        the decision (a security check asked as the call ran), or fail the run."""
        approval = outcome.approval
        approval_id = "" if approval is None else approval.id
        if key not in self._unasked and context.is_tool_approved(context.tool_name, key.call_id):
            raise ApprovalPendingError(
                f"call {key.call_id!r} of {key.tool_id} was approved in the SDK's RunState but "
                f"toolgate has no decision for it (request {approval_id}): approve it with "
                "ToolgateTools.approve(state, item, by=...) (or in toolgate), not "
                "RunState.approve alone",
                approval_id=approval_id,
                tool_id=key.tool_id,
                call_id=key.call_id,
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.approval_wait
        pause = 0.2
        while approval is not None:
            request = await self.gateway.approval(approval.id)
            if request.status is not ApprovalStatus.PENDING:
                # Decided (or expired): the retry runs it, reports the denial, or asks anew.
                retried = await self._call(key.tool_id, json.loads(key.arguments), key.call_id)
                if retried.status is not CallStatus.PENDING_APPROVAL:
                    return retried
                approval = retried.approval
                approval_id = "" if approval is None else approval.id
                continue
            if loop.time() >= deadline:
                break
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            pause = min(pause * 2, 2.0)
        raise ApprovalPendingError(
            f"call {key.call_id!r} of {key.tool_id} asked for a person as it ran (request "
            f"{approval_id}) and nobody decided within {self.approval_wait} seconds",
            approval_id=approval_id,
            tool_id=key.tool_id,
            call_id=key.call_id,
        )

    def _custom_data(self, data: FunctionToolCustomDataContext) -> Mapping[str, Any] | None:
        """The SDK-only data of an output item (never sent to the model): the visualization."""
        visualization = self._visualizations.pop(data.tool_context.tool_call_id, None)
        if visualization is None:
            return None
        return {"toolgate": {"visualization": dict(visualization)}}

    # -- approvals ------------------------------------------------------------------------------

    def _key_of(self, item: ToolApprovalItem) -> CallKey:
        spec = self._specs.get(item.tool_name or "")
        call_id = item.call_id
        if spec is None or not call_id:
            raise ValueError(
                f"interruption {item.tool_name!r} is not a call of one of these toolgate tools"
            )
        arguments = parse_arguments(item.arguments)
        return CallKey(spec.id, call_id, canonical(arguments or {}))

    async def _request(self, item: ToolApprovalItem) -> ApprovalRequest | None:
        """The toolgate request of an interrupted call as it stands now, or ``None`` when
        toolgate holds nothing for a person.

        A request this instance did not see made (the run resumed in another process) or that
        expired is found — or made anew — with :meth:`ToolGateway.request_approval`, which
        never runs the call: it runs in the resumed run, after the SDK's guardrails and hooks."""
        key = self._key_of(item)
        approval_id = self._approvals.get(key)
        if approval_id is not None:
            try:
                request = await self.gateway.approval(approval_id)
            except LookupError:
                request = None
            # Known by id: an "always" decision stays visible here, though request_approval
            # answers None under the grant it made.
            if request is not None and request.status is not ApprovalStatus.EXPIRED:
                return request
        arguments = parse_arguments(item.arguments)
        if arguments is None:
            # Not an object: the gateway would refuse it (the SDK paused the call without
            # asking needs_approval because it could not read the arguments). The resumed call
            # reports the error to the model.
            return None
        return await self._ask(key, arguments)

    def _mirror(
        self, state: RunState[Any, Any], item: ToolApprovalItem, decided: ApprovalRequest
    ) -> None:
        """Put toolgate's decision on ``item`` into the SDK's ``state``."""
        if decided.status is ApprovalStatus.DENIED:
            state.reject(item, rejection_message=denied_outcome(decided).text)
        elif decided.status in _APPROVED:
            state.approve(item)

    async def approve(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        by: str,
        always: bool = False,
    ) -> ApprovalRequest | None:
        """Approve the interrupted call ``item`` in toolgate as ``by`` ("always": also store an
        "always allow" grant, so the tool stops asking), then in ``state``. Resume with
        ``Runner.run(agent, state)``: the call runs once.

        If the request was decided in toolgate already, that decision stands and is put into
        ``state`` (a denial stays a denial). Returns the request as decided (``None`` when
        toolgate holds nothing for a person — no approval needed, or an "always allow" grant
        covers the call now: then only ``state`` is approved, and the call runs in the resumed
        run). Nothing runs here."""
        # Per call in the SDK even for "always": the toolgate grant is what spares the next
        # call, and a grant revoked in toolgate must ask again (an SDK-wide approval would not).
        return await self._decide(state, item, "always" if always else "approve", by, None)

    async def reject(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        *,
        by: str,
        message: str | None = None,
    ) -> ApprovalRequest | None:
        """Deny the interrupted call ``item`` in toolgate as ``by`` (audited as
        ``user_rejection``), then in ``state``: the resumed run hands the model the SDK's
        rejection, worded as toolgate words it (``Error [user_rejection]: ...``, with
        ``message``). A request already approved in toolgate stays approved. A call toolgate
        holds nothing for a person (the SDK paused it without asking: it could not read the
        arguments; or a grant covers it now) is rejected in ``state`` only. Nothing runs
        here."""
        return await self._decide(state, item, "deny", by, message)

    async def _decide(
        self,
        state: RunState[Any, Any],
        item: ToolApprovalItem,
        decision: str,
        by: str,
        message: str | None,
        *,
        again: bool = True,
    ) -> ApprovalRequest | None:
        if not isinstance(by, str) or not by.strip():
            raise ValueError("by must name the person who decides (a non-empty string)")
        found = await self._request(item)
        if found is None:
            # Nothing in toolgate waits for a person: the decision is the state's only, and an
            # approved call runs in the resumed run (after the SDK's guardrails and hooks).
            if decision == "deny":
                state.reject(item, rejection_message=self._denial(item, by, message))
            else:
                self._unasked.add(self._key_of(item))
                state.approve(item)
            return None
        if found.status is ApprovalStatus.PENDING:
            try:
                found = await self.gateway.decide(found.id, decision, by=by, message=message)
            except ToolgateError as exc:
                # In-process ApprovalClosedError, the client's RemoteConflictError: decided
                # elsewhere (web UI, CLI) a moment ago, or expired. Look once more.
                if exc.code is not ErrorCode.APPROVAL_CLOSED or not again:
                    raise
                return await self._decide(state, item, decision, by, message, again=False)
        else:
            logger.warning(
                "approval request %s was already %s in toolgate; that decision stands",
                found.id,
                found.status,
            )
        self._mirror(state, item, found)
        return found

    def _denial(self, item: ToolApprovalItem, by: str, message: str | None) -> str:
        """A rejection made in the SDK only, worded as toolgate words a person's denial."""
        key = self._key_of(item)
        note = f": {message}" if message else ""
        return CallOutcome(
            status=CallStatus.ERROR,
            tool_id=key.tool_id,
            call_id=key.call_id,
            code=ErrorCode.USER_REJECTION,
            message=(
                f"The call to {key.tool_id} was denied by {by}{note}. Do not retry it "
                "unchanged; ask the user what to do instead."
            ),
        ).text

    async def sync(self, state: RunState[Any, Any]) -> list[ToolApprovalItem]:
        """Put the decisions people made in toolgate (web UI, CLI, HTTP API) on this state's
        interruptions into ``state``; returns the interruptions still waiting for a person."""
        waiting: list[ToolApprovalItem] = []
        for item in state.get_interruptions():
            if (item.tool_name or "") not in self._specs:
                waiting.append(item)  # another tool's interruption: not ours to decide
                continue
            found = await self._request(item)
            if found is None:
                # What needs_approval answers now: no person. The call runs in the resumed
                # run, not here.
                self._unasked.add(self._key_of(item))
                state.approve(item)
            elif found.status is ApprovalStatus.PENDING:
                waiting.append(item)
            else:
                self._mirror(state, item, found)
        return waiting

    async def approval_of(self, item: ToolApprovalItem) -> ApprovalRequest | None:
        """The toolgate request behind an interruption (what a person should be shown: its
        title, risk and facts), found or made without running the call, or ``None`` when
        toolgate holds nothing for a person (the SDK paused a call it could not read, or a
        grant covers it now: show ``item.arguments``; decide with :meth:`approve` /
        :meth:`reject`)."""
        return await self._request(item)


async def toolgate_tools(
    gateway: ToolGateway,
    *,
    session_id: str,
    workspace: str | None = None,
    approval_wait: float = 300.0,
    search: bool = False,
) -> ToolgateTools:
    """The tools ``gateway``'s agent may call now, as SDK ``FunctionTool`` values
    (:attr:`ToolgateTools.tools`), calling through the gateway in ``session_id`` and
    ``workspace``.

    ``approval_wait``: seconds a running call waits for a person when toolgate asks only as it
    runs (a security check) — the SDK cannot pause a running tool. ``search``: add a
    ``toolgate_search_tools`` tool whose finds join the agent's tools at its next turn (under
    progressive disclosure, the way to reach tools beyond the core set)."""
    specs = await gateway.list_tools(session_id=session_id)
    return ToolgateTools(
        gateway,
        specs,
        session_id=session_id,
        workspace=workspace,
        approval_wait=approval_wait,
        search=search,
    )
