"""What an upstream MCP server declared for a tool beyond its name, description and schemas.

Kept only to be passed on: the MCP export (:func:`toolgate.exporters.mcp.mcp_tool`) shows a
client what the upstream showed — ``title``, ``annotations``, ``execution`` (e.g.
``taskSupport``), ``icons`` and ``_meta`` — as given and only when given, less what an
upstream must not say (:func:`upstream_meta`, :func:`safe_icons`). None of it
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

__all__ = [
    "MAX_ICON_DATA_URI",
    "MAX_METADATA_CHARS",
    "OWN_META_PREFIX",
    "McpToolMetadata",
    "bounded_json",
    "safe_icons",
    "upstream_meta",
]

#: Characters of JSON one field may take (an icon given as a ``data:`` URI is the large case);
#: a field over it is left out rather than cut, since cut JSON is not the server's value.
MAX_METADATA_CHARS = 20_000
#: Characters an icon's ``data:image/…`` URI may take; a larger one is dropped.
MAX_ICON_DATA_URI = 16_384
#: The ``_meta`` key prefix of toolgate's own keys (``toolgate/examples``, ``toolgate/ui``):
#: only toolgate's declarations set them, never an upstream.
OWN_META_PREFIX = "toolgate/"


def upstream_meta(value: Any) -> Any:
    """An upstream's ``_meta`` without toolgate's own keys (:data:`OWN_META_PREFIX`): a client
    reads those as toolgate's word (a tool's examples and tile), which an upstream must not be
    able to speak. Anything but a JSON object is returned as it is (the caller refuses it)."""
    if not isinstance(value, Mapping):
        return value
    return {
        key: item
        for key, item in value.items()
        if not (isinstance(key, str) and key.startswith(OWN_META_PREFIX))
    }


def _safe_icon_src(src: Any) -> bool:
    if not isinstance(src, str):
        return False
    lowered = src[:11].lower()
    if lowered.startswith("https://"):
        return True
    # A client shows an icon as an image; any other scheme (javascript:, file:, http:, a data:
    # URI of another type) is either script, a local file or a fetch in the clear.
    return lowered.startswith("data:image/") and len(src) <= MAX_ICON_DATA_URI


def safe_icons(value: Any) -> Any:
    """An upstream's ``icons`` keeping only those whose ``src`` is an ``https:`` URL or a
    ``data:image/…`` URI of at most :data:`MAX_ICON_DATA_URI` characters; ``None`` when none is
    left. Anything but a JSON array is returned as it is (the caller refuses it)."""
    if not isinstance(value, (list, tuple)):
        return value
    kept = [icon for icon in value if isinstance(icon, Mapping) and _safe_icon_src(icon.get("src"))]
    return kept or None


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
    """The upstream's ``icons`` with a safe ``src`` (:func:`safe_icons`)."""
    meta: Mapping[str, Any] | None = None
    """The upstream's ``_meta`` without toolgate's own keys (:func:`upstream_meta`)."""
    hints: ToolHints | None = None
    """Set when the operator declared the level (``MCPServer`` ``spec.sideEffects.level``, a
    ``Tool`` resource): the four behaviour hints toolgate shows instead of the upstream's,
    resolved from that declaration."""
