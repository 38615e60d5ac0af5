"""The OpenTelemetry spans of tool calls, after the GenAI semantic conventions for tool execution.

Each call is an ``execute_tool {tool}`` span (kind ``INTERNAL``) with ``gen_ai.operation.name``
``execute_tool``, ``gen_ai.tool.name`` (the tool id), ``gen_ai.tool.call.id`` (the call id) and
toolgate's ``toolgate.outcome`` / ``toolgate.code``; a failed call has the status ``ERROR`` and
``error.type`` set to its error code. The arguments (``gen_ai.tool.call.arguments``) and the
result (``gen_ai.tool.call.result``) are added only when the tool's observability settings let
the audit log keep them, and exactly as the audit log keeps them: redacted by
:func:`~toolgate.audit.record_from` (declared paths and the secrets the tool received).

Children: ``toolgate.<stage>`` for the stages that may await I/O (the security check, the
approval stage), ``toolgate.backend`` for running a tool out of process (a script, a REST
endpoint, a remote MCP server; an in-process Python function's time is the call's), under which
a REST or remote MCP tool's request is a ``CLIENT`` span whose context is sent upstream
(``traceparent``), and ``toolgate.approval_wait`` for a caller waiting for a person's decision.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ..audit.record import record_from
from ..model import ApprovalRequest, CallOutcome, CallStatus, ImplementationKind
from ..pipeline.observers import FinishedCall
from ..pipeline.state import CallState, Handler, Stage
from ..pipeline.tracing import StageCall
from ..registry import RegisteredTool
from ..trace_context import OUTGOING, ClientSpan

__all__ = ["MAX_CONTENT_CHARS", "OtelCallTracer"]

#: Longer arguments or results are cut to this many characters (and end with ``…``).
MAX_CONTENT_CHARS: Final = 8192

_OPERATION: Final = "execute_tool"


_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":")).encode


def _json(value: Any) -> str:
    text = _ENCODE(value)
    return text if len(text) <= MAX_CONTENT_CHARS else text[: MAX_CONTENT_CHARS - 1] + "…"


def _start_attributes(tool_id: str, call_id: str, kind: str | None) -> dict[str, str]:
    attributes = {
        "gen_ai.operation.name": _OPERATION,
        "gen_ai.tool.name": tool_id,
        "gen_ai.tool.call.id": call_id,
    }
    if kind is not None:
        attributes["toolgate.tool.kind"] = kind
    return attributes


def _fail(span: Span, error_type: str, message: str | None = None) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, message))


class _ClientSpan:
    """A request upstream (see :class:`toolgate.trace_context.ClientSpan`)."""

    __slots__ = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def inject(self, carrier: MutableMapping[str, str]) -> None:
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))

    def set_attribute(self, key: str, value: str | int) -> None:
        self.span.set_attribute(key, value)

    def fail(self, error_type: str) -> None:
        _fail(self.span, error_type)


class _Outgoing:
    """The :class:`toolgate.trace_context.OutgoingTracer` set while a backend runs."""

    __slots__ = ("tracer",)

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    @contextmanager
    def client_span(self, name: str, attributes: Mapping[str, str | int]) -> Iterator[ClientSpan]:
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=dict(attributes))
        # Current while the request is made: a client library that propagates the context
        # itself (the MCP SDK writes the current one into _meta) then sends this span's.
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            yield _ClientSpan(span)
        except BaseException as exc:
            _fail(span, type(exc).__qualname__, str(exc) or None)
            raise
        finally:
            otel_context.detach(token)
            span.end()


class OtelCallTracer:
    """The pipeline's :class:`~toolgate.pipeline.tracing.CallTracer` and the call observer that
    ends each call's span (see the module documentation)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer
        self._outgoing = _Outgoing(tracer)
        self._open: dict[str, Span] = {}
        """Spans of calls in flight, by call id, until their observer call ends them."""

    # -- the plan -------------------------------------------------------------------------------

    def wrap_call(self, handler: Handler) -> Handler:
        tracer, open_spans = self.tracer, self._open

        async def traced(state: CallState) -> CallOutcome:
            tool = state.tool
            span = tracer.start_span(
                f"{_OPERATION} {tool.id}",
                kind=SpanKind.INTERNAL,
                attributes=_start_attributes(tool.id, state.call_id, str(tool.kind)),
            )
            open_spans[state.call_id] = span
            token = otel_context.attach(trace.set_span_in_context(span))
            try:
                return await handler(state)
            except BaseException as exc:
                # An Exception becomes a ``crashed`` outcome that the observer records; anything
                # else (the caller cancelled) ends the call here.
                open_span = (
                    None if isinstance(exc, Exception) else open_spans.pop(state.call_id, None)
                )
                if open_span is not None:
                    _fail(span, type(exc).__qualname__, "the call was cancelled")
                    span.end()
                raise
            finally:
                otel_context.detach(token)

        return traced

    def wrap_stage(self, stage: Stage) -> StageCall:
        tracer = self.tracer
        name = f"toolgate.{stage.name}"

        async def traced(state: CallState, proceed: Handler) -> CallOutcome:
            span = tracer.start_span(name)
            ended = False

            async def onward(current: CallState) -> CallOutcome:
                nonlocal ended
                if not ended:
                    ended = True
                    span.end()
                return await proceed(current)

            try:
                outcome = await stage(state, onward)
                if not ended:  # the stage ended the call itself (refused it, or it waits)
                    span.set_attribute("toolgate.outcome", outcome.status.value)
                    if outcome.code is not None:
                        _fail(span, str(outcome.code))
                return outcome
            finally:
                if not ended:
                    span.end()

        return traced

    def wrap_execute(self, handler: Handler, entry: RegisteredTool) -> Handler:
        if entry.tool.kind is ImplementationKind.PYTHON:
            # The function runs in process: its time is the call's, and a span of its own would
            # cost as much again as the call's span (the SDK's spans are not cheap).
            return handler
        tracer, outgoing = self.tracer, self._outgoing

        async def traced(state: CallState) -> CallOutcome:
            span = tracer.start_span(
                "toolgate.backend", attributes={"toolgate.tool.kind": str(state.tool.kind)}
            )
            token = otel_context.attach(trace.set_span_in_context(span))
            marker = OUTGOING.set(outgoing)
            try:
                outcome = await handler(state)
                if outcome.code is not None:
                    _fail(span, str(outcome.code))
                return outcome
            except BaseException as exc:
                _fail(span, type(exc).__qualname__)
                raise
            finally:
                OUTGOING.reset(marker)
                otel_context.detach(token)
                span.end()

        return traced

    # -- the observer ---------------------------------------------------------------------------

    def observe(self, call: FinishedCall) -> None:
        """End the call's span with how it ended (or record a call that ended before its plan
        ran — an unknown or unavailable tool, a person's denial — as a span of its own)."""
        span = self._open.pop(call.call_id, None)
        if span is None:
            kind = None if call.tool is None else str(call.tool.kind)
            span = self.tracer.start_span(
                f"{_OPERATION} {call.tool_id}",
                kind=SpanKind.INTERNAL,
                attributes=_start_attributes(call.tool_id, call.call_id, kind),
                start_time=int(call.started_at * 1e9),
            )
        try:
            if span.is_recording():  # a span the sampler dropped needs no redaction
                self._finish(span, call)
        finally:
            span.end()

    @staticmethod
    def _finish(span: Span, call: FinishedCall) -> None:
        # The audit log's redaction, exactly: ``args`` / ``result`` are None when the tool's
        # observability settings keep them out of records.
        record = record_from(call)
        attributes: dict[str, str] = {"toolgate.outcome": record.status}
        for key, value in (
            ("toolgate.agent", record.agent),
            ("toolgate.session.id", record.session),
            ("toolgate.approval.id", record.approval_id),
            ("toolgate.approval.decision", record.approval_decision),
            ("toolgate.code", record.code),
            ("error.type", record.code),
        ):
            if value is not None:
                attributes[key] = value
        if record.args is not None:
            attributes["gen_ai.tool.call.arguments"] = _json(record.args)
        if record.status == CallStatus.OK.value and record.result is not None:
            attributes["gen_ai.tool.call.result"] = _json(record.result)
        span.set_attributes(attributes)  # at once: each attribute set takes the span's lock
        if record.code is not None:
            span.set_status(Status(StatusCode.ERROR, record.message))

    # -- waiting for a person -------------------------------------------------------------------

    @contextmanager
    def approval_wait(self, request: ApprovalRequest) -> Iterator[None]:
        """A span around a caller's wait for a decision on ``request`` (current meanwhile, so
        that the approved call's span is its child when this caller's approver runs it)."""
        with self.tracer.start_as_current_span(
            "toolgate.approval_wait",
            attributes={"gen_ai.tool.name": request.tool_id, "toolgate.approval.id": request.id},
        ):
            yield
