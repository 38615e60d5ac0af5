"""toolgate: one gateway for every tool an AI agent calls.

Declare a tool once, and every call goes through one pipeline that validates, runs, contains and
shapes it; serve the same tools to any model provider.

    from toolgate import Gateway, tool

    @tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    gateway = Gateway()
    gateway.add(add)
    outcome = gateway.call_sync("main:add", {"a": 1, "b": 2})
"""

import logging as _logging
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._loop_watchdog import LoopWatchdog
from .errors import (
    ConfigError,
    DuplicateToolError,
    ErrorCode,
    ToolCallParseError,
    ToolDefinitionError,
    ToolError,
    ToolgateError,
    ToolNotFoundError,
)
from .formats.capability.context import CapabilityContext
from .gateway import Gateway
from .gateway_settings import (
    AccessSettings,
    ApprovalSettings,
    AuditSettings,
    EnvironmentSettings,
    GatewaySettings,
    ResultSettings,
    ScriptSettings,
    SourceSettings,
    StateSettings,
)
from .model import (
    ApprovalRequest,
    ApprovalSpec,
    CallOutcome,
    CallStatus,
    ConfirmationSpec,
    DisplaySpec,
    Fact,
    IdempotencySpec,
    ImplementationKind,
    ObservabilitySpec,
    Overflow,
    Permissions,
    RateLimit,
    SafetySpec,
    SandboxMode,
    SandboxSpec,
    SideEffect,
    SourceFormat,
    TileArg,
    TileDisplay,
    Tool,
    ToolCall,
    ToolHints,
    ToolSource,
)
from .model.display import render_display
from .python import FunctionTool, ToolContext, tool

if _TYPE_CHECKING:
    from .client import Client

__version__ = "0.1.0"

# A library never configures logging; without a handler, Python would print our warnings (tool
# tracebacks, which the outcome already carries) to stderr through its last-resort handler.
_logging.getLogger("toolgate").addHandler(_logging.NullHandler())

__all__ = [
    "AccessSettings",
    "ApprovalRequest",
    "ApprovalSettings",
    "ApprovalSpec",
    "AuditSettings",
    "CallOutcome",
    "CallStatus",
    "CapabilityContext",
    "Client",
    "ConfigError",
    "ConfirmationSpec",
    "DisplaySpec",
    "DuplicateToolError",
    "EnvironmentSettings",
    "ErrorCode",
    "Fact",
    "FunctionTool",
    "Gateway",
    "GatewaySettings",
    "IdempotencySpec",
    "ImplementationKind",
    "LoopWatchdog",
    "ObservabilitySpec",
    "Overflow",
    "Permissions",
    "RateLimit",
    "ResultSettings",
    "SafetySpec",
    "SandboxMode",
    "SandboxSpec",
    "ScriptSettings",
    "SideEffect",
    "SourceFormat",
    "SourceSettings",
    "StateSettings",
    "TileArg",
    "TileDisplay",
    "Tool",
    "ToolCall",
    "ToolCallParseError",
    "ToolContext",
    "ToolDefinitionError",
    "ToolError",
    "ToolHints",
    "ToolNotFoundError",
    "ToolSource",
    "ToolgateError",
    "__version__",
    "render_display",
    "tool",
]


def __getattr__(name: str) -> _Any:
    # toolgate.Client is imported on first use: ``import toolgate`` loads no HTTP client.
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(f"module 'toolgate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "Client"})
