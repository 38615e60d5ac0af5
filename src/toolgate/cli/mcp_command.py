"""``toolgate mcp``: serve the configured tools to one MCP client over stdio.

Desktop and IDE agents start it as a subprocess (``"command": "toolgate", "args": ["mcp"]``).
Every call goes through the gateway's whole pipeline as agent ``--agent`` (default: the default
agent). Calls that need approval ask the user through the client when it supports elicitation;
otherwise they wait in ``$TOOLGATE_HOME/toolgate.db`` for ``toolgate approvals approve ID`` or the
web UI of ``toolgate serve`` (``--ui-url`` names it in the message the agent gets, while a
toolgate server answers there; the command is written with this process's ``--config`` and
``TOOLGATE_HOME`` so that it works from the person's own shell).

Without a ``toolgate.yaml`` it serves the bundled demo tools, as ``toolgate serve`` does. Only
protocol goes to stdout; configuration errors, logs and one line saying which tools are served
(and from where) go to stderr.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import asyncio
import logging
import sys
from typing import Annotated

import typer
from rich.text import Text

from ..config import build_gateway, load_config
from ..gateway import Gateway
from ..serve.mcp.approval_link import approval_command_prefix
from ..telemetry import from_environment
from ..telemetry.call_log import FIELDS, CallLog, use_json_logs
from .errors import CliUsageError
from .options import CliState, ConfigOption, LogFormat, LogFormatOption

__all__ = ["register"]

_LOG_LEVELS = ("debug", "info", "warning", "error")


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def register(app: typer.Typer) -> None:
    """Add ``toolgate mcp`` to ``app``."""
    app.command("mcp")(mcp)


def mcp(
    ctx: typer.Context,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="NAME",
            help="Call every tool as this agent: its access rules and policies apply, and it "
            "sees only the tools it may call (default: the default agent).",
        ),
    ] = None,
    config: ConfigOption = None,
    ui_url: Annotated[
        str | None,
        typer.Option(
            "--ui-url",
            metavar="URL",
            envvar="TOOLGATE_UI_URL",
            help="Base URL of the toolgate web UI; a call pending approval tells the agent to "
            "open URL/approvals/ID (default: where serve: in toolgate.yaml says 'toolgate "
            "serve' listens).",
        ),
    ] = None,
    no_elicitation: Annotated[
        bool,
        typer.Option(
            "--no-elicitation",
            help="Never ask the client's user to approve calls through the protocol; approvals "
            "then happen only in the web UI or with 'toolgate approvals'.",
        ),
    ] = False,
    log_level: Annotated[
        str,
        typer.Option("--log-level", metavar="LEVEL", help="debug, info, warning or error."),
    ] = "warning",
    log_format: LogFormatOption = LogFormat.TEXT,
) -> None:
    """Serve the configured tools over MCP on stdin/stdout (for desktop and IDE agents).

    Tools come from toolgate.yaml (tool folders are watched: changes reach the client as
    notifications/tools/list_changed); without one, the bundled demo tools are served, as by
    'toolgate serve'. Logs go to stderr, starting with one line saying how many tools are served
    and from where; stdout carries only the protocol.
    OpenTelemetry traces and metrics are exported when the OTEL_* environment variables ask
    for them (pip install 'toolgate[otel]').
    """
    if log_level.lower() not in _LOG_LEVELS:
        raise CliUsageError(f"--log-level must be one of {', '.join(_LOG_LEVELS)}")
    if log_format is LogFormat.JSON:
        use_json_logs(log_level.upper())
    else:
        logging.basicConfig(
            stream=sys.stderr,
            level=log_level.upper(),
            format="toolgate mcp: %(levelname)s %(name)s: %(message)s",
        )
    state = _state(ctx)
    if config is not None:
        state.config_path = config
    loaded = state.loaded = load_config(state.config_path)
    # Without a toolgate.yaml, the demo tools: the same first run as `toolgate serve`.
    unconfigured = loaded.path is None
    gateway = build_gateway(
        loaded,
        include_demo=unconfigured,
        approver="queue",
        telemetry=from_environment(),
        keep_processes=True,
    )
    if log_format is LogFormat.JSON:
        gateway.observe_calls(CallLog())
    agents = loaded.config.agents
    if agent is not None and agents and agent not in agents:
        state.err.print(
            f"toolgate mcp: warning: agent {agent!r} is not listed under agents: in "
            "toolgate.yaml; its policies select it by name only.",
            soft_wrap=True,
        )
    source = "the demo tools (no toolgate.yaml found)" if unconfigured else loaded.label
    _announce(state, len(gateway.list_tools(agent=agent)), source, agent, log_format)
    if ui_url is None:
        ui_url = _serve_url(loaded.config.serve.host, loaded.config.serve.port)
    try:
        page_size = loaded.config.serve.mcp_page_size
        command = approval_command_prefix(loaded.path)
        asyncio.run(_serve(gateway, agent, ui_url, not no_elicitation, page_size, command))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None  # Ctrl-C in a terminal: stop quietly


def _announce(
    state: CliState, tools: int, source: str, agent: str | None, log_format: LogFormat
) -> None:
    """Say on stderr what is served: the client's user sees it in the client's server log."""
    noun = "tool" if tools == 1 else "tools"
    who = "the default agent" if agent is None else f"agent {agent!r}"
    message = f"serving {tools} {noun} from {source} over stdio, as {who}"
    if log_format is LogFormat.JSON:
        # One JSON object like every other line there (the root logger stops at warnings).
        logger = logging.getLogger("toolgate.mcp")
        logger.setLevel(logging.INFO)
        logger.info(message, extra={FIELDS: {"tools": tools, "source": source, "agent": agent}})
    else:
        state.err.print(Text(f"toolgate mcp: {message}"), soft_wrap=True)


def _serve_url(host: str, port: int) -> str | None:
    """Where a browser reaches ``toolgate serve`` as configured (``None``: a random port)."""
    if port == 0:
        return None
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # listening everywhere: this machine reaches it on loopback
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _serve(
    gateway: Gateway,
    agent: str | None,
    ui_url: str | None,
    elicit: bool,
    page_size: int,
    command: str,
) -> None:
    # The SDK is imported here, not at module level: other commands must not pay for it.
    from ..serve.mcp.stdio import serve_stdio

    try:
        await serve_stdio(
            gateway,
            agent=agent,
            approvals_url=ui_url,
            elicitation=elicit,
            page_size=page_size,
            approval_command=command,
        )
    finally:
        await gateway.aclose()
