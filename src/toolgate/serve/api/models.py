"""The HTTP API's request and response bodies, as pydantic models (they make the OpenAPI
document; responses are built by :mod:`toolgate.serve.api.views` and checked against these by
the schemathesis tests)."""

from __future__ import annotations

from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ...search.fusion import LEXICAL_WEIGHT

__all__ = [
    "AgentInfo",
    "AlertList",
    "ApprovalDetail",
    "ApprovalList",
    "ApprovalNeeded",
    "ApprovalRequested",
    "ApprovalView",
    "AuditPage",
    "CallOutcomeView",
    "CallRequest",
    "ConnectRequest",
    "ConnectionList",
    "ConnectionView",
    "DecisionRequest",
    "DecisionResult",
    "DiagnosticList",
    "GrantList",
    "Health",
    "Problem",
    "SearchExplanation",
    "SearchHitView",
    "SearchResults",
    "SearchTermShare",
    "StatusList",
    "ToolDetail",
    "ToolList",
    "is_absolute_workspace",
]

_STRICT = ConfigDict(extra="forbid")


class Problem(BaseModel):
    """An RFC 9457 problem (``application/problem+json``)."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="``urn:toolgate:problem:<code>``.")
    title: str = Field(description="The HTTP status's reason phrase.")
    status: int
    detail: str = Field(description="What went wrong and what to do, for people and models.")
    code: str = Field(description="The stable machine code (see the README's error table).")


# -- requests -----------------------------------------------------------------------------------


class CallRequest(BaseModel):
    """The body of ``POST /v1/tools/{tool_id}/call`` and of ``POST
    /v1/tools/{tool_id}/approval`` (all optional)."""

    model_config = _STRICT

    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The tool's arguments (checked against its schema)."
    )
    session_id: str | None = Field(
        default=None, min_length=1, max_length=200, description="Groups overflow files."
    )
    workspace: str | None = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="The absolute path of the folder the call acts on, on the gateway's host "
        "(approvals and grants are per workspace).",
    )
    tool_call_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The id the agent's framework gave this tool call: the call gets its own "
        "approval request, and calling again with the same id after a pause finds it.",
    )
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="Names the call for de-duplication when the tool declares no key template: "
        "the same key from the same agent replays the first outcome (read-only tools always "
        "run).",
    )

    @field_validator("workspace")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not is_absolute_workspace(value):
            raise ValueError("must be an absolute path")
        return value


def is_absolute_workspace(value: str) -> bool:
    """Whether ``value`` may name a workspace: an absolute path (POSIX or Windows) without a
    NUL. A relative one would be read against the server's own working folder."""
    return "\x00" not in value and (
        PurePosixPath(value).is_absolute() or PureWindowsPath(value).is_absolute()
    )


class DecisionRequest(BaseModel):
    """The body of ``POST /v1/approvals/{approval_id}/decision``."""

    model_config = _STRICT

    decision: Literal["approve", "always", "deny"] = Field(
        description="``approve``: run this call once; ``always``: run it and stop asking for "
        "this tool in this workspace; ``deny``: refuse it."
    )
    message: str | None = Field(
        default=None, max_length=2000, description="Why (shown to the agent on a denial)."
    )
    grant_ttl: float | None = Field(
        default=None,
        gt=0,
        le=10 * 365 * 86400,
        description="With ``always``: seconds the grant lasts (default: until revoked).",
    )


class ConnectRequest(BaseModel):
    """The body of ``POST /v1/connections/{capability_id}``."""

    model_config = _STRICT

    values: dict[str, str] = Field(
        description="Secrets (``requiredPreferenceNames``) and settings "
        "(``publicPreferenceNames``) by name; an empty setting is removed. Values are stored "
        "and never returned."
    )


# -- tools --------------------------------------------------------------------------------------


class ToolSummary(BaseModel):
    """One tool of the catalog."""

    id: str = Field(description="``namespace:name``.")
    name: str
    namespace: str
    title: str
    description: str
    provider_name: str = Field(
        description="The function name the OpenAI, Anthropic and Gemini exports use."
    )
    mcp_name: str = Field(description="The name MCP clients see in `tools/list`.")
    side_effect: str
    requires_approval: bool
    kind: str
    source_format: str
    source: str | None
    capability: str | None
    available: bool
    unavailable_reason: str | None
    phase: str = Field(description="Ready, Degraded, Unavailable or Failed.")
    tile: str | None = Field(description="The tile's display line, arguments as `<name>`.")
    examples: list[str]
    dangerous: bool
    input_schema: dict[str, Any] | None = Field(
        default=None, description="The input JSON Schema (with `schemas=true`)."
    )
    timeout: float | None = Field(
        default=None, description="Seconds a call may run (with `schemas=true`)."
    )


