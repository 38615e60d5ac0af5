"""Building gateways in tests: one settable clock, and one builder that takes the settings by
their flat names.

Tests name one or two settings each (``environ=``, ``audit_path=``...); :func:`gateway_with`
spells them as the grouped :class:`~toolgate.GatewaySettings` the Gateway takes, so a test reads
as short as the setting it is about. The runtime collaborators (``approver``, ``sandbox``,
``clock``, ``stages``...) pass through unchanged.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from toolgate import Gateway, GatewaySettings
from toolgate.pipeline.concurrency import ConcurrencySettings

__all__ = ["Clock", "gateway_settings", "gateway_with"]


class Clock:
    """A settable Unix clock: tests move ``now`` instead of waiting."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


#: A flat setting name → (the group of GatewaySettings, the field in that group).
FIELDS: dict[str, tuple[str, str]] = {
    "overflow_limit": ("results", "overflow_limit"),
    "preview_chars": ("results", "preview_chars"),
    "spill_dir": ("results", "spill_dir"),
    "rescan_interval": ("sources", "rescan_interval"),
    "home": ("sources", "home"),
    "semantic_search": ("sources", "semantic_search"),
    "mcp_max_message_bytes": ("sources", "mcp_max_message_bytes"),
    "environ": ("environment", "environ"),
    "env_file": ("environment", "env_file"),
    "env_from_process": ("environment", "env_from_process"),
    "secrets": ("environment", "secrets"),
    "config": ("environment", "config"),
    "cwd": ("environment", "cwd"),
    "script_max_output": ("scripts", "max_output"),
    "prestart": ("scripts", "prestart"),
    "workers": ("scripts", "workers"),
    "approval_ttl": ("approvals", "ttl"),
    "approval_rules": ("approvals", "rules"),
    "approval_max_pending_per_tool": ("approvals", "max_pending_per_tool"),
    "approval_max_pending_per_agent": ("approvals", "max_pending_per_agent"),
    "policies": ("access", "policies"),
    "agent_labels": ("access", "agent_labels"),
    "rate_limit_per_agent": ("access", "rate_limit_per_agent"),
    "audit_path": ("audit", "path"),
    "audit_jsonl": ("audit", "jsonl"),
    "audit_retention_days": ("audit", "retention_days"),
    "audit_max_payload_bytes": ("audit", "max_payload_bytes"),
    "audit_keep_full_payloads": ("audit", "keep_full_payloads"),
    "state_path": ("state", "path"),
    "pin_path": ("state", "pin_path"),
    "redis_url": ("state", "redis_url"),
    "idempotency_lease_grace": ("state", "idempotency_lease_grace"),
}


def gateway_settings(
    *,
    concurrency: ConcurrencySettings | None = None,
    script_concurrency: int | None = None,
    **flat: Any,
) -> GatewaySettings:
    """:class:`GatewaySettings` from flat names (``audit_path=`` is ``audit.path``...).
    ``script_concurrency``: the running limit of script tools (``concurrency.scripts_running``)
    unless ``concurrency`` sets one."""
    groups: dict[str, dict[str, Any]] = defaultdict(dict)
    for name, value in flat.items():
        if name not in FIELDS:
            raise TypeError(f"gateway_settings: no setting {name!r}")
        group, field = FIELDS[name]
        groups[group][field] = value
    settings = GatewaySettings()
    changed = {
        group: dataclasses.replace(getattr(settings, group), **fields)
        for group, fields in groups.items()
    }
    concurrency = concurrency or settings.concurrency
    if script_concurrency is not None and concurrency.scripts_running is None:
        concurrency = dataclasses.replace(concurrency, scripts_running=script_concurrency)
    return dataclasses.replace(settings, concurrency=concurrency, **changed)


#: The Gateway's own keywords: runtime collaborators and the ``tool_folders`` shortcut.
COLLABORATORS = frozenset(
    {
        "tool_folders",
        "approver",
        "secret_store",
        "sandbox",
        "telemetry",
        "observers",
        "state_database",
        "clock",
        "stages",
    }
)


def gateway_with(**options: Any) -> Gateway:
    """A Gateway from flat setting names (see :func:`gateway_settings`) and its collaborators."""
    own = {name: value for name, value in options.items() if name in COLLABORATORS}
    flat = {name: value for name, value in options.items() if name not in COLLABORATORS}
    return Gateway(gateway_settings(**flat), **own)
