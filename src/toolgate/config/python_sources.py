"""The tools of one ``python:`` entry: importing a module or loading a ``.py`` file."""

from __future__ import annotations

import copy
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import ConfigError, ToolgateError
from ..formats._common.python_files import NotAModuleError, file_digest_name, import_file
from ..model import SourceFormat, Tool, ToolSource
from ..python import FunctionTool, tool
from .schema import PythonSource


def _is_file_ref(ref: str) -> bool:
    return ref.endswith(".py") or "/" in ref or "\\" in ref or ref.startswith(("~", "."))


def _split_ref(ref: str) -> tuple[str, str | None]:
    """``target`` and the optional attribute after the last colon (``file.py:attr``)."""
    head, sep, attr = ref.rpartition(":")
    # "C:\tools\x.py" has a colon too: only split when the part after it names an attribute.
    if sep and head and attr and all(part.isidentifier() for part in attr.split(".")):
        return head, attr
    return ref, None


def _load_file(path: Path, where: str) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"{where}: no such file: {path}")
    # A unique parent name per file keeps two ``tools.py`` apart; the last part stays the file's
    # stem, so ``@tool`` functions default to the namespace ``my_tools`` for ``my_tools.py``.
    name = file_digest_name("_toolgate_file", path)
    try:
        return import_file(path, name, reuse=True)
    except NotAModuleError:
        raise ConfigError(f"{where}: cannot load {path} as a Python module") from None
    except Exception as exc:
        raise ConfigError(f"{where}: cannot load {path}: {type(exc).__name__}: {exc}") from exc


def _import(module_name: str, where: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"{where}: cannot import {module_name!r}: {detail}") from exc


def _module_tools(module: ModuleType, where: str) -> list[Any]:
    listed = getattr(module, "tools", None)
    if isinstance(listed, (list, tuple)):
        return list(listed)
    found: list[Any] = []
    seen: set[int] = set()  # by identity: one tool bound to two names is listed once
    for value in vars(module).values():
        if isinstance(value, FunctionTool) and id(value) not in seen:
            seen.add(id(value))
            found.append(value)
    if not found:
        raise ConfigError(
            f"{where}: {module.__name__.rpartition('.')[2]} has no @tool functions and no "
            "'tools' list; name one with 'module:attr'"
        )
    return found


def _attribute(module: ModuleType, attr: str, ref: str, where: str) -> Any:
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigError(f"{where}: {ref!r}: no attribute {part!r}") from None
    if isinstance(value, (list, tuple)) or callable(value):
        return value
    raise ConfigError(
        f"{where}: {ref!r} is not a @tool function, a function, or a list of them "
        f"(it is a {type(value).__name__})"
    )


def _located(item: Any, path: Path, where: str) -> Any:
    """Point the tool's ``source`` at the file (its module name is an internal one)."""
    if isinstance(item, (list, tuple)):
        return [_located(each, path, where) for each in item]
    if not isinstance(item, FunctionTool):
        if not callable(item) or isinstance(item, Tool):
            return item  # Gateway.add reports what it cannot register
        try:
            item = tool(item)
        except ToolgateError as exc:
            raise ConfigError(f"{where}: {exc.message}") from exc
    qualname = getattr(item.func, "__qualname__", item.tool.name)
    located = _with_source(item.tool, ToolSource(SourceFormat.PYTHON, f"{path}:{qualname}"))
    return FunctionTool(item.func, located, item.binding)


def _with_source(definition: Tool, source: ToolSource) -> Tool:
    """``definition`` with another ``source``, without running ``Tool.__post_init__`` again:
    the source is no field it checks or freezes, and freezing the schemas of a 10,000-tool file
    a second time took about half a second."""
    located = copy.copy(definition)
    object.__setattr__(located, "source", source)
    object.__setattr__(located, "_definition_hash", None)  # computed afresh if ever asked
    return located


def _source_tools(source: PythonSource, folder: Path, where: str) -> list[Any]:
    target, attr = _split_ref(source.module)
    path: Path | None = None
    if _is_file_ref(target):
        path = Path(target).expanduser()
        path = (path if path.is_absolute() else folder / path).resolve()
        module = _load_file(path, where)
    else:
        module = _import(target, where)
    if attr is None:
        items = _module_tools(module, where)
    else:
        items = [_attribute(module, attr, source.module, where)]
    return items if path is None else [_located(item, path, where) for item in items]
