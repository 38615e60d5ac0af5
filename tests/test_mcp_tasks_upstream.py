"""toolgate calling an upstream tool that requires an MCP task (``Connection.call_task``), against
a raw JSON-RPC stdio upstream that misbehaves on purpose (``fixtures/mcp/task_upstream.py``, a
real subprocess): a task call is guarded as a plain call is — the same words for an answer past
the message limit and for a connection lost mid-call, the trace context in the request's
``_meta`` — and a malformed task answer is a bounded protocol fault, not a pydantic dump."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from test_mcp_tools import available, close, open_gateway, spec, until
from toolgate import CallOutcome
from toolgate.model import SideEffect
from toolgate.telemetry.otel import OtelTelemetry

UPSTREAM = Path(__file__).parent / "fixtures" / "mcp" / "task_upstream.py"

pytestmark = pytest.mark.slow


async def _call(mode: str, **options: object) -> CallOutcome:
    gateway, source = open_gateway(
        [
            spec(
                "up",
                command=sys.executable,
                args=(str(UPSTREAM),),
                env={"TASK_UPSTREAM_MODE": mode},
                level=SideEffect.READ_ONLY,
                max_message_bytes=1 << 20,
                timeout=20.0,
            )
        ],
        **options,
    )
    try:
        await gateway.start()
        await until(lambda: available(gateway, "up:job"), "the upstream's tool")
        return await gateway.call("up:job")
    finally:
        await gateway.aclose()
        close(gateway, source)


async def test_an_answer_past_the_message_limit_is_explained_as_for_a_plain_call() -> None:
    outcome = await _call("big")
    assert not outcome.ok
    assert "larger than 1 MiB" in outcome.message and "maxMessageBytes" in outcome.message


@pytest.mark.parametrize(
    ("mode", "wrong"),
    [("badtask", "task.taskId: Input should be a valid string"), ("badget", "status")],
)
async def test_a_malformed_task_answer_is_a_bounded_protocol_fault(mode: str, wrong: str) -> None:
    outcome = await _call(mode)
    assert not outcome.ok
    message = outcome.message or ""
    assert message.startswith("The MCP server up answered the task request wrongly: "), message
    assert wrong in message
    assert "pydantic" not in message and "ValidationError" not in message
    assert len(message) < 500


async def test_a_connection_lost_mid_task_is_reported_lost() -> None:
    outcome = await _call("die")
    assert not outcome.ok
    assert "was lost during the call" in (outcome.message or ""), outcome.message


async def test_the_task_call_carries_the_trace_context() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    outcome = await _call("ok", telemetry=OtelTelemetry(tracer_provider=provider))
    assert outcome.ok, outcome.message
    request = next(s for s in exporter.get_finished_spans() if s.name == "tools/call job")
    assert request.context is not None
    # The upstream answers the traceparent its task's tools/call carried in _meta.
    assert isinstance(outcome.content, str), outcome.content
    version, trace_id, parent_id, _flags = outcome.content.split("-")
    assert (version, int(trace_id, 16), int(parent_id, 16)) == (
        "00",
        request.context.trace_id,
        request.context.span_id,
    )
