"""Binding ``type: function`` Tool resources to their Python callables.

``spec.function`` names the callable: ``package.module:attr`` (an importable module) or
``./file.py:attr`` (a file, relative to the resource file). The callable is bound the way
``Gateway.add`` binds a function (:func:`~toolgate.python.schema.inspect_function`,
:class:`~toolgate.python.binding.PythonBinding`), but the resource stays authoritative: its
description, schemas, level and rules are the tool's. The signature is only checked against the
declared ``inputSchema``, and a mismatch is an error diagnostic (the tool is not registered),
because calls would otherwise fail at run time:

* a declared property the function has no parameter for;
* a parameter without a default that ``inputSchema.required`` does not list.

Types are not compared: arguments that pass the declared schema are converted to the annotated
types, and a value that cannot be converted is ``invalid_arguments``. When ``inputSchema`` (or
``outputSchema``) is left out, the one built from the signature is used.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import ToolDefinitionError
from ...model import PythonEntry
from ...python.binding import PythonBinding
from ...python.decorator import FunctionTool, code_digest
from ...python.schema import inspect_function
from ...registry import RegisteredTool
from .._common.diagnostics import Diagnostic
from .._common.messages import pointer
from .._common.python_files import file_digest_name, import_file
from .tool import ToolResource

__all__ = ["bind_function", "function_file", "function_file_problem"]


def function_file(resource: ToolResource) -> Path | None:
    """The ``.py`` file a ``./file.py:attr`` reference names (resolved against the resource
    file's folder), or ``None`` for a module reference."""
    ref = resource.function or ""
    module = ref.rpartition(":")[0]
    if not module.endswith(".py"):
        return None
    path = Path(module).expanduser()
    return path if path.is_absolute() else Path(resource.where.path).parent / path


def function_file_problem(resource: ToolResource) -> Diagnostic | None:
    """An error when a ``./file.py:attr`` reference names no file (checked without importing)."""
    path = function_file(resource)
    if path is None or path.is_file():
        return None
    return resource.where.diagnostic(
        "/spec/function", f"expected a Python file; no such file: {path}"
    )


def _load_file(path: Path) -> ModuleType:
    # A unique parent name per file keeps two handlers.py apart; an already loaded file is
    # reused, so reloading the resources does not run the module's code again.
    name = file_digest_name("_toolgate_resource", path.resolve(), separator="_")
    return import_file(path, name, reuse=True)


def _resolve(resource: ToolResource) -> Any:
    ref = resource.function or ""
    module_name, _, attr = ref.rpartition(":")
    path = function_file(resource)
    module = _load_file(path) if path is not None else importlib.import_module(module_name)
    value: Any = module
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def bind_function(resource: ToolResource) -> tuple[RegisteredTool | None, list[Diagnostic]]:
    """Import the callable of a ``type: function`` resource and bind it (see the module
    documentation); ``None`` and the reasons when it cannot be."""
    where = resource.where
    ref = resource.function or ""
    missing = function_file_problem(resource)
    if missing is not None:
        return None, [missing]
    try:
        value = _resolve(resource)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a module's own code may fail in any way
        detail = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        return None, [where.diagnostic("/spec/function", f"cannot import {ref!r}: {detail}")]
    build_confirmation = None
    if isinstance(value, FunctionTool):
        build_confirmation = value.binding.build_confirmation
        value = value.func
    if not callable(value):
        return None, [
            where.diagnostic(
                "/spec/function", f"{ref!r} is a {type(value).__name__}, not a function"
            )
        ]
    tool = resource.tool
    try:
        signature = inspect_function(value, description=tool.description)
    except ToolDefinitionError as exc:
        return None, [where.diagnostic("/spec/function", exc.message)]
    parameters = set((signature.field_names or {}).values())
    needed = set(signature.input_schema.get("required") or ())
    problems: list[Diagnostic] = []
    if resource.declared_input_schema:
        declared = tool.input_schema.get("properties") or {}
        declared_required = set(tool.input_schema.get("required") or ())
        for name in declared:
            if name not in parameters:
                problems.append(
                    where.diagnostic(
                        pointer("spec", "inputSchema", "properties", name),
                        f"the function {ref} has no parameter {name!r} (its parameters: "
                        f"{', '.join(sorted(parameters)) or 'none'})",
                    )
                )
        for name in sorted(needed - declared_required):
            problems.append(
                where.diagnostic(
                    "/spec/inputSchema/required",
                    f"parameter {name!r} of {ref} has no default, so inputSchema must declare it "
                    "and list it in required",
                )
            )
    if problems:
        return None, problems
    changes: dict[str, Any] = {"entry": PythonEntry(ref, code_digest(value))}
    if not resource.declared_input_schema:
        changes["input_schema"] = signature.input_schema
    if tool.output_schema is None and signature.output_schema is not None:
        changes["output_schema"] = signature.output_schema
    bound = dataclasses.replace(tool, **changes)
    binding = PythonBinding.for_function(value, signature, build_confirmation=build_confirmation)
    return RegisteredTool(bound, binding), []
