"""The context a host hands to a tool: who is calling, where, and what the tool may use."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = ["ToolContext"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Filled by the gateway for a parameter annotated ``ToolContext``; hidden from the schema.

    It carries exactly what the tool declared and nothing more: ``secrets`` holds only the secrets
    the tool listed, ``env`` only the variables in its ``env`` allowlist.
    """

    tool_id: str
    call_id: str
    agent: str | None = None
    """The calling agent's name, when known."""
    namespaces: frozenset[str] | None = None
    """The tool namespaces the caller's credentials allow (an OAuth token's scopes; ``None``:
    any), for tools that act on other tools, such as ``toolgate:search_tools``."""
    session_id: str | None = None
    workspace: Path | None = None
    """The workspace the call acts on (a script's ``workspacePath``)."""
    config: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Public settings (``publicPreferenceNames`` of capability manifests)."""
    secrets: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """The secrets the tool declared (``requiredPreferenceNames`` of capability manifests)."""
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """The environment variables the tool declared (``env``)."""
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger] = field(
        default_factory=lambda: logging.getLogger("toolgate.tool")
    )
    """A logger named after the tool; records go to the operator, never to the model."""