class ToolList(BaseModel):
    """One page of the tools the agent may call, sorted by id."""

    tools: list[ToolSummary]
    total: int = Field(description="How many tools the agent may call, on every page.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; `null` on the last page."
    )


class SearchTermShare(BaseModel):
    """A request term found in the tool, with its share of the BM25 score."""

    term: str = Field(description="The search term (lower-cased, lightly stemmed).")
    share: float


class SearchExplanation(BaseModel):
    """Why a tool ranked where it did."""

    terms: list[SearchTermShare] = Field(description="Request terms found in the tool.")
    lexical_score: float | None = Field(description="BM25 (null: lexical ranking not used).")
    semantic_score: float | None = Field(
        description="Similarity of request and tool (null: semantic ranking not used)."
    )
    example: str | None = Field(description="The tool's prompt example closest to the request.")
    example_similarity: float | None
    formula: str = Field(description="How the score is made of the parts above.")


class SearchHitView(BaseModel):
    """One search result: the tool's definition and how well it matches."""

    rank: int = Field(description="1 for the best match.")
    id: str
    provider_name: str = Field(description="The provider-safe name to call it by.")
    title: str
    description: str
    input_schema: dict[str, Any]
    side_effect: str
    timeout: float
    score: float = Field(
        description="BM25 (lexical), cosine similarity (semantic), or fused: similarity + "
        f"{LEXICAL_WEIGHT} * BM25 / best BM25 of the caller's tools for the query."
    )
    lexical_rank: int | None
    semantic_rank: int | None
    explain: SearchExplanation | None = Field(
        default=None, description="Why the tool ranked here (with explain=true)."
    )


class SearchResults(BaseModel):
    """The tools that best match a query, best first (only tools the agent may call)."""

    query: str = Field(description="The query as searched (control characters removed).")
    mode: str = Field(description="lexical, semantic or fused.")
    tools: list[SearchHitView]


class ApprovalNeeded(BaseModel):
    """Whether a call of the tool by this agent would wait for a person now."""

    tool: str = Field(description="The tool's id.")
    approval_needed: bool = Field(
        description='Approval is required and no "always allow" grant covers the call.'
    )


class ToolStatusView(BaseModel):
    """Health of one tool (the status field names of ``Tool`` resources)."""

    tool: str
    phase: str
    totalCalls7d: int
    failureRate7d: float
    p50: float | None
    p95: float | None
    lastError: str | None
    reason: str | None


class ToolDetail(ToolSummary):
    """One tool with its schemas and health."""

    timeout: float
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    hints: dict[str, bool]
    status: ToolStatusView


class StatusList(BaseModel):
    """One page of the tools' health, sorted by tool id (operators: with the declarations
    that fail to load, their path as `tool`)."""

    tools: list[ToolStatusView]
    total: int = Field(description="How many entries there are, on every page.")
    next_cursor: str | None = Field(
        description="Pass as `cursor` for the next page; `null` on the last page."
    )


class PendingApprovalView(BaseModel):
    """The request a pending call waits on, and where it is decided."""

    id: str
    title: str
    risk: str
    facts: list[list[str]]
    display: str | None = Field(default=None, description="The call's one-line display.")
    created_at: float | None = Field(default=None, description="When the request was made.")
    expires_at: float
    status_url: str = Field(description="Where to follow it: ``GET`` gives its state.")
    approve_url: str | None = Field(description="The web UI page deciding it, when served.")
    cli: str = Field(description="The command that approves it.")


class CallOutcomeView(BaseModel):
    """How a call ended. ``text`` is what a model should read.

    ``blocks`` is set when the tool answered with MCP content blocks (images, audio, resource
    links, embedded resources, annotated text): each block as MCP defines it, base64 data,
    ``annotations`` and ``_meta`` included. ``content`` is then the ``structuredContent`` when
    the tool gave one, else the same text as ``text``."""

    status: Literal["ok", "error", "pending_approval"]
    tool: str
    call_id: str
    text: str
    content: Any = None
    blocks: list[dict[str, Any]] | None = None
    code: str | None = None
    message: str | None = None
    visualization: dict[str, Any] | None = None
    overflow: dict[str, Any] | None = None
    approval: PendingApprovalView | None = None
    duration: float
    metadata: dict[str, Any] = Field(default_factory=dict)


# -- approvals and grants -----------------------------------------------------------------------


class PermissionView(BaseModel):
    type: str
    key: str


