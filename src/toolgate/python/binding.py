"""The code behind a Python tool, bound to its :class:`~toolgate.Tool` at registration."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter

from .schema import FunctionSignature

__all__ = ["PythonBinding"]


@dataclass(frozen=True, slots=True)
class PythonBinding:
    """A Python callable plus what the backend needs to call it."""

    func: Callable[..., Any]
    is_async: bool
    context_param: str | None = None
    """The keyword the backend passes the call's :class:`~toolgate.ToolContext` under."""
    arguments_model: type[BaseModel] | None = None
    """Converts JSON arguments into the annotated types; ``None`` when they are JSON already."""
    field_names: Mapping[str, str] | None = None
    result_adapter: TypeAdapter[Any] | None = None
    build_confirmation: Callable[[Mapping[str, Any]], Any] | None = None
    """``buildConfirmation``: arguments → title, risk label, facts."""
    security_check: Callable[..., Any] | None = None
    """Same contract as a tool folder's security script."""
    metadata_param: str | None = None
    """Internal: the keyword the backend passes the call's outcome metadata under (the mutable
    ``dict`` the outcome and its audit record carry). Only bindings toolgate builds itself set
    it (the sandboxed plugin worker records ``metadata["sandbox"]`` through it); ``@tool`` and
    :meth:`for_function` never do, so a user's function cannot see or alter the metadata."""

    @classmethod
    def for_function(
        cls,
        func: Callable[..., Any],
        signature: FunctionSignature,
        *,
        build_confirmation: Callable[[Mapping[str, Any]], Any] | None = None,
        security_check: Callable[..., Any] | None = None,
    ) -> PythonBinding:
        """Bind ``func`` as inspected by :func:`~toolgate.python.schema.inspect_function`."""
        return cls(
            func=func,
            is_async=inspect.iscoroutinefunction(func),
            context_param=signature.context_param,
            arguments_model=signature.arguments_model,
            field_names=signature.field_names,
            result_adapter=signature.result_adapter,
            build_confirmation=build_confirmation,
            security_check=security_check,
        )
