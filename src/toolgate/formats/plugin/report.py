"""What one load of a plugin found, for ``toolgate plugins`` (and later the web UI).

Plain values: the plugin's id and location, each ``provides.tools`` entry with its declared
sandbox and whether it was imported (and why not), each tool with the mode it runs in, and the
plugin's alerts and diagnostics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...model import SandboxMode
from .._common.diagnostics import Diagnostic
from ..declarations import SourceAlert

__all__ = ["PluginEntryStatus", "PluginReport", "PluginToolStatus"]


@dataclass(frozen=True, slots=True)
class PluginEntryStatus:
    """One ``provides.tools`` entry of the manifest."""

    pointer: str
    """Its JSON pointer in the manifest."""
    entry: str
    """The entry module as written (``index.py``)."""
    sandbox: SandboxMode
    """The mode the manifest declares for it."""
    imported: bool
    """Whether its module was imported (its tools loaded)."""
    reason: str | None = None
    """Why it was not imported (compartment without opt-in, an import error)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "pointer": self.pointer,
            "entry": self.entry,
            "sandbox": str(self.sandbox),
            "imported": self.imported,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class PluginToolStatus:
    """One tool the plugin provided."""

    id: str
    entry: str
    """The entry module it came from."""
    declared_sandbox: SandboxMode
    """The mode it declares (the entry's, or its own override)."""
    host_opt_in: bool
    """True when it declares ``compartment`` and runs on the host by the operator's opt-in."""
    resolved: bool
    """True for tools returned by ``resolve_tools``."""
    unavailable_reason: str | None = None
    """Why it does not run (``compartment`` without opt-in or a working sandbox)."""
    in_worker: bool = False
    """True when it runs in the worker process (its code never runs in the gateway)."""
    worker_unsandboxed: bool = False
    """True when that worker runs on the host: it cannot sandbox here and the operator chose
    ``unsandboxed_host``."""
    javascript: str | None = None
    """For a JavaScript/TypeScript tool, the host that runs it: ``compartment`` (SES) or
    ``host`` (plain Node.js, full access)."""

    @property
    def runs(self) -> str:
        """``host``, ``host (operator opt-in)``, ``sandboxed worker``, ``worker on the host
        (unsandboxed-host)`` or ``not run``."""
        if self.unavailable_reason is not None:
            return "not run"
        if self.javascript == "compartment":
            return "SES compartment (JavaScript host)"
        if self.javascript is not None:
            return "host (Node.js, " + ("operator opt-in)" if self.host_opt_in else "full access)")
        if self.in_worker:
            if self.worker_unsandboxed:
                return "worker on the host (unsandboxed-host)"
            return "sandboxed worker"
        return "host (operator opt-in)" if self.host_opt_in else "host"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "id": self.id,
            "entry": self.entry,
            "sandbox": str(self.declared_sandbox),
            "runs": self.runs,
            "host_opt_in": self.host_opt_in,
            "resolved": self.resolved,
            "unavailable_reason": self.unavailable_reason,
            "in_worker": self.in_worker,
            "worker_unsandboxed": self.worker_unsandboxed,
            "javascript": self.javascript,
        }


@dataclass(frozen=True, slots=True)
class PluginReport:
    """Everything one load of one plugin found."""

    location: str
    """The path the source was opened with (manifest file or plugin folder)."""
    plugin_id: str | None
    """The manifest's ``id`` (``None`` when it could not be read)."""
    manifest: str | None
    """The manifest file, when one was found and is valid."""
    name: str | None
    version: str | None
    description: str | None
    host_mode: bool | tuple[str, ...]
    """The operator's opt-in (``options.host_mode``)."""
    entries: tuple[PluginEntryStatus, ...]
    tools: tuple[PluginToolStatus, ...]
    alerts: tuple[SourceAlert, ...]
    diagnostics: tuple[Diagnostic, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``toolgate plugins --json``)."""
        return {
            "id": self.plugin_id,
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "location": self.location,
            "manifest": self.manifest,
            "host_mode": self.host_mode
            if isinstance(self.host_mode, bool)
            else list(self.host_mode),
            "entries": [entry.to_dict() for entry in self.entries],
            "tools": [tool.to_dict() for tool in self.tools],
            "alerts": [{"level": alert.level, "message": alert.message} for alert in self.alerts],
            "diagnostics": [
                {
                    "severity": str(item.severity),
                    "path": item.path,
                    "field": item.field,
                    "message": item.message,
                }
                for item in self.diagnostics
            ],
        }
