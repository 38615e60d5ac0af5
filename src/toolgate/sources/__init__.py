"""Sources keep the registry in step with declarations on disk (loading, watching, rescanning)."""

from .tool_folders import FolderRoot, ScanReport, ToolFolderSource

__all__ = ["FolderRoot", "ScanReport", "ToolFolderSource"]
