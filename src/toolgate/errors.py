"""Stable error codes and the exception hierarchy.

Every surface (Python API, CLI, HTTP, MCP, exporters) speaks the same snake_case codes. A tool
call never raises: it ends in a :class:`~toolgate.CallOutcome` that carries one of these codes.
Exceptions are only for misuse of the Python API itself (bad configuration, a tool declared twice,
an unknown tool id passed to ``Gateway.get_tool``); they carry the same codes and also subclass the
fitting builtin so ordinary ``except LookupError`` code keeps working.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "ERROR_DESCRIPTIONS",
    "ApprovalClosedError",
    "ConfigError",
    "DuplicateToolError",
    "ErrorCode",
    "SearchQueryError",
    "StateUnavailableError",
    "ToolCallParseError",
    "ToolDefinitionError",
    "ToolError",
    "ToolNotFoundError",
    "ToolgateError",
]


class ErrorCode(StrEnum):
    """The machine-readable reason a call (or an API operation) failed."""

    TOOL_NOT_FOUND = "tool_not_found"
    UNAVAILABLE = "unavailable"
    FORBIDDEN = "forbidden"
    INVALID_ARGUMENTS = "invalid_arguments"
    RATE_LIMITED = "rate_limited"
    BUSY = "busy"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    OUTCOME_UNKNOWN = "outcome_unknown"
    USER_REJECTION = "user_rejection"
    SECURITY_BLOCKED = "security_blocked"
    TIMEOUT = "timeout"
    TOOL_ERROR = "tool_error"
    INVALID_OUTPUT = "invalid_output"
    CANCELLED = "cancelled"
    CRASHED = "crashed"
    # Codes of the Python API's own exceptions (never the outcome of a call).
    DUPLICATE_TOOL = "duplicate_tool"
    INVALID_DEFINITION = "invalid_definition"
    CONFIG_ERROR = "config_error"
    APPROVAL_CLOSED = "approval_closed"


#: One line per code: what it means. Rendered into the README's error table.
ERROR_DESCRIPTIONS: dict[ErrorCode, str] = {
    ErrorCode.TOOL_NOT_FOUND: "No tool has this id for this caller: none exists, or the access "
    "rules or its token's scopes hide it — the two are answered alike (the message suggests the "
    "closest ids among the tools the caller may see).",
    ErrorCode.UNAVAILABLE: "The tool exists but cannot run now (missing runtime, connection or "
    "secret); the message says how to fix it.",
    ErrorCode.FORBIDDEN: "The caller may not do this (an operator endpoint, its own approval); in "
    "the audit log, a call an access rule refused, naming the rule (the caller was told "
    "tool_not_found).",
    ErrorCode.INVALID_ARGUMENTS: "The arguments do not match the input schema; the message names "
    "every failing field by JSON pointer. The tool did not run.",
    ErrorCode.RATE_LIMITED: "A rate limit is exhausted; the message says when to retry.",
    ErrorCode.BUSY: "The tool already runs as many calls as it may and its queue is full (or the "
    "call waited in the queue past its timeout); the tool did not run. Retry later.",
    ErrorCode.IDEMPOTENCY_CONFLICT: "The idempotency key was already used with other arguments.",
    ErrorCode.OUTCOME_UNKNOWN: "An earlier call with this idempotency key was cut off (the gateway "
    "stopped) before its outcome was recorded: it may or may not have taken effect. The message "
    "names that call and when it started; check, then use a new key.",
    ErrorCode.USER_REJECTION: "A person denied the call, or nobody could be asked.",
    ErrorCode.SECURITY_BLOCKED: "The tool's security check blocked the call.",
    ErrorCode.TIMEOUT: "The tool did not finish within its timeout and was cancelled.",
    ErrorCode.TOOL_ERROR: "The tool ran and reported an error (its message is passed on).",
    ErrorCode.INVALID_OUTPUT: "The tool's result does not match its output schema.",
    ErrorCode.CANCELLED: "The caller went away (closed its connection, or cancelled the MCP "
    "request) while the tool ran, and the gateway stopped the call; recorded in the audit log "
    "(nobody was left to receive it). Calls of tools with an idempotency key run to their end "
    "instead.",
    ErrorCode.CRASHED: "The gateway failed while handling the call (a bug); details are logged.",
    ErrorCode.DUPLICATE_TOOL: "Python API: two declarations use the same tool id.",
    ErrorCode.INVALID_DEFINITION: "Python API: a tool declaration is malformed.",
    ErrorCode.CONFIG_ERROR: "Python API / CLI: the configuration is malformed or cannot be loaded.",
    ErrorCode.APPROVAL_CLOSED: "Python API / CLI: no open approval request has this id (unknown, "
    "already decided, expired, or its tool changed).",
}


class ToolgateError(Exception):
    """Root of every exception toolgate raises. ``code`` is a stable :class:`ErrorCode`."""

    code: ErrorCode = ErrorCode.CRASHED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ToolNotFoundError(ToolgateError, LookupError):
    """No tool is registered under the requested id."""

    code = ErrorCode.TOOL_NOT_FOUND

    def __init__(self, message: str, *, suggestions: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.suggestions = suggestions


class DuplicateToolError(ToolgateError, ValueError):
    """Two declarations claim the same tool id."""

    code = ErrorCode.DUPLICATE_TOOL


class ToolDefinitionError(ToolgateError, ValueError):
    """A tool declaration is malformed (bad schema, bad id, bad option)."""

    code = ErrorCode.INVALID_DEFINITION


class ConfigError(ToolgateError, ValueError):
    """The gateway configuration (``toolgate.yaml`` or constructor options) is malformed."""

    code = ErrorCode.CONFIG_ERROR


class ToolCallParseError(ToolgateError, ValueError):
    """A provider's tool-call payload could not be turned into a call."""

    code = ErrorCode.INVALID_ARGUMENTS


class ToolError(ToolgateError):
    """Raise inside a tool to fail the call with exactly this message for the model.

    Any other exception also becomes ``tool_error``, but its message is prefixed with the
    exception's type; use this one when the message is written for the model.
    """

    code = ErrorCode.TOOL_ERROR


class SearchQueryError(ToolgateError, ValueError):
    """A tool search was asked with a bad ``query`` or ``limit``; ``field`` names which."""

    code = ErrorCode.INVALID_ARGUMENTS

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class ApprovalClosedError(ToolgateError, LookupError):
    """No open approval request has this id: unknown, already decided, expired, or voided."""

    code = ErrorCode.APPROVAL_CLOSED


class StateUnavailableError(ToolgateError, ConnectionError):
    """The shared state (PostgreSQL or Redis) cannot be reached right now.

    A call that needs it ends in ``unavailable`` with this message; the gateway keeps serving and
    reconnects by itself once the service is back.
    """

    code = ErrorCode.UNAVAILABLE
