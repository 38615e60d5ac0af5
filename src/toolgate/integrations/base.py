"""What a framework adapter needs from a gateway, in-process or remote.

An adapter lists the tools its agent may call, searches them, calls them and — when a call waits
for a person — reads and records the person's decision. :class:`ToolGateway` is that contract;
:class:`LocalGateway` fulfils it with an in-process :class:`~toolgate.Gateway`, and
:class:`toolgate.Client` with a running ``toolgate serve`` over its HTTP API.

The calling agent is fixed when the gateway is made (``LocalGateway(gateway, agent=...)``; a
client's agent is the one its key names), so no adapter can call as another agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..approvals import ApprovalService
from ..errors import ApprovalClosedError, ToolgateError
from ..exporters._common import object_schema
from ..gateway import Gateway
from ..model import ApprovalRequest, CallOutcome, Tool
from ..model.names import to_provider_name

__all__ = ["ApprovalsUnavailableError", "LocalGateway", "ToolGateway", "ToolSpec"]


class ApprovalsUnavailableError(ToolgateError):
    """The gateway has no approval queue (no approver is configured), so no decision can be
    read or recorded."""


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as a framework presents it to its model."""

    id: str
    """The gateway's tool id (``namespace:name``): what :meth:`ToolGateway.call` takes."""
    name: str
    """The provider-safe function name (``namespace__name``), reversible to :attr:`id`."""
    description: str
    parameters: Mapping[str, Any]
    """The input JSON Schema exactly as declared (an object schema)."""
    title: str | None = None
    side_effect: str = "read_only"
    annotations: Mapping[str, Any] = field(default_factory=dict)
    """Extra facts a framework may show (the tool's risk, its hints); never needed to call."""

    @classmethod
    def of(cls, tool: Tool) -> ToolSpec:
        """The spec of an in-process tool."""
        return cls(
            id=tool.id,
            name=to_provider_name(tool.id),
            description=tool.description,
            parameters=object_schema(tool.input_schema),
            title=tool.title,
            side_effect=str(tool.side_effect),
        )


@runtime_checkable
class ToolGateway(Protocol):
    """The gateway as every framework adapter sees it (in-process or remote)."""

    @property
    def agent(self) -> str | None:
        """The agent every call is made as."""
        ...

    async def list_tools(self, *, session_id: str | None = None) -> list[ToolSpec]:
        """The tools the agent may call now, sorted by id. Under progressive disclosure, with
        ``session_id``: the core set plus what that session's searches found; without one,
        every tool."""
        ...

    async def search_tools(
        self, query: str, *, session_id: str | None = None, limit: int = 10
    ) -> list[ToolSpec]:
        """The tools that best match ``query``, best first; under progressive disclosure they
        join ``session_id``'s list."""
        ...

    async def call(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        """Call a tool through the whole pipeline; never raises for the call's own errors."""
        ...

    async def approval_needed(self, tool_id: str, *, workspace: str | None = None) -> bool:
        """Whether a call of ``tool_id`` would wait for a person now (no grant covers it)."""
        ...

    async def request_approval(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApprovalRequest | None:
        """The approval request of exactly this call, found or made now, without ever running
        the call; ``None`` when it would not wait for a person now, or would replay what
        ``idempotency_key`` already holds (see :meth:`toolgate.Gateway.request_approval`)."""
        ...

    async def approval(self, approval_id: str) -> ApprovalRequest:
        """An approval request of this agent's calls by id, as it stands now (another
        agent's is unknown: a :class:`LookupError`)."""
        ...

    async def decide(
        self,
        approval_id: str,
        decision: str,
        *,
        by: str,
        message: str | None = None,
    ) -> ApprovalRequest:
        """Record a person's decision (``approve``, ``always`` or ``deny``) on a pending
        request of this agent's calls (another agent's is unknown); nothing runs here — the
        agent's next call with the same tool call id runs an approved call, once."""
        ...


class LocalGateway:
    """A :class:`ToolGateway` over an in-process :class:`~toolgate.Gateway`, as ``agent``."""

    def __init__(self, gateway: Gateway, *, agent: str | None = None) -> None:
        self.gateway = gateway
        self._agent = agent

    @property
    def agent(self) -> str | None:
        """The agent every call is made as."""
        return self._agent

    def _conversation(self, session_id: str | None) -> object:
        # Progressive disclosure keys what a conversation found by agent and session, as the
        # MCP server does.
        return (self._agent, session_id)

    async def list_tools(self, *, session_id: str | None = None) -> list[ToolSpec]:
        tools = self.gateway.list_tools(agent=self._agent)
        available = [t for t in tools if self._available(t.id)]
        disclosure = self.gateway.disclosure
        if disclosure is not None and session_id is not None:
            # Without a session every tool, as the HTTP API (and so toolgate.Client) lists
            # them: an adapter sees the same tools in-process and remote.
            available = disclosure.visible(self._conversation(session_id), available)
        return [ToolSpec.of(tool) for tool in available]

    def _available(self, tool_id: str) -> bool:
        entry = self.gateway.registry.get(tool_id)
        return entry is not None and entry.available

    async def search_tools(
        self, query: str, *, session_id: str | None = None, limit: int = 10
    ) -> list[ToolSpec]:
        hits = await asyncio.to_thread(
            self.gateway.search_tools, query, agent=self._agent, limit=limit
        )
        found = [ToolSpec.of(hit.tool) for hit in hits]
        disclosure = self.gateway.disclosure
        if disclosure is not None and session_id is not None:
            disclosure.found(self._conversation(session_id), [spec.id for spec in found])
        return found

    async def call(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        return await self.gateway.call(
            tool_id,
            arguments,
            agent=self._agent,
            session_id=session_id,
            workspace=None if workspace is None else Path(workspace),
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )

    async def approval_needed(self, tool_id: str, *, workspace: str | None = None) -> bool:
        return self.gateway.approval_needed(tool_id, agent=self._agent, workspace=workspace)

    async def request_approval(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        session_id: str | None = None,
        workspace: str | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> ApprovalRequest | None:
        return await self.gateway.request_approval(
            tool_id,
            arguments,
            agent=self._agent,
            session_id=session_id,
            workspace=workspace,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )

    def _approvals(self) -> ApprovalService:
        approvals = self.gateway.approvals
        if approvals is None:
            raise ApprovalsUnavailableError(
                "this gateway has no approval queue: configure an approver "
                "(Gateway(approver='queue') or approvals: in toolgate.yaml)"
            )
        return approvals

    def _own(self, approval_id: str) -> ApprovalRequest:
        """The request ``approval_id`` when this agent's call made it. Another agent's is
        unknown here, as :class:`toolgate.Client` finds it (the API answers 404): an approval
        id read back from a framework's saved state must not reach another agent's call."""
        request = self._approvals().get(approval_id)
        if request.agent != self._agent:
            raise ApprovalClosedError(f"no approval request {approval_id!r}")
        return request

    async def approval(self, approval_id: str) -> ApprovalRequest:
        return self._own(approval_id)

    async def decide(
        self,
        approval_id: str,
        decision: str,
        *,
        by: str,
        message: str | None = None,
    ) -> ApprovalRequest:
        self._own(approval_id)
        return self._approvals().decide(approval_id, decision, by=by, message=message)
