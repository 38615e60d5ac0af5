"""The Execute stage: run the tool with its timeout, map failures to outcomes, shape the result."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import re
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .._loop_watchdog import watch_call_frames
from ..backends.base import (
    ArgumentConversionError,
    Backend,
    BackendUnavailableError,
    ToolTimeoutError,
)
from ..errors import ErrorCode, ToolError
from ..model import CallOutcome, ImplementationKind, Tool
from ..redaction import Masker, caller_masker, redact_edges
from .shaping import ResultShaper
from .state import CallState, error_outcome
from .timeouts import CALLER_GONE, CallTimedOut, run_with_timeout

__all__ = ["CALLER_GONE", "Executor", "relative_paths"]

log = logging.getLogger("toolgate.pipeline")


def _timeout_message(state: CallState) -> str:
    return (
        f"Tool {state.tool.id} did not finish within its timeout of {state.tool.timeout:g} s and "
        "was cancelled. Try a smaller request, or tell the user the tool is too slow right now."
    )


class Executor:
    """The last step of every plan: run, contain, shape."""

    def __init__(
        self,
        backends: Mapping[ImplementationKind, Backend],
        shaper: ResultShaper,
        *,
        secret_values: Callable[[Tool], tuple[str, ...]] | None = None,
    ):
        self.backends = backends
        self.shaper = shaper
        self.secret_values = secret_values
        """The secrets and environment values the gateway gives a tool: masked in what the
        caller receives (see :meth:`caller_masker`)."""

    def caller_masker(self, state: CallState) -> Masker | None:
        """What is masked in the outcome the caller receives: the secrets the gateway gave the
        tool (whole, in pieces, encoded) — except what the caller itself sent in the arguments.
        The model never sees the gateway's credentials, and masking a string it sent would tell
        it that its guess is a secret."""
        tool = state.tool
        if self.secret_values is None or not (tool.secrets or tool.env):
            return None
        secrets = self.secret_values(tool)
        if not secrets:
            return None
        return caller_masker(secrets, _strings(state.arguments))

    def backend_for(self, kind: ImplementationKind) -> Backend | None:
        """The backend that runs tools of this kind, if one is configured."""
        return self.backends.get(kind)

    async def __call__(self, state: CallState) -> CallOutcome:
        masker = self.caller_masker(state)
        outcome = await self._execute(state, masker)
        if outcome.message is None:
            return outcome
        # What reaches the caller names files relative to the tool's folder: the host's layout
        # (the gateway's home, its user's name) is none of the model's business. The operator's
        # detail keeps the full paths.
        message = relative_paths(outcome.message, state.tool)
        if masker is not None:
            message = redact_edges(masker.sub(message), masker.values)
        return (
            outcome if message == outcome.message else dataclasses.replace(outcome, message=message)
        )

    async def _execute(self, state: CallState, masker: Masker | None) -> CallOutcome:
        backend = self.backends.get(state.tool.kind)
        if backend is None:
            return error_outcome(
                state,
                ErrorCode.UNAVAILABLE,
                f"Tool {state.tool.id} cannot run: this gateway has no backend for "
                f"{state.tool.kind} tools.",
            )
        started = time.perf_counter()
        try:
            if state.inline:
                result = backend.run_inline(state)
                duration = time.perf_counter() - started
                if duration > state.tool.timeout:
                    # call_sync ran the function in the caller's thread, which nothing can
                    # interrupt; the deadline still decides the outcome.
                    return error_outcome(
                        state, ErrorCode.TIMEOUT, _timeout_message(state), duration=duration
                    )
            else:
                result = await run_with_timeout(backend.run(state), state.tool.timeout)
                duration = time.perf_counter() - started
                if duration > state.tool.timeout:
                    # An async tool that never awaited held the loop past its deadline (the
                    # timer could not fire): the deadline still decides the outcome.
                    return error_outcome(
                        state, ErrorCode.TIMEOUT, _timeout_message(state), duration=duration
                    )
        except (CallTimedOut, ToolTimeoutError):
            return error_outcome(
                state,
                ErrorCode.TIMEOUT,
                _timeout_message(state),
                duration=time.perf_counter() - started,
            )
        except ArgumentConversionError as exc:
            return error_outcome(
                state,
                ErrorCode.INVALID_ARGUMENTS,
                f"Invalid arguments for tool {state.tool.id}; it did not run: {exc}. "
                "Fix these fields and call it again.",
            )
        except BackendUnavailableError as exc:
            return error_outcome(
                state, ErrorCode.UNAVAILABLE, f"Tool {state.tool.id} is unavailable: {exc}"
            )
        except ToolError as exc:
            return error_outcome(
                state, ErrorCode.TOOL_ERROR, exc.message, duration=time.perf_counter() - started
            )
        except asyncio.CancelledError as exc:
            if exc.args[:1] != (CALLER_GONE,):
                raise  # cancelled by whoever awaits the call; not the tool's failure
            # The serving surface cut the call off because its caller went away: recorded
            # as such (the audit log shows it) instead of vanishing with the cancellation.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            duration = time.perf_counter() - started
            return error_outcome(
                state,
                ErrorCode.CANCELLED,
                f"Call {state.call_id} to {state.tool.id} was cancelled after {duration:.1f} s: "
                "its caller went away (closed the connection or cancelled the request) while it "
                "ran, so the gateway stopped it.",
                duration=duration,
            )
        except BaseException as exc:  # noqa: BLE001 - any failure of the tool is an outcome
            detail = traceback.format_exc()
            # Not the traceback: its text may hold the tool's secrets or redacted arguments. The
            # outcome's detail carries it, and the audit log records it redacted.
            log.warning(
                "tool %s raised %s in call %s (traceback in the audit log)",
                state.tool.id,
                type(exc).__name__,
                state.call_id,
            )
            text = str(exc) or "(no message)"
            return error_outcome(
                state,
                ErrorCode.TOOL_ERROR,
                f"Tool {state.tool.id} failed with {type(exc).__name__}: {text}",
                duration=time.perf_counter() - started,
                detail=detail,
            )
        if masker is None:
            return self.shaper.shape(state, result, duration)
        return self.shaper.shape(state, result, duration, masker=masker)


# The loop watchdog names the call whose tool holds the loop by finding this frame on the loop
# thread's stack (nothing is recorded per call).
watch_call_frames(Executor._execute, "state")


def _strings(value: Any) -> list[str]:
    """Every string (keys included) and number's text in the JSON-shaped ``value``."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, Mapping):
            found.extend(str(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            found.append(str(item))
    return found


@functools.lru_cache(maxsize=1024)
def _folder_pattern(location: str | None) -> re.Pattern[str] | None:
    """The absolute folder a tool was declared in (and its resolved form) as a pattern;
    ``None`` for a tool with no folder (a Python function) or one declared at the top."""
    if not location or not location.startswith("/"):
        return None
    declared = Path(location)
    folder = declared if declared.is_dir() else declared.parent
    found = {str(folder)}
    with contextlib.suppress(OSError, RuntimeError):
        found.add(str(folder.resolve()))
    usable = sorted((f for f in found if len(Path(f).parts) > 2), key=len, reverse=True)
    if not usable:
        return None
    return re.compile("(?:" + "|".join(re.escape(f) for f in usable) + r")(/|(?![\w.\-]))")


def relative_paths(text: str, tool: Tool) -> str:
    """``text`` with every absolute path inside ``tool``'s folder shown relative to it
    (``/home/ada/.toolgate/tools/x/index.ts`` → ``index.ts``; the folder itself → ``.``)."""
    pattern = _folder_pattern(tool.source.location)
    if pattern is None:
        return text
    return pattern.sub(lambda m: "" if m.group(1) else ".", text)
