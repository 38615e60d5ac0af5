"""The seam through which backends report their outgoing requests to a tracer, if one runs.

When OpenTelemetry is on, the tracer sets :data:`OUTGOING` for the duration of a tool's backend
execution (a context variable: it follows the call's task and nothing else). A backend that sends
a request upstream (a REST endpoint, a remote MCP server) asks it for a client span and copies the
span's W3C trace context (``traceparent``) into what it sends. When tracing is off the variable is
unset and the backends pay one lookup per request, which is nothing beside a network round trip.

This module imports no tracing library: the implementation lives in :mod:`toolgate.telemetry`.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Protocol

__all__ = ["OUTGOING", "ClientSpan", "OutgoingTracer"]


class ClientSpan(Protocol):
    """One outgoing request, as a span of the current call."""

    def inject(self, carrier: MutableMapping[str, str]) -> None:
        """Write the span's trace context (``traceparent``, ``tracestate``) into ``carrier``."""
        ...

    def set_attribute(self, key: str, value: str | int) -> None:
        """Record what became known during the request (e.g. the response status)."""
        ...

    def fail(self, error_type: str) -> None:
        """Mark the request as failed (``error.type``)."""
        ...


class OutgoingTracer(Protocol):
    """Makes client spans for the call whose backend is running."""

    def client_span(
        self, name: str, attributes: Mapping[str, str | int]
    ) -> AbstractContextManager[ClientSpan]:
        """A span for one request upstream, a child of the backend's span; ended on exit (an
        exception leaving the block marks it failed)."""
        ...


#: The tracer of the call running in this context, or ``None`` (tracing off).
OUTGOING: ContextVar[OutgoingTracer | None] = ContextVar("toolgate_outgoing", default=None)
