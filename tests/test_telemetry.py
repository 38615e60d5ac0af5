"""Telemetry in process: the spans' structure per pipeline path, tracing off means bare plans,
the OTEL_* settings, the Prometheus exposition and the JSON call log.

Spans go to the OpenTelemetry SDK's in-memory exporter (the OTLP path, with a real receiver, is
in test_observability_serve.py).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from folder_tools import write_tool
from toolgate import ApprovalRequest, CallStatus, Gateway, tool
from toolgate.model import SideEffect
from toolgate.pipeline import STAGE_ORDER
from toolgate.pipeline.execute import Executor
from toolgate.telemetry import CallMetrics, Gauges, OtelSettings, from_environment
from toolgate.telemetry.call_log import CALL_LOGGER, CallLog, JsonFormatter
from toolgate.telemetry.otel import OtelTelemetry
from toolgate.telemetry.prometheus import PrometheusExposition

SECRET = "s3cret-token-value-42"


@tool(namespace="t")
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool(namespace="t", log_args=False, log_result=False)
def quiet(a: int) -> int:
    """Keeps its arguments and result out of records."""
    return a


@tool(namespace="t", redact=["args.token"])
def leak(token: str) -> str:
    """Fails echoing its redacted argument."""
    raise ValueError(f"rejected {token}")


RAN: list[int] = []


@tool(namespace="t", security_check=lambda payload: {"allowed": True})
def checked(a: int) -> int:
    """Has a Python security check; notes when it runs."""
    RAN.append(time.time_ns())
    return a


@tool(namespace="t", effect="external_write")
def send(to: str) -> str:
    """Needs approval."""
    return f"sent to {to}"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def traced(exporter: InMemorySpanExporter) -> Iterator[Gateway]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Gateway(telemetry=OtelTelemetry(tracer_provider=provider)) as gateway:
        gateway.add(add, quiet, leak, checked)
        yield gateway


def _by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


# -- tracing off --------------------------------------------------------------------------------


def test_without_telemetry_plans_are_the_bare_stage_chain() -> None:
    with Gateway() as gateway:
        gateway.add(add, checked)
        assert gateway.pipeline.tracer is None
        plan = gateway.pipeline.plan_for(gateway.registry.get("t:checked"))  # type: ignore[arg-type]
        chain = []
        handler: Any = plan.handler
        while not isinstance(handler, Executor):
            chain.append(type(handler.func).__name__)
            handler = handler.keywords["proceed"]
        assert chain == [
            "ValidateArgumentsStage",
            # A tool that may change something takes a caller's idempotency key.
            "IdempotencyStage",
            "SecurityCheckStage",
            "ApprovalStage",
            "ConcurrencyStage",
        ]
        assert handler is gateway.pipeline.executor


def test_with_telemetry_the_plan_is_wrapped(traced: Gateway) -> None:
    plan = traced.pipeline.plan_for(traced.registry.get("t:add"))  # type: ignore[arg-type]
    assert traced.pipeline.tracer is not None
    assert not isinstance(plan.handler, Executor) and plan.handler.__name__ == "traced"
    assert plan.inline  # a traced plan still runs inline in call_sync


# -- spans --------------------------------------------------------------------------------------


def test_an_inline_call_is_one_execute_tool_span(
    traced: Gateway, exporter: InMemorySpanExporter
) -> None:
    outcome = traced.call_sync("t:add", {"a": 1, "b": 2}, agent="bot")
    assert outcome.ok
    spans = _by_name(exporter)
    # An in-process function's time is the call's: no backend span of its own.
    assert list(spans) == ["execute_tool t:add"]
    call = spans["execute_tool t:add"]
    assert call.kind is SpanKind.INTERNAL and call.parent is None
    assert call.attributes is not None
    assert dict(call.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "t:add",
        "gen_ai.tool.call.id": outcome.call_id,
        "toolgate.tool.kind": "python",
        "toolgate.outcome": "ok",
        "toolgate.agent": "bot",
        "gen_ai.tool.call.arguments": '{"a":1,"b":2}',
        "gen_ai.tool.call.result": "3",
    }
    assert call.status.status_code is StatusCode.UNSET


def test_arguments_and_results_follow_the_tools_observability_settings(
    traced: Gateway, exporter: InMemorySpanExporter
) -> None:
    assert traced.call_sync("t:quiet", {"a": 7}).ok
    attributes = _by_name(exporter)["execute_tool t:quiet"].attributes or {}
    assert "gen_ai.tool.call.arguments" not in attributes
    assert "gen_ai.tool.call.result" not in attributes


async def test_a_failure_is_redacted_like_the_audit_log(
    traced: Gateway, exporter: InMemorySpanExporter
) -> None:
    outcome = await traced.call("t:leak", {"token": SECRET})
    assert outcome.code is not None
    call = _by_name(exporter)["execute_tool t:leak"]
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "Tool t:leak failed with ValueError: rejected [REDACTED]"
    assert call.attributes is not None
    assert call.attributes["error.type"] == "tool_error"
    assert call.attributes["gen_ai.tool.call.arguments"] == '{"token":"[REDACTED]"}'
    for span in exporter.get_finished_spans():
        assert SECRET not in json.dumps(span.to_json())


def test_a_suspending_stage_has_its_own_span(
    traced: Gateway, exporter: InMemorySpanExporter
) -> None:
    assert "security_check" in STAGE_ORDER
    RAN.clear()
    assert traced.call_sync("t:checked", {"a": 1}).ok
    spans = _by_name(exporter)
    call, check = spans["execute_tool t:checked"], spans["toolgate.security_check"]
    assert _parent(check) == call.context.span_id
    assert check.context.trace_id == call.context.trace_id
    # The stage's span ends when it hands the call on, before the tool runs.
    assert check.end_time is not None and check.end_time <= RAN[0]


def test_a_script_tool_runs_in_a_backend_span(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    write_tool(tmp_path, "echo", "read -r line; printf '{\"got\": 1}\\n'")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = OtelTelemetry(tracer_provider=provider)
    with Gateway(tool_folders=[tmp_path], telemetry=telemetry) as gateway:
        outcome = gateway.call_sync("local:echo", {})
    assert outcome.ok, outcome.message
    spans = _by_name(exporter)
    call, backend = spans["execute_tool local:echo"], spans["toolgate.backend"]
    assert _parent(backend) == call.context.span_id
    assert (backend.attributes or {})["toolgate.tool.kind"] == "script"
    assert backend.start_time is not None and call.start_time is not None
    assert call.start_time <= backend.start_time


def test_unknown_tools_get_a_span_too(traced: Gateway, exporter: InMemorySpanExporter) -> None:
    outcome = traced.call_sync("t:missing", {})
    call = _by_name(exporter)["execute_tool t:missing"]
    assert call.attributes is not None
    assert call.attributes["gen_ai.tool.call.id"] == outcome.call_id
    assert call.attributes["error.type"] == "tool_not_found"


def test_waiting_for_approval_is_a_span_that_parents_the_approved_call(
    exporter: InMemorySpanExporter,
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def approver(request: ApprovalRequest) -> str:
        return "approve"

    with Gateway(approver=approver, telemetry=OtelTelemetry(tracer_provider=provider)) as gw:
        gw.add(send)
        outcome = gw.call_sync("t:send", {"to": "ada"}, wait_for_approval=30)
    assert outcome.ok, outcome
    spans = exporter.get_finished_spans()
    calls = [span for span in spans if span.name == "execute_tool t:send"]
    pending = next(
        s for s in calls if (s.attributes or {})["toolgate.outcome"] == "pending_approval"
    )
    ran = next(s for s in calls if (s.attributes or {})["toolgate.outcome"] == "ok")
    wait = next(s for s in spans if s.name == "toolgate.approval_wait")
    stage = next(
        s for s in spans if s.name == "toolgate.approval" and _parent(s) == pending.context.span_id
    )
    assert (stage.attributes or {})["toolgate.outcome"] == "pending_approval"
    assert _parent(ran) == wait.context.span_id
    approval_id = (wait.attributes or {})["toolgate.approval.id"]
    assert (pending.attributes or {})["toolgate.approval.id"] == approval_id
    assert (ran.attributes or {})["toolgate.approval.id"] == approval_id


async def test_a_cancelled_call_ends_its_span(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    started = asyncio.Event()

    @tool(namespace="t")
    async def slow() -> str:
        """Waits."""
        started.set()
        await asyncio.sleep(60)
        return "never"

    with Gateway(telemetry=OtelTelemetry(tracer_provider=provider)) as gateway:
        gateway.add(slow)
        task = asyncio.create_task(gateway.call("t:slow"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    call = _by_name(exporter)["execute_tool t:slow"]
    assert call.status.status_code is StatusCode.ERROR
    assert (call.attributes or {})["error.type"] == "CancelledError"


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "traces", "metrics"),
    [
        ({}, (), ()),
        ({"OTEL_SERVICE_NAME": "x"}, (), ()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, ("otlp",), ("otlp",)),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c", "OTEL_SDK_DISABLED": "true"}, (), ()),
        ({"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none"}, ("console",), ()),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, ("otlp", "console"), ("otlp",)),
    ],
)
def test_otel_is_on_only_when_the_environment_asks(
    environ: dict[str, str], traces: tuple[str, ...], metrics: tuple[str, ...]
) -> None:
    settings = OtelSettings.from_environ(environ)
    assert (settings.traces, settings.metrics) == (traces, metrics)
    assert settings.enabled is bool(traces or metrics)
    assert settings.problems == ()


def test_unsupported_exporters_and_protocols_are_reported_and_left_out() -> None:
    settings = OtelSettings.from_environ(
        {
            "OTEL_TRACES_EXPORTER": "zipkin,otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_METRICS_EXPORTER": "console",
        }
    )
    assert settings.traces == () and settings.metrics == ("console",)
    assert any("zipkin" in problem for problem in settings.problems)
    assert any("'grpc'" in problem for problem in settings.problems)


def test_from_environment_is_none_when_off() -> None:
    assert from_environment({}) is None
    assert from_environment({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}) is None


@pytest.mark.slow
def test_an_unreachable_collector_does_not_fail_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
    telemetry = from_environment()
    assert isinstance(telemetry, OtelTelemetry)
    with Gateway(telemetry=telemetry) as gateway:
        gateway.add(add)
        outcomes = [gateway.call_sync("t:add", {"a": n, "b": 1}) for n in range(20)]
    assert [outcome.content for outcome in outcomes] == [n + 1 for n in range(20)]


# -- Prometheus -----------------------------------------------------------------------------------


def test_the_prometheus_exposition_parses_with_cumulative_buckets() -> None:
    metrics = CallMetrics(Gauges(approvals_pending=lambda: 3, audit_queue_depth=lambda: 5))
    with Gateway(observers=[metrics]) as gateway:
        gateway.add(add, leak)
        for _ in range(4):
            gateway.call_sync("t:add", {"a": 1, "b": 2})
        gateway.call_sync("t:leak", {"token": SECRET})
        gateway.call_sync("t:no-such-tool", {})
        gateway.call_sync("t:another-unknown", {})
    text = PrometheusExposition(metrics).render().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert set(families) >= {
        "toolgate_calls",
        "toolgate_call_errors",
        "toolgate_call_duration_seconds",
        "toolgate_approvals_pending",
        "toolgate_audit_queue_depth",
    }
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families.values()
        for s in family.samples
    }
    assert samples[("toolgate_calls_total", (("outcome", "ok"), ("tool", "t:add")))] == 4
    assert (
        samples[("toolgate_call_errors_total", (("code", "tool_error"), ("tool", "t:leak")))] == 1
    )
    # Unknown tools share one label: callers cannot grow the label set.
    unknown = (("code", "tool_not_found"), ("tool", "(unknown)"))
    assert samples[("toolgate_call_errors_total", unknown)] == 2
    buckets = [
        s.value
        for s in families["toolgate_call_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["tool"] == "t:add"
    ]
    assert buckets == sorted(buckets) and buckets[-1] == 4
    assert samples[("toolgate_approvals_pending", ())] == 3
    assert samples[("toolgate_audit_queue_depth", ())] == 5
    assert SECRET not in text


def test_a_failing_gauge_source_leaves_only_its_gauge_out() -> None:
    def broken() -> int:
        raise OSError("database is locked")

    metrics = CallMetrics(Gauges(approvals_pending=broken))
    text = PrometheusExposition(metrics).render().decode()
    names = {family.name for family in text_string_to_metric_families(text)}
    assert "toolgate_approvals_pending" not in names
    assert {"toolgate_calls", "toolgate_audit_queue_depth"} <= names


# -- the JSON call log ----------------------------------------------------------------------------


def test_the_call_log_writes_one_redacted_json_line_per_call() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(CALL_LOGGER + ".test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        with Gateway(observers=[CallLog(logger)]) as gateway:
            gateway.add(add, leak)
            ok = gateway.call_sync("t:add", {"a": 1, "b": 2}, agent="bot", session_id="s1")
            failed = gateway.call_sync("t:leak", {"token": SECRET}, agent="bot")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["call_id"] for line in lines] == [ok.call_id, failed.call_id]
    assert lines[0]["tool"] == "t:add" and lines[0]["outcome"] == "ok"
    assert lines[0]["session"] == "s1" and lines[0]["agent"] == "bot"
    assert lines[1]["code"] == "tool_error" and "[REDACTED]" in lines[1]["error"]
    assert SECRET not in stream.getvalue()


def test_the_call_log_costs_nothing_when_its_logger_is_off() -> None:
    logger = logging.getLogger(CALL_LOGGER + ".off")
    logger.setLevel(logging.WARNING)
    seen: list[logging.LogRecord] = []
    logger.addHandler(logging.Handler())
    logger.handlers[-1].emit = seen.append  # type: ignore[method-assign]
    with Gateway(observers=[CallLog(logger)]) as gateway:
        gateway.add(add)
        assert gateway.call_sync("t:add", {"a": 1, "b": 2}).status is CallStatus.OK
    assert seen == []


# -- an upstream MCP server -----------------------------------------------------------------------


@pytest.mark.slow
async def test_a_remote_mcp_tool_receives_the_client_spans_trace_context(
    exporter: InMemorySpanExporter,
) -> None:
    from test_mcp_tools import available, close, open_gateway, spec, until

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = Path(__file__).parent / "fixtures" / "mcp" / "trace_server.py"
    gateway, source = open_gateway(
        [spec("traced", command=sys.executable, args=(str(server),), level=SideEffect.READ_ONLY)],
        telemetry=OtelTelemetry(tracer_provider=provider),
    )
    try:
        await gateway.start()
        await until(lambda: available(gateway, "traced:trace_context"), "the server's tool")
        outcome = await gateway.call("traced:trace_context")
    finally:
        await gateway.aclose()
        close(gateway, source)
    assert outcome.ok, outcome.message
    spans = _by_name(exporter)
    call, backend = spans["execute_tool traced:trace_context"], spans["toolgate.backend"]
    request = spans["tools/call trace_context"]
    assert request.kind is SpanKind.CLIENT
    assert _parent(backend) == call.context.span_id
    assert _parent(request) == backend.context.span_id
    # The server saw the client span's context in the request's _meta (SEP-414).
    version, trace_id, parent_id, flags = outcome.to_dict()["content"]["result"].split("-")
    assert (version, int(trace_id, 16), int(parent_id, 16)) == (
        "00",
        request.context.trace_id,
        request.context.span_id,
    )
    assert int(flags, 16) & 1


def test_closing_with_a_collector_that_never_answers_gives_up(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        telemetry = from_environment()
        assert isinstance(telemetry, OtelTelemetry)
        with Gateway(telemetry=telemetry) as gateway:
            gateway.add(add)
            assert gateway.call_sync("t:add", {"a": 1, "b": 2}).ok
            with caplog.at_level(logging.WARNING, logger="toolgate.telemetry"):
                telemetry.close(timeout=0.2)  # the gateway's close then finds it closed
    assert "did not take the last spans and metrics within 0.2 s" in caplog.text
