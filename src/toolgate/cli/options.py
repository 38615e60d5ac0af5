"""Shared command-line state and option parsing: consoles, ``--args``, the gateway to use, and
the conventions ``--help`` follows."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Annotated, Any, Final, Literal

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

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
    "ClickStyleHelp",
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
        demo_when_unconfigured: bool = False,
    ) -> Gateway:
        """Load the configuration and build the gateway (raises ``ConfigError``).

        With the default ``"queue"`` approver, approval requests and grants live in
        ``$TOOLGATE_HOME/toolgate.db`` (shared by every command and kept across restarts);
        commands that call no tool pass ``None`` and open no database. Likewise every call is
        recorded in ``$TOOLGATE_HOME/audit.db`` (``audit="write"``); commands that only read
        the tools' statistics pass ``"read"`` (an existing log only, nothing created) and those
        that need none ``"off"``. ``telemetry`` traces and measures the calls (``toolgate mcp``).
        ``keep_processes``: a long-running command (``mcp``), whose script tools may have
        processes started ahead of calls. ``demo_when_unconfigured``: without a toolgate.yaml,
        declare the bundled demo tools, as ``toolgate serve`` does (the approval commands, so
        that they know the tools of a demo server's requests).
        """
        self.loaded = load_config(self.config_path)
        return build_gateway(
            self.loaded,
            approver=approver,
            audit=audit,
            telemetry=telemetry,
            keep_processes=keep_processes,
            include_demo=demo_when_unconfigured and self.loaded.path is None,
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


# -- help --------------------------------------------------------------------------------------
#
# Typer 0.29 writes help its own new way: a type after every flag ("--json <bool>"), Python type
# names ("<str>", "<int range>"), choices as "<text|json>" and a required argument as "{ID}" in
# the usage line. toolgate's help keeps the conventions of Click (and of Typer before it), which
# its users know and its own metavars (PATH, NAME, URL) follow: a flag shows no value, a value
# shows TEXT, INTEGER, PATH or [a|b], and the usage line names an argument by its metavar as
# written, else by its name in capitals ([NAME] when it is optional). Typer builds the commands;
# the root group gives every command and parameter the classes below, which differ from Typer's
# in these names only.

#: Typer's type names, as Click writes them.
_CLICK_TYPES: Final = {
    "str": "TEXT",
    "int": "INTEGER",
    "float": "FLOAT",
    "bool": "BOOLEAN",
    "int range": "INTEGER RANGE",
    "float range": "FLOAT RANGE",
}


def _click_type(param: TyperOption | TyperArgument, ctx: Any) -> str | None:
    """The value of ``param`` as Click names it: TEXT, INTEGER, PATH, [text|json]…"""
    shown = param.display_type(ctx)  # Typer's, e.g. "<str>", "<list[str]>", "<text|json>"
    if not shown:
        return None
    name = shown.removeprefix("<").removesuffix(">")
    if name.startswith("list[") and name.endswith("]"):
        name = name[5:-1]  # a repeatable option or a variadic argument: each value's type
    if param.type_descriptor.is_choice:
        return f"[{name}]"
    return _CLICK_TYPES.get(name, name.upper())


class _Option(TyperOption):
    def display_type_rich(self, ctx: Any) -> str | None:
        if self.is_flag or self.count:
            return None  # a flag takes no value
        if self.metavar is not None:
            return self.metavar
        shown = _click_type(self, ctx)
        return None if shown is None else shown + ("..." if self.nargs != 1 else "")


class _Argument(TyperArgument):
    @property
    def display_name_raw(self) -> str:
        return self.metavar if self.metavar is not None else (self.name or "").upper()

    def display_type_rich(self, ctx: Any) -> str | None:
        return _click_type(self, ctx)

    def _usage_display_name(self) -> str:
        if self.metavar is not None:
            return self.metavar  # as written ("[NAME]..."), as Click shows it
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return name + ("..." if self.nargs != 1 else "")


_PARAMETERS: Final[dict[type, type]] = {TyperOption: _Option, TyperArgument: _Argument}


def _conventional(params: list[Any]) -> list[Any]:
    # Typer's own classes only (a parameter of another class keeps its help as it is); the
    # help option is made when first asked for, so every call checks.
    for param in params:
        conventional = _PARAMETERS.get(type(param))
        if conventional is not None:
            param.__class__ = conventional
    return params


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _conventional(super().get_params(ctx))


class ClickStyleHelp(TyperGroup):
    """The root command group (``typer.Typer(cls=ClickStyleHelp)``): its help, and that of every
    command under it, in Click's conventions (see above)."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for command in self.commands.values():
            _adopt(command)

    def get_params(self, ctx: Any) -> list[Any]:
        return _conventional(super().get_params(ctx))


def _adopt(command: Any) -> None:
    if type(command) is TyperCommand:
        command.__class__ = _Command
    elif type(command) is TyperGroup:
        command.__class__ = ClickStyleHelp
    for sub in getattr(command, "commands", {}).values():
        _adopt(sub)
