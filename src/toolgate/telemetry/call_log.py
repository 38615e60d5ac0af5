"""Structured logs: every log record as one JSON object per line, and one line per call.

:func:`use_json_logs` (``--log-format json`` of ``toolgate serve`` and ``toolgate mcp``) sends
every record to standard error as JSON (``time``, ``level``, ``logger``, ``message``, plus the
fields a record carries). :class:`CallLog` is a call observer that logs each finished call on the
``toolgate.calls`` logger (``INFO``) with its call id, agent, tool, outcome, error code and
duration — redacted exactly as the audit log redacts (:func:`~toolgate.audit.record_from`): the
secrets the tool received and the values at its redacted paths never reach the log.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import IO, Any, Final

from ..audit.record import record_from
from ..pipeline.observers import FinishedCall

__all__ = ["CALL_LOGGER", "FIELDS", "CallLog", "JsonFormatter", "use_json_logs"]

#: The logger of the per-call lines.
CALL_LOGGER: Final = "toolgate.calls"
#: The attribute of a log record holding its structured fields.
FIELDS: Final = "toolgate_fields"


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def use_json_logs(level: int | str = logging.WARNING, stream: IO[str] | None = None) -> None:
    """Send every log record to ``stream`` (standard error) as JSON lines, from ``level`` on;
    the per-call lines of :class:`CallLog` always (they are what was asked for)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger(CALL_LOGGER).setLevel(logging.INFO)


class CallLog:
    """Logs one line per finished call (a call observer; see the module documentation)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger(CALL_LOGGER)

    def observe(self, call: FinishedCall) -> None:
        """Log ``call`` (nothing when the logger is off for ``INFO``)."""
        if not self.logger.isEnabledFor(logging.INFO):
            return
        duration = max(0.0, time.time() - call.started_at)
        record = record_from(call)  # redacted as the audit log redacts
        fields: dict[str, Any] = {
            "call_id": record.call_id,
            "agent": record.agent,
            "tool": record.tool_id,
            "outcome": record.status,
            "code": record.code,
            "duration_ms": round(duration * 1000, 3),
        }
        if record.session is not None:
            fields["session"] = record.session
        if record.approval_id is not None:
            fields["approval_id"] = record.approval_id
        if record.message is not None and not record.ok:
            fields["error"] = record.message
        self.logger.info(
            "call %s %s: %s", record.call_id, record.tool_id, record.status, extra={FIELDS: fields}
        )
