"""Small helpers of the plugin loader: reading plugin values and describing plugin errors."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["NOT_A_RESULT", "describe_error", "field_of", "reference_of", "resolver_of"]

NOT_A_RESULT: Any = object()


def field_of(value: Any, key: str) -> Any:
    """``value[key]`` of a mapping, ``value.key`` of an object; ``NOT_A_RESULT`` for values
    that are neither (``None``, lists, strings…)."""
    if isinstance(value, Mapping):
        return value.get(key)
    if value is None or isinstance(value, (str, bytes, int, float, list, tuple)):
        return NOT_A_RESULT
    return getattr(value, key, None)


def reference_of(func: Callable[..., Any], package: str) -> str:
    """``module:qualname`` of ``execute`` with the module relative to the plugin folder
    (``src.backends:execute``), so moving the plugin does not change the definition hash."""
    module = getattr(func, "__module__", None) or "?"
    if module == package or module.startswith(package + "."):
        module = module[len(package) + 1 :] or "?"
    return f"{module}:{getattr(func, '__qualname__', type(func).__name__)}"


def resolver_of(module: ModuleType) -> Callable[..., Any] | None:
    """``resolve_tools``, or the JavaScript spelling ``resolveTools``."""
    found: Callable[..., Any] | None = getattr(module, "resolve_tools", None)
    if found is None:
        found = getattr(module, "resolveTools", None)
    return found


def describe_error(exc: BaseException, folder: Path | None = None) -> str:
    """``Type: message (file, line N)``: the exception and where in the plugin it was raised
    (the innermost frame in the plugin folder; the file of a ``SyntaxError``)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    where = ""
    if isinstance(exc, SyntaxError) and exc.filename:
        where = f" ({exc.filename}, line {exc.lineno})"
    elif folder is not None:
        frames = [
            frame
            for frame in traceback.extract_tb(exc.__traceback__)
            if Path(frame.filename).is_relative_to(folder)
        ]
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return f"{type(exc).__name__}: {text[:300]}{where}"
