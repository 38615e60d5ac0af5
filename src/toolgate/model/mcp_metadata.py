"""What an upstream MCP server declared for a tool beyond its name, description and schemas.

Kept only to be passed on: the MCP export (:func:`toolgate.exporters.mcp.mcp_tool`) shows a
client what the upstream showed — ``title``, ``annotations``, ``execution`` (e.g.
``taskSupport``), ``icons`` and ``_meta`` — exactly as given and only when given. None of it
decides anything in the gateway: the level, approvals and every other rule come from toolgate's
own reading of the server (see :mod:`toolgate.formats.mcp_server.tools`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._json import freeze
from .effects import ToolHints

__all__ = ["MAX_METADATA_CHARS", "McpToolMetadata", "bounded_json"]

#: Characters of JSON one field may take (an icon given as a ``data:`` URI is the large case);
#: a field over it is left out rather than cut, since cut JSON is not the server's value.
MAX_METADATA_CHARS = 20_000


def bounded_json(value: Any, kind: type) -> Any:
    """``value`` frozen when it is a ``kind`` (``dict`` or ``list``) of at most
    :data:`MAX_METADATA_CHARS` characters of JSON, else ``None``."""
    expected = Mapping if kind is dict else (list, tuple)
    if not isinstance(value, expected):
        return None
    try:
        size = len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return None
    return freeze(value) if size <= MAX_METADATA_CHARS else None


@dataclass(frozen=True, slots=True)
class McpToolMetadata:
    """The fields of an MCP ``tools/list`` entry passed on as the upstream (or, where noted, the
    operator) declared them. ``None`` means "not declared": nothing is emitted for it."""

    title: str | None = None
    """The top-level ``title``: the upstream's, or a ``Tool`` resource's, which wins."""
    annotations: Mapping[str, Any] | None = None
    """``annotations`` exactly as the upstream gave them (``title`` inside included)."""
    execution: Mapping[str, Any] | None = None
    """``execution`` (``taskSupport``: ``forbidden``, ``optional`` or ``required``)."""
    icons: tuple[Any, ...] | None = None
    meta: Mapping[str, Any] | None = None
    """The upstream's ``_meta``."""
    hints: ToolHints | None = None
    """Set when the operator declared the level (``MCPServer`` ``spec.sideEffects.level``, a
    ``Tool`` resource): the four behaviour hints toolgate shows instead of the upstream's,
    resolved from that declaration."""
