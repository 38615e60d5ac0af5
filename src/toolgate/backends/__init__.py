"""Backends run tool implementations; the pipeline picks one by the tool's kind."""

from .base import ArgumentConversionError, Backend
from .python import PythonBackend

__all__ = ["ArgumentConversionError", "Backend", "PythonBackend"]
