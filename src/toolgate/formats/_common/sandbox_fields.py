"""``sandbox`` and ``permissions`` in tool folders and ``os`` tools: toolgate's extension of those
formats, in the plugin format's vocabulary (see :mod:`toolgate.formats._common.permissions`).

The two formats differ only in the default: a tool folder without ``sandbox`` runs on the host,
as tool folders always ran; an ``os`` tool runs in a ``compartment`` (the resource specification
calls it "a sandboxed command"). Relative ``fs`` prefixes are taken against the declaring folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...model import SandboxMode, SandboxSpec
from .diagnostics import Report, Severity
from .document_fields import Checker
from .messages import got
from .permissions import parse_permissions

__all__ = ["folder_sandbox", "os_sandbox"]


def _spec(
    mode_value: Any,
    permissions_value: Any,
    *,
    default: SandboxMode,
    pointers: tuple[str, str],
    folder: Path,
    report: Report,
) -> SandboxSpec | None:
    """The checked :class:`SandboxSpec`; ``None`` after an error (recorded on ``report``)."""
    mode: SandboxMode | None = default
    if isinstance(mode_value, str) and mode_value in {m.value for m in SandboxMode}:
        mode = SandboxMode(mode_value)
    elif mode_value is not None:
        report.error(
            pointers[0],
            f"'sandbox' must be 'compartment' or 'host' (default '{default}'), {got(mode_value)}",
        )
        mode = None
    permissions = parse_permissions(permissions_value, pointers[1], folder, report)
    if mode is None or permissions is None:
        return None
    return SandboxSpec(mode, permissions)


def folder_sandbox(data: Mapping[Any, Any], folder: Path, report: Report) -> SandboxSpec | None:
    """``sandbox`` (default ``host``) and ``permissions`` of a ``tool.md`` / ``tool.json``."""
    return _spec(
        data.get("sandbox"),
        data.get("permissions"),
        default=SandboxMode.HOST,
        pointers=("sandbox", "permissions"),
        folder=folder,
        report=report,
    )


def os_sandbox(spec: Mapping[str, Any], folder: Path, check: Checker) -> SandboxSpec | None:
    """``spec.sandbox`` (default ``compartment``) and ``spec.permissions`` of an ``os`` tool."""
    report = Report(check.where.path)
    found = _spec(
        spec.get("sandbox"),
        spec.get("permissions"),
        default=SandboxMode.COMPARTMENT,
        pointers=("/spec/sandbox", "/spec/permissions"),
        folder=folder,
        report=report,
    )
    for item in report.items:  # the resource checker names documents and pointers its way
        if item.severity is Severity.ERROR:
            check.error(item.field or "/spec/permissions", item.message)
        else:
            check.warning(item.field or "/spec/permissions", item.message)
    return found
