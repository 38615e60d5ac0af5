"""The audit record: one finished call, redacted, as it is stored and exported."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..model import CallStatus, Tool
from ..model.content import ContentResult, record_form
from ..pipeline.observers import FinishedCall
from ..redaction import Masker, record_masker, redact, redact_edges, redact_text, redact_values

__all__ = ["AuditRecord", "approval_decision", "record_from"]


@dataclass(slots=True)
class AuditRecord:
    """One call as the audit log keeps it. Every text field is already redacted. Treat it as
    read-only (not frozen only because a frozen dataclass is several times slower to build, and
    one is built for every call).

    ``args`` is ``None`` when the tool's ``log_args`` is off; ``result`` and ``visualization``
    are ``None`` when ``log_result`` is off or the call did not succeed.
    """

    time: float
    """Unix time the call began."""
    call_id: str
    tool_id: str
    status: str
    """``ok``, ``error`` or ``pending_approval``."""
    agent: str | None = None
    session: str | None = None
    workspace: str | None = None
    definition_hash: str | None = None
    """The tool definition that handled the call (``None`` when no tool matched)."""
    code: str | None = None
    """The error code, for errors."""
    message: str | None = None
    """The error (or pending) message, redacted."""
    detail: str | None = None
    """Operator-only detail (a traceback, a stderr tail), redacted."""
    duration: float = 0.0
    approval_id: str | None = None
    approval_decision: str | None = None
    """``pending``, ``approve``, ``always``, ``deny`` or ``granted`` (an "always allow" grant
    covered the call); ``None`` when no approval was involved."""
    idempotency_key: str | None = None
    args: Any = None
    result: Any = None
    visualization: Any = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the call succeeded."""
        return self.status == CallStatus.OK.value

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy (what ``toolgate audit export`` writes, one object per line)."""
        return {
            "time": self.time,
            "call_id": self.call_id,
            "tool_id": self.tool_id,
            "definition_hash": self.definition_hash,
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "detail": self.detail,
            "duration": self.duration,
            "agent": self.agent,
            "session": self.session,
            "workspace": self.workspace,
            "approval_id": self.approval_id,
            "approval_decision": self.approval_decision,
            "idempotency_key": self.idempotency_key,
            "args": self.args,
            "result": self.result,
            "visualization": self.visualization,
            "metadata": dict(self.metadata),
        }


def approval_decision(call: FinishedCall) -> tuple[str | None, str | None]:
    """``(approval_id, decision)`` for a call, from its outcome and ``metadata["approval"]``."""
    outcome = call.outcome
    info = outcome.metadata.get("approval")
    info = info if isinstance(info, Mapping) else {}
    approval_id = info.get("id")
    if approval_id is None and outcome.approval is not None:
        approval_id = outcome.approval.id
    if outcome.status is CallStatus.PENDING_APPROVAL:
        return _str(approval_id), "pending"
    if outcome.approval is not None and outcome.approval.decision is not None:
        return _str(approval_id), str(outcome.approval.decision)
    if approval_id is not None:
        # A taken (approved) request ran the call: ``approve`` or ``always``.
        return _str(approval_id), _str(info.get("decision")) or "approve"
    if info.get("grant") is not None:
        return None, "granted"
    return None, None


# id(tool) -> (tool, hash): the definition hash serializes the whole tool, so compute it once per
# tool object (the tool is kept alive by the entry, so its id is not reused meanwhile).
_HASHES: dict[int, tuple[Tool, str]] = {}
_HASHES_MAX = 4096


def _definition_hash(tool: Tool) -> str:
    entry = _HASHES.get(id(tool))
    if entry is not None and entry[0] is tool:
        return entry[1]
    value = tool.definition_hash
    if len(_HASHES) >= _HASHES_MAX:
        _HASHES.clear()
    _HASHES[id(tool)] = (tool, value)
    return value


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _idempotency_key(metadata: Mapping[str, Any]) -> str | None:
    info = metadata.get("idempotency")
    if isinstance(info, Mapping):
        return _str(info.get("key"))
    return _str(info)


def record_from(call: FinishedCall) -> AuditRecord:
    """Build the redacted record of ``call``.

    Paths come from the tool's ``observability.redact_fields`` (``args.*`` paths apply to the
    arguments, ``result.*`` to the result — to its ``structuredContent`` for a result made of
    content blocks, the strings caught being scrubbed from its blocks too —,
    ``result._visualization.*`` and ``visualization.*`` to the visualization); secrets from
    ``call.secrets``. Strings masked by path are also scrubbed from every other text of the
    record (message, detail, metadata, idempotency key, …), as are the secrets — so an error
    message or a stderr tail echoing them records only the marker.
    Arguments and results are redacted even when they are not kept, so that their values are
    still scrubbed from the rest. Pieces and encoded forms of the secrets, and the credentials of
    every URL in any string (user info, ``?api_key=``…), are masked too
    (:func:`~toolgate.redaction.record_masker`). A call to a tool that does not exist keeps no
    arguments at all.
    """
    outcome = call.outcome
    # Content blocks are recorded without their base64 (type, mime type and size instead).
    content = record_form(outcome.content)
    tool = call.tool
    spec = tool.observability if tool is not None else None
    paths = spec.redact_fields if spec is not None else ()
    # No tool (``tool_not_found``): nothing says which of its values are secret, so none is kept.
    log_args = spec.log_args if spec is not None else False
    log_result = spec.log_result if spec is not None else True
    secrets = call.secrets

    ok = outcome.status is CallStatus.OK
    if not paths and not secrets:
        # Nothing masked by path or secret (most calls): only the credentials of URLs, in place —
        # the values are serialized on this thread before anyone else could see the record, so
        # an unchanged value needs no copy.
        urls = record_masker()
        return _record(
            call,
            args=redact_values(call.arguments, urls) if log_args else None,
            result=redact_values(content, urls) if (ok and log_result) else None,
            visualization=(
                redact_values(outcome.visualization, urls) if (ok and log_result) else None
            ),
            metadata=redact_values(outcome.metadata, urls),
            pattern=urls,
            cut=(),
        )

    # By path first (learning the masked strings), then one pass of the secrets, those strings
    # and the URL credentials over everything.
    removed: set[str] = set()
    args = redact(call.arguments, paths, prefix="args", removed=removed)
    result: Any = None
    visualization: Any = None
    if ok or paths:
        if call.full_content is not None and paths:
            # Spilled: the outcome holds a preview string, so mask by path in the whole result
            # only to learn the values, which are then scrubbed from the preview below.
            _redact_result(call.full_content, paths, removed)
        result = _redact_result(outcome.content, paths, removed)
    if outcome.visualization is not None:
        vis = redact(
            outcome.visualization,
            paths,
            prefix="result._visualization",
            removed=removed,
        )
        visualization = redact(vis, paths, prefix="visualization", secrets=(), removed=removed)

    pattern = record_masker(secrets, removed)
    args = redact_values(args, pattern)
    result = redact_values(result, pattern)
    visualization = redact_values(visualization, pattern)
    return _record(
        call,
        args=args if log_args else None,
        result=result if (ok and log_result) else None,
        visualization=visualization if (ok and log_result) else None,
        metadata=redact_values(outcome.metadata, pattern),
        pattern=pattern,
        cut=(*secrets, *removed),
    )


def _redact_result(value: Any, paths: tuple[str, ...], removed: set[str]) -> Any:
    """The record form of a result with the ``result.*`` paths masked. In a result made of
    content blocks the paths name fields of its ``structuredContent`` (the JSON result the
    output schema describes); the strings they catch are learned in ``removed``, so the
    caller's pass of :func:`record_masker` scrubs them from the blocks' text too (an upstream
    usually repeats its structured result as a JSON text block). A path ``result`` alone masks
    the whole result."""
    if not isinstance(value, ContentResult):
        return redact(value, paths, prefix="result", secrets=(), removed=removed)
    data = value.record()
    if "result" in paths:
        return redact(data, paths, prefix="result", secrets=(), removed=removed)
    if "structuredContent" in data:
        data["structuredContent"] = redact(
            data["structuredContent"], paths, prefix="result", secrets=(), removed=removed
        )
    return data


def _record(
    call: FinishedCall,
    *,
    args: Any,
    result: Any,
    visualization: Any,
    metadata: Mapping[str, Any],
    pattern: Masker,
    cut: tuple[str, ...],
) -> AuditRecord:
    """The record of ``call`` with these (already redacted) values; its texts are scrubbed with
    ``pattern``, and ``cut`` values are masked where a bounded tail cut them."""
    outcome = call.outcome
    tool = call.tool
    approval_id, decision = approval_decision(call)
    return AuditRecord(
        time=call.started_at,
        call_id=_text(call.call_id, pattern) or "",
        tool_id=call.tool_id,
        status=str(outcome.status),
        agent=_text(call.agent, pattern),
        session=_text(call.session_id, pattern),
        workspace=_text(call.workspace, pattern),
        definition_hash=_definition_hash(tool) if tool is not None else None,
        code=None if outcome.code is None else str(outcome.code),
        message=_text(outcome.message, pattern),
        detail=_cut_text(outcome.detail, pattern, cut),
        duration=float(outcome.duration),
        approval_id=_text(approval_id, pattern),
        approval_decision=decision,
        idempotency_key=_text(_idempotency_key(outcome.metadata), pattern),
        args=args,
        result=result,
        visualization=visualization,
        metadata=metadata,
    )


def _text(value: str | None, pattern: Masker) -> str | None:
    return None if value is None else redact_text(value, pattern)


def _cut_text(value: str | None, pattern: Masker, values: tuple[str, ...]) -> str | None:
    # The detail holds bounded tails (a script's stderr): a value may be cut by its first edge.
    text = _text(value, pattern)
    return text if text is None or not values else redact_edges(text, values)
