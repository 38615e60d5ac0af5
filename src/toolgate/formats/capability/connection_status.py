"""What the CLI (``toolgate connections``) and the HTTP API (``/v1/connections``) show of one
capability's connection: the same fields from the same lookups."""

from __future__ import annotations

from typing import Any

from ...secrets import SecretStore
from .source import CapabilitySource, LoadedCapability

__all__ = ["connection_status"]


def connection_status(
    source: CapabilitySource, capability: LoadedCapability, store: SecretStore
) -> dict[str, Any]:
    """The capability's id and title, whether it is connected, the secrets it misses (names,
    never values) or why it cannot be checked, its public settings and its tools."""
    manifest = capability.manifest
    connection = source.connection(manifest.id) or capability.connection
    return {
        "id": manifest.id,
        "title": manifest.title,
        "connected": connection.connected,
        "missing": list(connection.missing),
        "problem": connection.problem,
        "settings": {name: store.get(manifest.id, name) for name in manifest.public_preferences},
        "tools": list(capability.tool_ids),
    }
