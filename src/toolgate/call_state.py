"""The state of one call in flight, shared by the pipeline's stages and the backends."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .model import Tool
from .registry import RegisteredTool

if TYPE_CHECKING:
    from .model import CallOutcome

__all__ = ["CallState", "new_call_id"]


# Call ids name calls in the audit log; they are not secrets (approval ids are, and stay drawn
# from os.urandom). A generator seeded from the OS once per process makes them without a system
# call each time.
_ids = random.Random(os.urandom(32))


def new_call_id() -> str:
    """A random, URL-safe call id (64 bits; unique enough for audit joins, cheap to make)."""
    return f"call_{_ids.getrandbits(64):016x}"


class CallState:
    """Everything the stages and the backend know about one call. Mutable; internal."""

    __slots__ = (
        "agent",
        "arguments",
        "call_id",
        "entry",
        "full_content",
        "idempotency_key",
        "inline",
        "metadata",
        "namespaces",
        "refused_before_run",
        "session_id",
        "started_at",
        "tool",
        "tool_call_id",
        "uncounted",
        "workspace",
    )

    def __init__(
        self,
        *,
        call_id: str,
        entry: RegisteredTool,
        arguments: Mapping[str, Any],
        agent: str | None,
        session_id: str | None,
        workspace: Path | None,
        inline: bool,
        namespaces: frozenset[str] | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.call_id = call_id
        self.entry = entry
        self.tool: Tool = entry.tool
        self.arguments = arguments
        self.agent = agent
        self.session_id = session_id
        self.workspace = workspace
        self.inline = inline
        """True when ``call_sync`` drives the pipeline without an event loop."""
        self.namespaces = namespaces
        """The tool namespaces the caller's credentials allow (``None``: any)."""
        self.tool_call_id = tool_call_id
        """The id the agent's framework gave this tool call: a call with one asks for its own
        approval (two calls with the same arguments are two requests), and its retry after a
        pause finds that request again."""
        self.idempotency_key = idempotency_key
        """The caller's idempotency key for this call, used when the tool declares no key
        template of its own."""
        self.metadata: dict[str, Any] = {}
        self.full_content: Any = None
        """The whole result when shaping spilled it to a file (the outcome holds a preview), so
        that the audit log can still redact the declared paths of it."""
        self.uncounted: Callable[[CallState], CallOutcome | None] | None = None
        """Set when the rate limit let this call through uncounted, as a retry after a person's
        decision: the approval stage charges it (this returns the refusal, or ``None``) unless
        the call turns out to be that decided call."""
        self.refused_before_run = False
        """Set by a stage that refused the call right before the tool would have run (``busy``,
        no audit record possible): nothing ran, so its idempotency key is given up."""
        self.started_at = time.time()
        """When the call began (``time.time()``), for the audit log and statistics."""
