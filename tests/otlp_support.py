"""Test stand-ins for the observability tests: an OTLP/HTTP receiver and an upstream REST server.

Both are real HTTP servers on loopback, in a thread. The receiver decodes what the OpenTelemetry
exporter sends (``/v1/traces``, ``/v1/metrics``: protobuf bodies) with ``opentelemetry-proto``;
the upstream records the headers of every request it answers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

T = TypeVar("T")


def value_of(value: AnyValue) -> Any:
    """The Python value of an OTLP attribute value."""
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@dataclass
class ReceivedSpan:
    """One exported span, decoded."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


@dataclass
class OtlpReceiver:
    """What the receiver got: raw bodies (to search for secrets), spans and metric names."""

    url: str = ""
    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    metrics: dict[str, list[Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            self.bodies.append(body)
            for resource_spans in request.resource_spans:
                resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(_decoded(span, resource))

    def add_metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest.FromString(body)
        with self.lock:
            self.bodies.append(body)
            for resource_metrics in request.resource_metrics:
                for scope_metrics in resource_metrics.scope_metrics:
                    for metric in scope_metrics.metrics:
                        self.metrics.setdefault(metric.name, []).append(metric)

    def wait_for(self, found: Callable[[OtlpReceiver], T | None], timeout: float = 60) -> T:
        """Poll until ``found`` returns something (a hang guard, not a timing check)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                result = found(self)
            if result is not None:
                return result
            assert time.monotonic() < deadline, f"not received: {self.spans!r}"
            time.sleep(0.05)


def _decoded(span: Span, resource: dict[str, Any]) -> ReceivedSpan:
    return ReceivedSpan(
        name=span.name,
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        kind=span.kind,
        status_code=span.status.code,
        status_message=span.status.message,
        attributes={a.key: value_of(a.value) for a in span.attributes},
        resource=resource,
    )


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """An OTLP/HTTP (protobuf) receiver on loopback."""
    received = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/traces":
                received.add_traces(body)
                answer = ExportTraceServiceResponse().SerializeToString()
            elif self.path == "/v1/metrics":
                received.add_metrics(body)
                answer = ExportMetricsServiceResponse().SerializeToString()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with _serving(Handler) as url:
        received.url = url
        yield received


@dataclass
class Upstream:
    """The upstream REST stand-in: its origin and the headers of each request it answered."""

    origin: str = ""
    headers: list[dict[str, str]] = field(default_factory=list)


@contextmanager
def upstream_rest() -> Iterator[Upstream]:
    """A loopback JSON endpoint (any GET path answers ``{"hello": "upstream"}``)."""
    upstream = Upstream()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            upstream.headers.append({k.lower(): v for k, v in self.headers.items()})
            body = json.dumps({"hello": "upstream"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    with _serving(Handler) as origin:
        upstream.origin = origin
        yield upstream
