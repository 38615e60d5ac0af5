"""Import a Python file named by a declaration as a module of its own."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["NotAModuleError", "file_digest_name", "import_file"]


class NotAModuleError(ImportError):
    """The file cannot be loaded as a Python module at all (no loader for it)."""


def file_digest_name(prefix: str, path: Path, separator: str = ".") -> str:
    """A module name unique to ``path``: ``<prefix>_<digest><separator><stem>``.

    The digest keeps two ``tools.py`` of different folders apart; the stem stays the last part,
    so ``@tool`` functions default to the namespace of their file's name."""
    digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:12]
    return f"{prefix}_{digest}{separator}{path.stem}"


def import_file(
    path: Path,
    name: str,
    *,
    reuse: bool = False,
    search_locations: list[str] | None = None,
) -> ModuleType:
    """Run the Python file ``path`` as the module ``name`` and return it.

    The module is in ``sys.modules`` while its code runs (type hints are resolved through it) and
    is removed again if that code raises; the exception (any, ``SystemExit`` too) reaches the
    caller, who words the diagnostic. ``reuse`` returns a module already imported under ``name``
    instead of running the file again. Raises :class:`NotAModuleError` for a file Python has no
    loader for."""
    if reuse:
        existing = sys.modules.get(name)
        if existing is not None:
            return existing
    spec = importlib.util.spec_from_file_location(
        name, path, submodule_search_locations=search_locations
    )
    if spec is None or spec.loader is None:
        raise NotAModuleError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
