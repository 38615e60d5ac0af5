"""Small helpers for JSON-shaped values: deep freezing, thawing and canonical hashing.

Tool declarations carry JSON Schemas. The model is immutable, so schemas are stored deeply frozen
(``MappingProxyType`` for objects, ``tuple`` for arrays) and thawed back into plain ``dict`` /
``list`` values whenever they leave the model (exporters, validators, surfaces).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["canonical_json", "digest", "freeze", "thaw", "to_text"]


def freeze(value: Any) -> Any:
    """Return a deeply immutable copy of a JSON-shaped value."""
    if isinstance(value, Mapping):
        return MappingProxyType({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """Return a plain, mutable ``dict`` / ``list`` copy of a (possibly frozen) JSON value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


# Built once: json.dumps with options makes a new encoder on every call, which costs more than
# encoding a small argument object (this runs on every idempotent call).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_default
)
_TEXT = json.JSONEncoder(ensure_ascii=False, default=_default)


def canonical_json(value: Any) -> str:
    """Serialize a value deterministically: sorted keys, no insignificant white space."""
    return _CANONICAL.encode(value)


def digest(value: Any) -> str:
    """A stable SHA-256 hex digest of the canonical JSON of ``value``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def to_text(value: Any) -> str:
    """The text a model reads for a JSON value: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return _TEXT.encode(value)
