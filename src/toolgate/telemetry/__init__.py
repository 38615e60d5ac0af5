"""Telemetry: OpenTelemetry traces and metrics, Prometheus metrics, and JSON call logs.

Importing this package imports no telemetry library. OpenTelemetry (the ``toolgate[otel]``
extra) is imported by :func:`from_environment` only when the ``OTEL_*`` variables turn it on
(:class:`~toolgate.telemetry.settings.OtelSettings`); ``prometheus_client`` only by the
``/metrics`` route of ``toolgate serve``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from .base import Telemetry
from .metrics import CallMetrics, Gauges
from .settings import OtelSettings

__all__ = ["CallMetrics", "Gauges", "OtelSettings", "Telemetry", "from_environment"]

log = logging.getLogger("toolgate.telemetry")


def from_environment(environ: Mapping[str, str] | None = None) -> Telemetry | None:
    """OpenTelemetry as the ``OTEL_*`` variables configure it, or ``None`` when they leave it
    off (the default), when ``OTEL_SDK_DISABLED=true``, or when the ``otel`` extra is not
    installed (logged as a warning: calls go on untraced).

    ``environ`` decides whether it is on (default ``os.environ``); the SDK reads its own
    settings (endpoint, headers, sampler…) from the process environment.
    """
    settings = OtelSettings.from_environ(os.environ if environ is None else environ)
    for problem in settings.problems:
        log.warning("OpenTelemetry: %s", problem)
    if not settings.enabled:
        return None
    try:
        from .otel import OtelTelemetry
    except ImportError as exc:
        log.warning(
            "OpenTelemetry is configured (OTEL_* variables) but not installed (%s): "
            "pip install 'toolgate[otel]'; tool calls are not traced",
            exc,
        )
        return None
    found: Telemetry = OtelTelemetry.from_settings(settings)
    return found
