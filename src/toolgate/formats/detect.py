"""Which declaration format a path holds, and the source class that loads it.

The format modules are imported only when a path of their format is opened, so a gateway that
uses none of them pays for none of their dependencies (httpx, the MCP SDK…).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._common.diagnostics import Diagnostic
from ._common.safe_yaml import load_yaml_documents
from .declarations import DeclarationSource, SourceContext

__all__ = ["FORMATS", "detect_format", "open_source", "source_class", "validate_path"]

#: Format name → ``module:class`` of its :class:`DeclarationSource`.
FORMATS: Mapping[str, str] = {
    "capability": "toolgate.formats.capability.source:CapabilitySource",
    "plugin": "toolgate.formats.plugin.source:PluginSource",
    "extension-info": "toolgate.formats.extension_info.source:ExtensionInfoSource",
    "resource": "toolgate.formats.resource.source:ResourceSource",
}

_MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")
#: Files larger than this are not parsed while detecting a format (the YAML loader's limit).
_MAX_DETECT_BYTES = 1_048_576


def source_class(format_name: str) -> type[DeclarationSource]:
    """The source class of a format. Raises :class:`ConfigError` for an unknown name."""
    target = FORMATS.get(format_name)
    if target is None:
        raise ConfigError(
            f"unknown declaration format {format_name!r}; expected one of {', '.join(FORMATS)}"
        )
    module_name, _, attribute = target.partition(":")
    cls: type[DeclarationSource] = getattr(importlib.import_module(module_name), attribute)
    return cls


def _candidate_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in _MANIFEST_SUFFIXES and p.is_file())
    return []


def _first_document(path: Path) -> Any:
    if path.stat().st_size > _MAX_DETECT_BYTES:
        raise ValueError("too large to be a declaration")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        # JSON proper: YAML would refuse tab-indented JSON, which is common in manifests.
        return json.loads(text)
    documents = load_yaml_documents(text, source=str(path))
    return documents[0][1] if documents else None


def detect_format(path: Path) -> str | None:
    """The format of a declaration file, or of the first recognised file directly in a folder;
    ``None`` when nothing there is in a known format. Parses, never imports or runs."""
    return _detect(path)[0]


def _detect(path: Path) -> tuple[str | None, str | None]:
    """The format, or ``None`` and why the first file that could not be read was not (for the
    error: a declaration with a syntax error is otherwise "in no known format")."""
    problem: str | None = None
    for candidate in _candidate_files(path):
        try:
            first = _first_document(candidate)
        except RecursionError:  # nesting deeper than the parser's stack
            problem = problem or f"{candidate.name}: nested too deeply to be a declaration"
            continue
        except (OSError, UnicodeDecodeError, ValueError) as exc:  # YAML and JSON errors too
            problem = problem or f"{candidate.name}: {_reason(exc)}"
            continue
        for name in FORMATS:
            if source_class(name).claims(candidate, first):
                return name, None
    return None, problem


def _reason(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def open_source(
    path: Path,
    context: SourceContext,
    *,
    format_name: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> DeclarationSource:
    """A source for ``path`` in ``format_name`` (detected when ``None``).

    Raises :class:`ConfigError` naming the path when it does not exist or no format claims it.
    """
    if not path.exists():
        raise ConfigError(f"{path}: no such file or folder")
    name, problem = (format_name, None) if format_name else _detect(path)
    if name is None:
        raise ConfigError(f"{path}: {_unknown(problem)}; name the format with 'format:'")
    return source_class(name).open(path, context, options or {})


def validate_path(
    path: Path, format_name: str | None = None
) -> tuple[str | None, list[Diagnostic]]:
    """Check a declaration without running anything: its format and its diagnostics."""
    if not path.exists():
        return None, [Diagnostic(str(path), None, "no such file or folder")]
    name, problem = (format_name, None) if format_name else _detect(path)
    if name is None:
        return None, [Diagnostic(str(path), None, _unknown(problem))]
    return name, source_class(name).validate(path)


def _unknown(problem: str | None) -> str:
    unreadable = f" (it could not be read: {problem})" if problem else ""
    return f"not a declaration in a known format ({', '.join(FORMATS)}){unreadable}"
