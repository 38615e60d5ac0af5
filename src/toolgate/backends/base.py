"""What every backend offers the pipeline."""

from __future__ import annotations

from typing import Any, Protocol

from ..call_state import CallState
from ..registry import RegisteredTool

__all__ = ["ArgumentConversionError", "Backend", "BackendUnavailableError", "ToolTimeoutError"]


class ArgumentConversionError(Exception):
    """Arguments passed the schema but could not be turned into the implementation's types."""


class BackendUnavailableError(Exception):
    """The implementation cannot run on this host now (a runtime or a connection is missing)."""


class ToolTimeoutError(Exception):
    """The backend's own deadline stopped the tool (the pipeline reports it as ``timeout``)."""


class Backend(Protocol):
    """Runs tools of one implementation kind.

    ``run`` raises whatever the tool raised (``ToolError`` for failures the tool reports itself);
    the pipeline maps exceptions to outcomes and applies the timeout by cancelling ``run``, so a
    backend must release what it holds (processes, connections) when cancelled.
    """

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        """True when ``run_inline`` may be used (``call_sync`` without an event loop)."""
        ...

    async def run(self, state: CallState) -> Any:
        """Run the tool and return its raw result."""
        ...

    def run_inline(self, state: CallState) -> Any:
        """Run the tool in the calling thread and return its raw result."""
        ...
