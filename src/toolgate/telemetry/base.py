"""What the gateway expects of a telemetry implementation (OpenTelemetry, when it is on)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from ..model import ApprovalRequest
from ..pipeline.observers import CallObserver
from ..pipeline.tracing import CallTracer
from .metrics import Gauges

__all__ = ["Telemetry"]


class Telemetry(Protocol):
    """Traces and metrics for one gateway: given to :class:`~toolgate.Gateway` as
    ``telemetry=``, which compiles its plans with :attr:`tracer`, tells :attr:`observers` about
    every call, :meth:`bind` s the gauges to its queues and :meth:`close` s it last."""

    @property
    def tracer(self) -> CallTracer | None:
        """Wraps the compiled plans in spans (``None``: no traces)."""
        ...

    @property
    def observers(self) -> tuple[CallObserver, ...]:
        """Told about every finished call (they end the call's span and record the metrics)."""
        ...

    def bind(self, gauges: Gauges) -> None:
        """Start reporting the gauges (approvals pending, audit queue depth) from ``gauges``."""
        ...

    def approval_wait(self, request: ApprovalRequest) -> AbstractContextManager[None]:
        """A span around a caller's wait for a person's decision on ``request``."""
        ...

    def close(self) -> None:
        """Export what is buffered (bounded by the exporters' timeouts) and stop."""
        ...
