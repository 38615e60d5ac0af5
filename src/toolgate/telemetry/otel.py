"""OpenTelemetry for a gateway: providers built from the ``OTEL_*`` variables, the call tracer
and the call metrics (the ``toolgate[otel]`` extra; only imported when it is on)."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Final

from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.metrics import MeterProvider as SdkMeterProvider
from opentelemetry.sdk.metrics.export import (
    ConsoleMetricExporter,
    MetricExporter,
    MetricReader,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import TracerProvider as ApiTracerProvider

from ..model import ApprovalRequest
from ..pipeline.observers import CallObserver
from .metrics import Gauges
from .otel_metrics import OtelCallMetrics
from .otel_traces import OtelCallTracer
from .settings import OtelSettings

__all__ = ["OtelTelemetry"]

log = logging.getLogger("toolgate.telemetry")

#: The instrumentation scope of toolgate's spans and metrics.
SCOPE: Final = "toolgate"
#: Seconds :meth:`OtelTelemetry.close` waits for the last export; a collector that is down
#: would otherwise hold the gateway's shutdown for the exporters' retries (10 s and more).
CLOSE_TIMEOUT: Final = 5.0


def _resource() -> Resource:
    """The SDK's resource from ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``, named
    ``toolgate`` when they name no service."""
    detected = Resource.create()
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        return detected.merge(Resource({SERVICE_NAME: "toolgate"}))
    return detected


def _span_exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter(out=sys.stderr)  # stdout may be a protocol (toolgate mcp)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout… from OTEL_EXPORTER_OTLP_*


def _metric_exporter(name: str) -> MetricExporter:
    if name == "console":
        return ConsoleMetricExporter(out=sys.stderr)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


class OtelTelemetry:
    """A :class:`~toolgate.telemetry.base.Telemetry` with OpenTelemetry providers.

    Give it providers (a host application's, or a test's in-memory exporter), or build them
    from the environment with :meth:`from_settings`. Providers it built itself are shut down by
    :meth:`close`; given ones are only flushed.
    """

    def __init__(
        self,
        *,
        tracer_provider: ApiTracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        owned: bool = False,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._owned = owned
        self._closed = False
        self._tracer = (
            None if tracer_provider is None else OtelCallTracer(tracer_provider.get_tracer(SCOPE))
        )
        self._metrics = (
            None if meter_provider is None else OtelCallMetrics(meter_provider.get_meter(SCOPE))
        )

    @classmethod
    def from_settings(cls, settings: OtelSettings) -> OtelTelemetry:
        """Providers with the exporters ``settings`` name (the SDK reads the rest of the
        ``OTEL_*`` variables: endpoint, headers, timeouts, sampler, batching)."""
        resource = _resource()
        tracer_provider = None
        if settings.traces:
            # shutdown_on_exit=False: close() stops them, within CLOSE_TIMEOUT; an exit handler
            # would wait for a missing collector again.
            tracer_provider = TracerProvider(resource=resource, shutdown_on_exit=False)
            for name in settings.traces:
                tracer_provider.add_span_processor(BatchSpanProcessor(_span_exporter(name)))
        meter_provider = None
        if settings.metrics:
            readers: list[MetricReader] = [
                PeriodicExportingMetricReader(_metric_exporter(name)) for name in settings.metrics
            ]
            meter_provider = SdkMeterProvider(
                resource=resource, metric_readers=readers, shutdown_on_exit=False
            )
        return cls(tracer_provider=tracer_provider, meter_provider=meter_provider, owned=True)

    @property
    def tracer(self) -> OtelCallTracer | None:
        """The call tracer (``None`` when traces are off)."""
        return self._tracer

    @property
    def observers(self) -> tuple[CallObserver, ...]:
        """The tracer (it ends the calls' spans) and the metrics."""
        found: list[CallObserver] = []
        if self._tracer is not None:
            found.append(self._tracer)
        if self._metrics is not None:
            found.append(self._metrics)
        return tuple(found)

    def bind(self, gauges: Gauges) -> None:
        """Report the gauges (when metrics are on)."""
        if self._metrics is not None:
            self._metrics.bind(gauges)

    @contextlib.contextmanager
    def approval_wait(self, request: ApprovalRequest) -> Iterator[None]:
        """A span around waiting for a decision (nothing when traces are off)."""
        if self._tracer is None:
            yield
            return
        with self._tracer.approval_wait(request):
            yield

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Export what is buffered and, for providers built here, shut them down — for at most
        ``timeout`` seconds, after which what is left is dropped (the exporters' threads do not
        keep the process alive). Never raises: a collector that is gone must not make the
        gateway fail to stop, nor stop slowly."""
        if self._closed:
            return
        self._closed = True
        workers = [
            threading.Thread(
                target=self._stop, args=(provider,), name="toolgate-otel-close", daemon=True
            )
            for provider in (self.tracer_provider, self.meter_provider)
            if provider is not None
        ]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        if any(worker.is_alive() for worker in workers):
            log.warning(
                "OpenTelemetry: the collector did not take the last spans and metrics within "
                "%g s; they are dropped",
                timeout,
            )

    def _stop(self, provider: Any) -> None:
        # The SDK's providers have both methods; the API's (no-op) ones neither.
        stop = getattr(provider, "shutdown" if self._owned else "force_flush", None)
        try:
            if callable(stop):
                stop()
        except Exception:  # telemetry never breaks the gateway
            log.warning("OpenTelemetry did not shut down cleanly", exc_info=True)
