"""Secrets of a capability masked in what its handler returns or raises (the model and the
audit log never see them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ToolError

__all__ = ["mask", "masked_error"]

_MASK = "[REDACTED]"
#: Shorter values are not masked: "ok" or "1" would mangle every result (as in the audit log).
_MIN_MASKED = 4


def _secret_values(secrets: Mapping[str, str]) -> list[str]:
    # Longest first, so a secret containing another is masked whole.
    return sorted((v for v in secrets.values() if len(v) >= _MIN_MASKED), key=len, reverse=True)


def _mask_text(text: str, values: list[str]) -> str:
    for value in values:
        text = text.replace(value, _MASK)
    return text


def mask(result: Any, secrets: Mapping[str, str]) -> Any:
    """``result`` with every secret value masked in its strings (object keys included)."""
    values = _secret_values(secrets)
    if not values:
        return result

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return _mask_text(item, values)
        if isinstance(item, Mapping):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple)):
            return [walk(v) for v in item]
        return item

    return walk(result)


def masked_error(exc: Exception, secrets: Mapping[str, str]) -> Exception:
    """``exc`` itself, or a :class:`ToolError` with the secrets masked when its message holds
    one (the traceback would carry it into the logs and the audit record)."""
    values = _secret_values(secrets)
    text = exc.message if isinstance(exc, ToolError) else str(exc)
    if not any(value in text for value in values):
        return exc
    masked = _mask_text(text, values)
    return ToolError(masked if isinstance(exc, ToolError) else f"{type(exc).__name__}: {masked}")
