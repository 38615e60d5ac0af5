"""Whether OpenTelemetry is on, and with which exporters: read from the standard ``OTEL_*``
environment variables, without importing OpenTelemetry.

It is **on** when ``OTEL_SDK_DISABLED`` is not ``true`` and any of ``OTEL_TRACES_EXPORTER``,
``OTEL_METRICS_EXPORTER``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` is set. Then a
signal whose exporter variable is unset uses ``otlp`` (the specification's default); ``none``
turns it off. Exporters: ``otlp`` (OTLP over HTTP with protobuf, the only OTLP protocol
supported) and ``console`` (standard error). Everything else — endpoints, headers, timeouts,
the sampler, batching, the service name and resource attributes — is read by the OpenTelemetry
SDK itself from its own variables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["EXPORTERS", "OtelSettings"]

#: The exporters toolgate can build, per signal.
EXPORTERS: Final = frozenset({"otlp", "console"})
#: The OTLP protocol the bundled exporter speaks.
HTTP_PROTOBUF: Final = "http/protobuf"

_TRIGGERS: Final = (
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)


def _names(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ("otlp",)
    return tuple(name.strip().lower() for name in value.split(",") if name.strip())


@dataclass(frozen=True)
class OtelSettings:
    """The exporters per signal (empty: that signal is off) and the problems found."""

    traces: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()
    """Values that were ignored, each with why (logged as warnings at start)."""

    @property
    def enabled(self) -> bool:
        """Whether any signal is exported."""
        return bool(self.traces or self.metrics)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> OtelSettings:
        """The settings the ``OTEL_*`` variables in ``environ`` ask for."""
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return cls()
        if not any(environ.get(name, "").strip() for name in _TRIGGERS):
            return cls()
        problems: list[str] = []
        chosen: dict[str, tuple[str, ...]] = {}
        for signal in ("traces", "metrics"):
            variable = f"OTEL_{signal.upper()}_EXPORTER"
            names: list[str] = []
            for name in _names(environ.get(variable)):
                if name == "none":
                    names = []
                    break
                if name not in EXPORTERS:
                    problems.append(f"{variable}={name!r} is not supported (otlp, console, none)")
                    continue
                if name == "otlp":
                    protocol = environ.get(
                        f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL",
                        environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", HTTP_PROTOBUF),
                    ).strip()
                    if protocol != HTTP_PROTOBUF:
                        problems.append(
                            f"the OTLP protocol {protocol!r} is not supported for {signal}; "
                            f"set OTEL_EXPORTER_OTLP_PROTOCOL={HTTP_PROTOBUF} (port 4318)"
                        )
                        continue
                names.append(name)
            chosen[signal] = tuple(dict.fromkeys(names))
        return cls(traces=chosen["traces"], metrics=chosen["metrics"], problems=tuple(problems))