class ApprovalView(BaseModel):
    """An approval request (times are Unix seconds)."""

    id: str
    tool: str
    title: str
    display: str | None
    risk: str
    facts: list[list[str]]
    arguments: dict[str, Any]
    workspace: str | None
    agent: str | None
    session_id: str | None
    permission: PermissionView
    security_message: str | None
    status: str
    created_at: float
    expires_at: float
    decision: str | None
    decided_by: str | None
    decided_at: float | None
    decision_message: str | None


class ApprovalList(BaseModel):
    approvals: list[ApprovalView]


class ApprovalRequested(BaseModel):
    """The approval request of exactly this call, found or made — or ``null`` when nobody
    would be asked."""

    tool: str = Field(description="The tool's id.")
    approval: ApprovalView | None = Field(
        description="The request as `GET /v1/approvals/{id}` shows it (`status` says pending, "
        "approved or denied); `null` when the call would not wait for a person now (no approval "
        'required, an "always allow" grant covers it, or the call would be refused: the call '
        "itself says why)."
    )


class ApprovalDetail(BaseModel):
    approval: ApprovalView
    outcome: CallOutcomeView | None = Field(description="The call's outcome once decided.")
    events: list[dict[str, Any]] = Field(description="Who asked, decided, ran (operators).")


class DecisionResult(BaseModel):
    approval: ApprovalView
    outcome: CallOutcomeView | None = Field(
        description="The refusal for a denial; null for an approval: the agent's next call "
        "with the same arguments runs it (GET /v1/approvals/{id} shows the outcome then)."
    )


class GrantView(BaseModel):
    id: str
    tool: str
    workspace: str | None
    permission: PermissionView
    granted_by: str | None
    granted_at: float
    expires_at: float | None
    approval_id: str | None


class GrantList(BaseModel):
    grants: list[GrantView]


# -- audit, alerts, diagnostics -----------------------------------------------------------------


class AuditRecordView(BaseModel):
    """One call as the audit log keeps it (redacted)."""

    time: float
    call_id: str
    tool_id: str
    definition_hash: str | None
    status: str
    code: str | None
    message: str | None
    detail: str | None
    duration: float
    agent: str | None
    session: str | None
    workspace: str | None
    approval_id: str | None
    approval_decision: str | None
    idempotency_key: str | None
    args: Any = None
    result: Any = None
    visualization: Any = None
    metadata: dict[str, Any]


class AuditPage(BaseModel):
    enabled: bool = Field(description="False when this gateway keeps no audit log.")
    records: list[AuditRecordView]
    total: int = Field(
        description="Records matching the filters, counted up to 10,000 (see `total_exact`)."
    )
    total_exact: bool = Field(
        default=True,
        description="False when more than 10,000 records match: `total` is then 10,000 and "
        "the pages go on while `next_offset` is set.",
    )
    limit: int
    offset: int
    next_offset: int | None = Field(description="The ``offset`` of the next page, if any.")


class AlertView(BaseModel):
    source: str
    level: str
    message: str


class AlertList(BaseModel):
    alerts: list[AlertView]


class DiagnosticView(BaseModel):
    path: str
    field: str | None
    message: str
    severity: str


class DiagnosticList(BaseModel):
    diagnostics: list[DiagnosticView]


# -- connections --------------------------------------------------------------------------------


class ConnectionView(BaseModel):
    """A capability's connection (secret names only, never values)."""

    id: str
    title: str
    connected: bool
    missing: list[str]
    problem: str | None
    secrets: list[str] = Field(description="The secrets it needs (requiredPreferenceNames).")
    settings: dict[str, str | None] = Field(description="Its public settings and their values.")
    tools: list[str]


class SecretStoreView(BaseModel):
    description: str | None
    problem: str | None


class ConnectionList(BaseModel):
    connections: list[ConnectionView]
    secret_store: SecretStoreView


# -- the caller and the server ------------------------------------------------------------------


class AgentInfo(BaseModel):
    agent: str = Field(description="Who this request was authenticated as.")
    operator: bool = Field(description="Whether it may use the operator endpoints.")
    instructions: str = Field(description="Capability guides for this agent.")


class AuditHealth(BaseModel):
    enabled: bool
    healthy: bool
    lost: int = Field(description="Records dropped since start (full queue, failed writes).")
    pending: int


class StateHealth(BaseModel):
    shared: bool = Field(description="Whether state is shared with other replicas.")
    database: bool | None = Field(
        description="Whether the shared PostgreSQL database answers (null: none configured)."
    )
    redis: bool | None = Field(
        description="Whether the Redis of the rate-limit counters answers (null: none)."
    )


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(
        description="degraded: the audit log failed, or a shared-state service does not answer."
    )
    tools: int
    audit: AuditHealth
    state: StateHealth
