"""Shared command-line state and option parsing: consoles, ``--args`` and the gateway to use."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any, Literal

import typer
from rich.console import Console

from .._json import StrictJsonError, loads_strict
from ..approvals import Approver
from ..config import AuditMode, LoadedConfig, build_gateway, load_config, toolgate_home
from ..gateway import Gateway
from ..model.hidden_text import escape_hidden_json
from ..pipeline.approval_policy import ApprovalPolicy
from ..telemetry import Telemetry
from .errors import CliUsageError

__all__ = [
    "CliState",
    "ConfigOption",
    "LogFormat",
    "LogFormatOption",
    "make_console",
    "parse_arguments",
    "print_json",
]

#: ``--config``/``-c`` of a command that also takes it after its name (``toolgate serve -c x``).
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="PATH",
        help="Use this toolgate.yaml (same as the global --config).",
    ),
]

#: Width used when the output is not a terminal and ``COLUMNS`` is not set (Rich assumes 80).
PIPE_WIDTH = 120


def make_console(*, stderr: bool = False) -> Console:
    """A Rich console that degrades to plain text (no colours, no cursor codes) off a terminal.

    Tool output is printed literally: no markup, emoji codes or automatic highlighting.
    """
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty()
    width = PIPE_WIDTH if piped and "COLUMNS" not in os.environ else None
    return Console(stderr=stderr, width=width, emoji=False, highlight=False, markup=False)


@dataclass
class CliState:
    """What the global options decided, shared by every command (``ctx.obj``)."""

    config_path: Path | None = None
    out: Console = field(default_factory=make_console)
    err: Console = field(default_factory=lambda: make_console(stderr=True))
    loaded: LoadedConfig | None = None

    @property
    def home(self) -> Path:
        """``$TOOLGATE_HOME`` (default ``~/.toolgate``)."""
        return toolgate_home()

    @property
    def tools_dir(self) -> Path:
        """``$TOOLGATE_HOME/tools``: the installed tool folders (namespace ``local``)."""
        return self.home / "tools"

    @property
    def approval_policy(self) -> ApprovalPolicy | None:
        """The operator's approval rules from the loaded toolgate.yaml (``None`` before loading)."""
        if self.loaded is None:
            return None
        return ApprovalPolicy(self.loaded.config.approval.approval_rules())

    def open_gateway(
        self,
        approver: Approver | Literal["queue"] | None = "queue",
        *,
        audit: AuditMode = "write",
        telemetry: Telemetry | None = None,
        keep_processes: bool = False,
    ) -> Gateway:
        """Load the configuration and build the gateway (raises ``ConfigError``).

        With the default ``"queue"`` approver, approval requests and grants live in
        ``$TOOLGATE_HOME/toolgate.db`` (shared by every command and kept across restarts);
        commands that call no tool pass ``None`` and open no database. Likewise every call is
        recorded in ``$TOOLGATE_HOME/audit.db`` (``audit="write"``); commands that only read
        the tools' statistics pass ``"read"`` (an existing log only, nothing created) and those
        that need none ``"off"``. ``telemetry`` traces and measures the calls (``toolgate mcp``).
        ``keep_processes``: a long-running command (``mcp``), whose script tools may have
        processes started ahead of calls.
        """
        self.loaded = load_config(self.config_path)
        return build_gateway(
            self.loaded,
            approver=approver,
            audit=audit,
            telemetry=telemetry,
            keep_processes=keep_processes,
        )

    def hint_when_unconfigured(self) -> None:
        """Tell the user how to create a configuration when none was found."""
        if self.loaded is None or self.loaded.path is not None:
            return
        self.err.print(
            "No toolgate.yaml found (looked in the current folder and in $TOOLGATE_HOME, "
            "default ~/.toolgate). Create ./toolgate.yaml, for example:\n\n"
            "  python:\n    - ./my_tools.py      # a file with @tool functions\n"
            "  demo: true             # the bundled demo tools\n\n"
            "or create a tool folder (tool.md + a script in any runtime) with "
            "'toolgate tools new NAME', or run 'toolgate demo' for a tour that needs no "
            "configuration.",
            soft_wrap=True,
        )


_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _read_source(spec: str, stdin: IO[str]) -> str:
    if spec == "-":
        return stdin.read()
    if spec.startswith("@"):
        path = Path(spec[1:]).expanduser()
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise CliUsageError(f"--args: cannot read {path}: {reason}") from None
    return spec


def parse_arguments(spec: str, stdin: IO[str] | None = None) -> dict[str, Any]:
    """Parse ``--args``: a JSON object, ``@file.json``, or ``-`` for standard input.

    Raises :class:`CliUsageError` when the text cannot be read or is not a JSON object.
    """
    text = _read_source(spec, sys.stdin if stdin is None else stdin)
    where = "standard input" if spec == "-" else spec[1:] if spec.startswith("@") else "--args"
    if not text.strip():
        return {}
    try:
        value = loads_strict(text)
    except StrictJsonError as exc:
        raise CliUsageError(
            f"{where} is not valid JSON: {exc}. " """Pass an object such as '{"a": 1}'."""
        ) from None
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), type(value).__name__)
        raise CliUsageError(f"{where} must be a JSON object of arguments, not {kind}")
    return value


def print_json(value: Any, stream: IO[str] | None = None) -> None:
    """Print ``value`` as indented JSON, unwrapped and uncoloured (safe to pipe into ``jq``)."""
    target = sys.stdout if stream is None else stream
    # Readable text as it is; invisible and bidirectional characters as JSON escapes (the same
    # value for a parser, but nothing hidden from a person reading it).
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    target.write(escape_hidden_json(text) + "\n")
    target.flush()


class LogFormat(StrEnum):
    """How a long-running command writes its logs (``--log-format``)."""

    TEXT = "text"
    JSON = "json"


#: ``--log-format`` of ``toolgate serve`` and ``toolgate mcp``.
LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        case_sensitive=False,
        help="text (the default) or json: every log record as one JSON object per line on "
        "stderr, plus one line per call (call id, agent, tool, outcome, code, duration; "
        "secrets redacted as in the audit log).",
    ),
]
