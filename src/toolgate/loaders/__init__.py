"""Loaders turn declarations into Tool values plus diagnostics; they never run tools and never
touch the registry."""

from .diagnostics import Diagnostic, Severity
from .safe_yaml import YamlError, load_yaml
from .tool_folder import TOOL_FOLDER_FIELDS, FolderLoad, load_tool_folder

__all__ = [
    "TOOL_FOLDER_FIELDS",
    "Diagnostic",
    "FolderLoad",
    "Severity",
    "YamlError",
    "load_tool_folder",
    "load_yaml",
]
