"""The tracing seam of the pipeline: how a tracer wraps a compiled plan.

A :class:`CallTracer` is given to the :class:`~toolgate.pipeline.Pipeline` by the gateway only
when tracing is on. It is applied once, when a tool's plan is compiled: the whole chain is wrapped
in the call's span, each stage that may await I/O (``suspends``: the security check, the approval
stage…) in a span of its own, and the executor in the backend's span (for tools that run out of
process: scripts, REST endpoints, remote MCP servers). Without a tracer the plans
are compiled exactly as before, so tracing that is off costs nothing per call.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol

from ..model import CallOutcome
from ..registry import RegisteredTool
from .state import CallState, Handler, Stage

__all__ = ["CallTracer", "StageCall"]


class StageCall(Protocol):
    """What a plan chains: a stage, or a stage wrapped in a span."""

    def __call__(self, state: CallState, proceed: Handler) -> Awaitable[CallOutcome]:
        """Handle the call (see :class:`~toolgate.pipeline.state.Stage`)."""
        ...


class CallTracer(Protocol):
    """Wraps the parts of a plan in spans."""

    def wrap_call(self, handler: Handler) -> Handler:
        """The whole plan: the call's span starts here and is current while the plan runs. It
        ends when the call's observers are told how it ended (the tracer is one of them), or
        when the plan raises (the caller cancelled)."""
        ...

    def wrap_stage(self, stage: Stage) -> StageCall:
        """A stage that may await I/O: a span for its own work, ended when it hands the call on
        or returns."""
        ...

    def wrap_execute(self, handler: Handler, entry: RegisteredTool) -> Handler:
        """The executor of ``entry``'s plan: a span for running the tool in its backend, current
        while it runs (so that requests upstream are its children) — or ``handler`` itself when
        the backend's work is the call's own (an in-process function)."""
        ...
