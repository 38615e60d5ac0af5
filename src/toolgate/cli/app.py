"""The ``toolgate`` commands (Typer). Every command talks only to the :class:`~toolgate.Gateway`.

Commands: ``tools list``, ``tools show ID``, ``tools validate PATH``, ``tools install PATH``,
``tools remove NAME``, ``tools new NAME``, ``call ID``, ``approvals list|show|approve|deny``,
``grants list|revoke``, ``audit list|export``, ``export``, ``demo``; global options
``--config PATH`` and ``--version``.

Every call (and every approved call) is recorded in the audit log ``$TOOLGATE_HOME/audit.db``
(``audit:`` in toolgate.yaml); ``tools list`` and ``tools show`` read the tools' health (phase,
calls and failure rate over 7 days, latency, last error) from it without creating it.

Approvals: a call that needs a person's approval asks at the terminal when stdin and stdout are
one (Allow once / Always allow / Deny), then prints the call's result. Otherwise (or with
``--no-prompt``) it prints the request and how to decide it and exits 4; ``toolgate approvals
approve ID`` runs it, and repeating the same call prints the stored outcome. Requests and grants
live in ``$TOOLGATE_HOME/toolgate.db``.

``tools list --json`` prints the same JSON array of tools as always (plus each tool's
``phase``); the tool-folder diagnostics
then go to stderr as text (one ``severity: path: field: message`` line each), so the array stays
backward compatible and pipes cleanly into ``jq``.

Exit codes (see :mod:`toolgate.cli.errors`, where they are assigned in one function):

* 0 success;
* 1 the call ended in an error outcome (``tool_error``, ``invalid_arguments``,
  ``tool_not_found``, ``user_rejection``…), ``tools show`` / ``export --tool`` named an unknown
  tool, a tool-folder command failed (a folder that does not load, an installed tool without
  ``--force``, removing a tool that is not installed, ``tools new`` onto an existing folder), or
  an approvals/grants command named an unknown, already decided or expired request or grant;
* 2 usage error: a bad option, ``--args`` that is not a JSON object, an unreadable args file, a
  PATH that is not a folder, a NAME that is a path;
* 3 configuration error: a malformed ``toolgate.yaml``, a module or file that cannot be loaded;
* 4 the call is pending a person's approval (``toolgate approvals``).
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from ..backends.prestart import PrestartSettings
from ..errors import ErrorCode, ToolgateError
from ..gateway import Gateway
from ..model import CallStatus, SandboxMode
from ..registry import RegisteredTool
from . import (
    agents,
    config_command,
    connections,
    db_command,
    declarations,
    js_command,
    mcp_command,
    mcp_servers_command,
    plugins,
    resources,
    sandbox,
    serve_command,
)
from . import search as search_commands
from .approvals import (
    approvals_app,
    call_display,
    current_user,
    decide_at_terminal,
    grants_app,
    print_pending,
)
from .audit import audit_app
from .catalog import (
    describe_tool,
    enforcement,
    print_tool,
    print_tool_table,
    process_mode,
    summarize_tool,
)
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError, report
from .folders import (
    LOCAL_NAMESPACE,
    install_folder,
    new_folder,
    print_diagnostics,
    remove_folder,
    validate_folder,
)
from .options import ClickStyleHelp, CliState, make_console, parse_arguments, print_json
from .outcome import print_display, print_outcome
from .scaffold import SCAFFOLD_RUNTIMES

__all__ = ["app", "run"]

_FORMATS_HELP = "openai, openai-responses, anthropic, gemini or mcp"

app = typer.Typer(
    name="toolgate",
    help="One gateway for every tool an AI agent calls: list, inspect, call and export tools.\n\n"
    "Tools come from ./toolgate.yaml, else $TOOLGATE_HOME/toolgate.yaml "
    "(TOOLGATE_HOME defaults to ~/.toolgate). Run 'toolgate demo' for a tour that needs no "
    "configuration.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    cls=ClickStyleHelp,  # help in Click's conventions: no type after a flag, ID not {ID}
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)
tools_app = typer.Typer(
    help="Inspect the configured tools, and validate, install, remove or create tool folders "
    "(a tool.md plus a script in any runtime) in $TOOLGATE_HOME/tools.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)
app.add_typer(tools_app, name="tools")
search_commands.register(app, tools_app)
app.add_typer(approvals_app, name="approvals")
app.add_typer(grants_app, name="grants")
app.add_typer(audit_app, name="audit")
for _module in (
    config_command,
    declarations,
    connections,
    plugins,
    resources,
    serve_command,
    mcp_command,
    mcp_servers_command,
    agents,
    db_command,
    sandbox,
    js_command,
):
    _module.register(app)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"toolgate {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="PATH",
            help="Use this toolgate.yaml instead of ./toolgate.yaml or "
            "$TOOLGATE_HOME/toolgate.yaml.",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """One gateway for every tool an AI agent calls."""
    ctx.obj = CliState(config_path=config)


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def _find_entry(gateway: Gateway, tool_id: str) -> RegisteredTool:
    tool = gateway.get_tool(tool_id)  # raises ToolNotFoundError with suggestions
    return next(entry for entry in gateway.entries() if entry.tool.id == tool.id)


def _exit(code: int) -> NoReturn:
    raise typer.Exit(code)


# -- tools -------------------------------------------------------------------------------------


@tools_app.command("accept", epilog=EXIT_CODES_HELP)
def accept_tool(
    ctx: typer.Context,
    tool_id: Annotated[str, typer.Argument(metavar="ID", help="The held tool's id.")],
    expected: Annotated[
        str | None,
        typer.Option(
            "--hash",
            metavar="HASH",
            help="The definition hash you reviewed: refused if the tool changed since.",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Accept whatever definition the source gives now, unreviewed (instead of --hash).",
        ),
    ] = False,
) -> None:
    """Accept a held tool at the definition you reviewed ('toolgate tools show ID' shows it
    and its hash; give it with --hash): an MCP server's new or changed tool, or a plugin's or
    capability's tool whose texts hide something. It is served from then on, until its
    definition changes. Without --hash, --yes is needed."""
    from ..formats.mcp_server.source import AcceptError

    state = _state(ctx)
    if expected is None and not yes:
        raise CliFailure(
            f"not accepted: give the definition hash you reviewed with --hash (see 'toolgate "
            f"tools show {tool_id}'), or --yes to accept whatever its source gives now"
        )
    with state.open_gateway(approver=None, audit="off") as gateway:
        try:
            digest = gateway.accept_tool(tool_id, by=current_user(), expected=expected)
        except AcceptError as exc:
            raise CliFailure(str(exc)) from None
    state.out.print(Text(f"accepted {tool_id} {digest}"), soft_wrap=True)


@tools_app.command("list", epilog=EXIT_CODES_HELP)
def list_tools(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the catalog as JSON.")] = False,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            metavar="NAME",
            help="Only the tools this agent may call (its access rules and policies applied).",
        ),
    ] = None,
) -> None:
    """List the tools: id, title, side-effect level, approval, kind, source, availability and
    phase (Ready, Degraded, Unavailable, Failed).

    Below the table: why each unavailable tool is unavailable, and every problem found in the
    tool folders ($TOOLGATE_HOME/tools and tool_folders: in toolgate.yaml) as 'severity: path:
    field: message'. A broken folder never stops the other tools from loading. With --json the
    array of tools goes to stdout and those problems to stderr. With --agent NAME, only the
    tools that agent may call: exactly those a call by it would not refuse as forbidden.
    """
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="read") as gateway:
        entries = gateway.entries()
        if agent is not None:
            allowed = {tool.id for tool in gateway.list_tools(agent=agent)}
            entries = [entry for entry in entries if entry.tool.id in allowed]
        statuses = {status.tool_id: status for status in gateway.statuses()}
        diagnostics = gateway.diagnostics()
    if as_json:
        rows = []
        for entry in entries:
            row = summarize_tool(entry, state.approval_policy)
            status = statuses.get(entry.tool.id)
            row["phase"] = None if status is None else str(status.phase)
            rows.append(row)
        print_json(rows)
    elif entries:
        print_tool_table(entries, state.out, state.approval_policy, statuses)
    elif agent is not None and state.loaded is not None and state.loaded.path is not None:
        state.out.print(Text(f"No tools that agent {agent!r} may call."), soft_wrap=True)
    else:
        state.out.print("No tools are configured.")
    if diagnostics:
        noun = "problem" if len(diagnostics) == 1 else "problems"
        console = state.err if as_json else state.out
        if not as_json:
            console.print()
        print_diagnostics(
            diagnostics, console, heading=f"{len(diagnostics)} {noun} in declarations:"
        )
    if not entries and not diagnostics:
        state.hint_when_unconfigured()


@tools_app.command("show", epilog=EXIT_CODES_HELP)
def show_tool(
    ctx: typer.Context,
    tool_id: Annotated[
        str, typer.Argument(metavar="ID", help="The tool id (namespace:name) or provider name.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the details as JSON.")] = False,
) -> None:
    """Show one tool: description, input and output schemas, side-effect level, approval,
    timeout, provider name and source, what the process sandbox enforces for it, and its
    health: phase, calls and failure rate over the last 7 days, p50/p95 latency, last error and
    why it is not Ready."""
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="read") as gateway:
        entry = _find_entry(gateway, tool_id)
        status = gateway.status(entry.tool.id)
        # What the process sandbox enforces for this tool (probes the host once).
        enforced = (
            None
            if gateway.sandbox is None
            else enforcement(gateway.sandbox, entry.tool, entry.binding)
        )
        on_host = (
            gateway.sandbox is None or gateway.sandbox.mode_for(entry.tool) is SandboxMode.HOST
        )
        warm = gateway.sandbox is not None and gateway.sandbox.host().works
    # As `toolgate serve` runs it (this command itself starts no process ahead).
    prestart = state.loaded.config.processes.prestart.settings() if state.loaded else None
    processes = process_mode(
        entry.tool,
        prestart or PrestartSettings(),
        on_host=on_host,
        warm_sandboxes=warm,
    )
    if as_json:
        print_json(describe_tool(entry, state.approval_policy, status, enforced, processes))
    else:
        print_tool(entry, state.out, state.approval_policy, status, enforced, processes)


# -- tool folders ------------------------------------------------------------------------------

_FOLDER_HELP = (
    "A tool folder holds tool.md (YAML front matter: name, script, runtime, inputSchema, "
    "outputSchema, timeout…; the Markdown body is the description the model reads) or tool.json, "
    "and the script, run with one JSON object on stdin and writing one to stdout."
)


@tools_app.command("validate", epilog=EXIT_CODES_HELP)
def validate_tool(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(metavar="PATH", help="The tool folder to check.")],
) -> None:
    """Check a tool folder without installing or running it.

    Prints the tool it declares (id, script and runtime, timeout, side effect, approval, inputs)
    and every problem as 'severity: file: field: message', including a warning when its runtime
    is not installed here. Exits 0 when the folder loads (warnings allowed), 1 when it does not,
    2 when PATH is not a folder.
    """
    validate_folder(path, _state(ctx).out)


@tools_app.command("install", epilog=EXIT_CODES_HELP)
def install_tool(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(metavar="PATH", help="The tool folder to install.")],
    force: Annotated[
        bool, typer.Option("--force", "-f", help="Replace an installed tool of the same name.")
    ] = False,
) -> None:
    """Validate a tool folder, then copy it to $TOOLGATE_HOME/tools/NAME (NAME: its 'name').

    The tool is then local:NAME and is available at once: the next toolgate command loads it,
    and a running server picks it up by itself. Refuses a folder that does not load (printing
    why), an installed tool of the same name unless --force, and symlinks pointing outside the
    folder; `.git` and `__pycache__` are not copied.
    """
    state = _state(ctx)
    check = install_folder(path, state.tools_dir, force=force, console=state.err)
    assert check.tool is not None
    tool_id = check.tool.id
    state.out.print(
        Text.assemble(("Installed ", "bold green"), (tool_id, "bold"), f" in {check.load.folder}"),
        soft_wrap=True,
    )
    state.out.print(
        f"It is available now: 'toolgate call {tool_id}' runs it, and a running server picks it "
        "up by itself (it watches $TOOLGATE_HOME/tools).",
        soft_wrap=True,
    )
    print_diagnostics(check.diagnostics, state.err)


@tools_app.command("remove", epilog=EXIT_CODES_HELP)
def remove_tool(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="The folder name in $TOOLGATE_HOME/tools (local:NAME is accepted too).",
        ),
    ],
) -> None:
    """Delete an installed tool folder, $TOOLGATE_HOME/tools/NAME, and nothing else.

    A symlinked folder is unlinked, never followed. Exits 1 when no such folder is installed and
    2 when NAME is a path ('/', '..').
    """
    state = _state(ctx)
    removed = remove_folder(name, state.tools_dir)
    state.out.print(
        Text.assemble(
            ("Removed ", "bold"), f"{LOCAL_NAMESPACE}:{removed.name}", f" (deleted {removed})"
        ),
        soft_wrap=True,
    )


@tools_app.command("new", epilog=EXIT_CODES_HELP)
def new_tool(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The tool's name, e.g. word-count.")],
    runtime: Annotated[
        str,
        typer.Option(
            "--runtime",
            "-r",
            metavar="RUNTIME",
            help=f"The script's runtime: {', '.join(SCAFFOLD_RUNTIMES)}.",
        ),
    ] = "python",
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            metavar="PATH",
            help="Create the folder PATH/NAME instead of $TOOLGATE_HOME/tools/NAME (then "
            "install it with 'toolgate tools install PATH/NAME').",
        ),
    ] = None,
    protocol: Annotated[
        str,
        typer.Option(
            "--protocol",
            metavar="PROTOCOL",
            help="oneshot (a process per call, the default) or worker (one long-lived process "
            "answers a JSON line per call; python, node and bun get a helper file).",
        ),
    ] = "oneshot",
) -> None:
    """Create a working tool folder to start from: tool.md, a script and test-input.json.

    The tool greets: given {"name": "Ada"} it returns {"message": "Hello, Ada!"}. tool.md sets
    every common field (comments explain each); edit its description, schemas and the script.
    For --runtime binary the script is an executable shell script: replace it with your own
    executable. Created in $TOOLGATE_HOME/tools it is local:NAME at once.
    """
    state = _state(ctx)
    parent = state.tools_dir if directory is None else directory
    if protocol not in ("oneshot", "worker"):
        raise CliUsageError(f"--protocol must be oneshot or worker, not {protocol!r}")
    folder, files, check = new_folder(name, runtime, parent, worker=protocol == "worker")
    out = state.out
    out.print(Text.assemble(("Created ", "bold green"), f"{folder} ({runtime})"), soft_wrap=True)
    purposes = {
        "tool.md": "the declaration: description, schemas, timeout, approval",
        "test-input.json": "sample arguments",
        "toolgate_worker.py": "the worker protocol helper (keep it next to the script)",
        "toolgate_worker.mjs": "the worker protocol helper (keep it next to the script)",
    }
    for file in files:
        purpose = purposes.get(file.name, "the code: JSON on stdin, JSON on stdout")
        out.print(f"  {file.name:<16} {purpose}")
    out.print()
    out.print(Text("Try it:", style="bold"))
    tool_id = f"{LOCAL_NAMESPACE}:{name}"
    out.print(f"  toolgate tools validate {folder}", soft_wrap=True)
    installed = directory is None
    if not installed:
        out.print(f"  toolgate tools install {folder}", soft_wrap=True)
    out.print(f"  toolgate call {tool_id} --args @{folder / 'test-input.json'}", soft_wrap=True)
    print_diagnostics(check.diagnostics, state.err)


# -- call --------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def call(
    ctx: typer.Context,
    tool_id: Annotated[
        str, typer.Argument(metavar="ID", help="The tool id (namespace:name) or provider name.")
    ],
    args: Annotated[
        str,
        typer.Option(
            "--args",
            "-a",
            metavar="JSON|@FILE|-",
            help="The arguments: a JSON object, @file.json to read a file, or - for stdin.",
        ),
    ] = "{}",
    agent: Annotated[
        str | None, typer.Option(help="The name of the agent making the call.")
    ] = None,
    session: Annotated[
        str | None, typer.Option(help="The session id (groups overflow files and state).")
    ] = None,
    workspace: Annotated[
        Path | None,
        typer.Option(help="The folder the call acts on (default: the current folder)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the whole outcome as JSON.")
    ] = False,
    no_prompt: Annotated[
        bool,
        typer.Option(
            "--no-prompt",
            help="Never ask at the terminal: a call that needs approval prints its request and "
            "exits 4 (as it does when stdin or stdout is not a terminal).",
        ),
    ] = False,
) -> None:
    """Call a tool through the gateway's pipeline.

    First prints the call's one-line display to stderr (the tool's tile, e.g. 'Show Map Of
    "Cairo" At Zoom Level 12', or its title and arguments). Then prints the content exactly as
    the model reads it, and renders the tool's visualization (diff, code, table, markdown, shell
    output, to-do list, file list) for you. Errors go to stderr as 'error [code]: message'.

    A call that needs a person's approval asks at the terminal — [o] Allow once, [always]
    Always allow, [d] Deny — then prints the result. Without a terminal (or with --no-prompt)
    it prints the request and how to decide it ('toolgate approvals approve ID') and exits 4;
    repeating the same call after the decision prints the stored outcome.
    """
    state = _state(ctx)
    arguments = parse_arguments(args)
    interactive = not no_prompt and args != "-" and sys.stdin.isatty() and sys.stdout.isatty()
    with state.open_gateway() as gateway:
        display = call_display(gateway, tool_id, arguments, agent=agent)
        if display is not None and not as_json:
            # On stderr, like every note: stdout stays exactly what the model reads.
            print_display(display, state.err)
        outcome = gateway.call_sync(
            tool_id,
            arguments,
            agent=agent,
            session_id=session,
            workspace=workspace if workspace is not None else Path.cwd(),
        )
        if (
            interactive
            and outcome.status is CallStatus.PENDING_APPROVAL
            and outcome.approval is not None
        ):
            outcome = decide_at_terminal(gateway, outcome.approval, state.err, by=current_user())
        audit = gateway.audit
        if audit is not None and (not audit.flush(10) or not audit.healthy or audit.lost):
            # The call is done either way; the operator must hear that its record is missing.
            state.err.print(
                Text(
                    "warning: the audit log did not record this call "
                    f"({audit.last_error or 'its writer did not finish in time'})"
                ),
                soft_wrap=True,
            )
    pending = outcome.status is CallStatus.PENDING_APPROVAL
    if as_json:
        print_json(outcome.to_dict())
    elif outcome.ok:
        print_outcome(outcome, state.out)
    elif pending and outcome.approval is not None:
        print_pending(outcome.approval, state.out, state, display=display)
    approval = outcome.metadata.get("approval")
    if isinstance(approval, Mapping) and approval.get("replayed") and not as_json:
        state.err.print(
            f"note: this is the stored outcome of approved request {approval.get('id')}; the "
            "tool did not run again.",
            soft_wrap=True,
        )
    code = report(outcome, state.err, quiet=as_json or (pending and outcome.approval is not None))
    if outcome.code is ErrorCode.TOOL_NOT_FOUND:
        state.hint_when_unconfigured()
    _exit(code)


# -- export ------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def export(
    ctx: typer.Context,
    format: Annotated[
        str,
        typer.Option("--format", "-f", metavar="FORMAT", help=f"The format: {_FORMATS_HELP}."),
    ] = "openai",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write to FILE instead of stdout."),
    ] = None,
    tool_ids: Annotated[
        list[str] | None,
        typer.Option("--tool", "-t", metavar="ID", help="Export only this tool (repeatable)."),
    ] = None,
) -> None:
    """Print the tool definitions for a model provider as JSON."""
    from ..exporters import EXPORT_FORMATS, export_tools

    if format not in EXPORT_FORMATS:
        raise CliUsageError(f"--format must be one of {', '.join(EXPORT_FORMATS)}, not {format!r}")
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        tools = (
            [gateway.get_tool(tool_id) for tool_id in tool_ids]
            if tool_ids
            else gateway.list_tools()
        )
    text = json.dumps(export_tools(tools, format), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CliUsageError(f"--output: cannot write {output}: {exc.strerror or exc}") from None
        noun = "definition" if len(tools) == 1 else "definitions"
        state.err.print(f"Wrote {len(tools)} {format} tool {noun} to {output}")
    if not tools:
        state.hint_when_unconfigured()


# -- demo --------------------------------------------------------------------------------------


@app.command(epilog=EXIT_CODES_HELP)
def demo(ctx: typer.Context) -> None:
    """A short guided tour on the bundled demo tools; needs no configuration.

    Lists the demo tools, calls a few of them (one per visualization type), shows the overflow
    rule and how errors reach the model, and prints an OpenAI export of one tool.
    """
    from .tour import run_tour

    run_tour(_state(ctx).out)


# -- entry point -------------------------------------------------------------------------------


def run() -> None:
    """Run the command line; user errors become an exit code and one line on stderr."""
    try:
        app()
    except (ToolgateError, CliUsageError, CliFailure) as exc:
        sys.exit(report(exc, make_console(stderr=True)))
