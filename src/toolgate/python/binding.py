"""The code behind a Python tool, bound to its :class:`~toolgate.Tool` at registration."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter

__all__ = ["PythonBinding"]


@dataclass(frozen=True, slots=True)
class PythonBinding:
    """A Python callable plus what the backend needs to call it."""

    func: Callable[..., Any]
    is_async: bool
    context_param: str | None = None
    arguments_model: type[BaseModel] | None = None
    """Converts JSON arguments into the annotated types; ``None`` when they are JSON already."""
    field_names: Mapping[str, str] | None = None
    result_adapter: TypeAdapter[Any] | None = None
    build_confirmation: Callable[[Mapping[str, Any]], Any] | None = None
    """Jingle ``buildConfirmation``: arguments → title, risk label, facts (approvals issue)."""
    security_check: Callable[..., Any] | None = None
    """Same contract as a Jean2 security script (approvals issue)."""
