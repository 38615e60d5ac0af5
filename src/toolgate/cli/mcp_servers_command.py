"""``toolgate mcp-servers``: review and accept the tools of upstream MCP servers.

An upstream server may change a tool after it was accepted, add one, or describe one with hidden
text; such a tool is *held* (unavailable) until an operator accepts it (see
:mod:`toolgate.formats.mcp_server.pinning`).

* ``mcp-servers list``: every declared server, whether it is connected, how many tools it lists
  and how many are held;
* ``mcp-servers show SERVER``: each of its tools — accepted or held and why, what changed, what
  hides in its texts, and its description and schema with every invisible character escaped;
* ``mcp-servers accept SERVER [TOOL…]``: accept the definitions the server lists now (every held
  tool when no TOOL is named). ``--hash`` (one per TOOL) accepts only the definition reviewed
  and refuses one that changed since. Without ``--hash`` the command shows each definition it is
  about to accept and asks for confirmation on a terminal; without a terminal it needs ``--yes``
  (accept what it shows) — it never pins, unseen, whatever the server lists at that moment.

Exit codes: 0 done, 1 an unknown server or tool, a server that has not listed its tools, or a
definition that changed since it was reviewed; 3 a configuration error.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import json
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..formats.mcp_server.pinning import ToolReview
from ..formats.mcp_server.source import AcceptError
from ..gateway import Gateway
from ..model.hidden_text import escape_hidden
from .errors import EXIT_CODES_HELP, CliFailure
from .options import CliState, print_json
from .prompt import clean

__all__ = ["register", "review_row"]

mcp_servers_app = typer.Typer(
    help="Review and accept the tools of upstream MCP servers (MCPServer resources): a new or "
    "changed tool, or one whose texts hide something, is held until an operator accepts it.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)

_JSON = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def review_row(review: ToolReview) -> dict[str, Any]:
    """One tool's review as JSON (``print_json`` escapes hidden characters)."""
    return review.to_dict()


def _reviews(gateway: Gateway, server: str) -> dict[str, ToolReview]:
    try:
        return gateway.review_mcp_server(server)
    except AcceptError as exc:
        raise CliFailure(str(exc)) from None


@mcp_servers_app.command("list", epilog=EXIT_CODES_HELP)
def list_servers(ctx: typer.Context, as_json: _JSON = False) -> None:
    """Every declared MCP server: connected or not, its tools, and how many are held."""
    state = _state(ctx)
    rows: list[dict[str, Any]] = []
    with state.open_gateway(approver=None, audit="off") as gateway:
        for name, (_source, servers) in sorted(gateway.mcp_servers().items()):
            rows.append(servers.summary(name))
    if as_json:
        print_json(rows)
        return
    if not rows:
        state.out.print("No MCP servers are declared.")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for column in ("SERVER", "PIN", "CONNECTED", "TOOLS", "HELD", "FLAGGED"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            Text(clean(row["server"])),
            row["pin"],
            "yes" if row["connected"] else "no",
            str(row["tools"]),
            Text(clean(", ".join(row["held"]) or "-"), style="red" if row["held"] else ""),
            Text(clean(", ".join(row["flagged"]) or "-")),
        )
    state.out.print(table)
    for row in rows:
        if row["problem"]:
            state.err.print(Text(f"{clean(row['server'])}: {clean(row['problem'])}"))


@mcp_servers_app.command("show", epilog=EXIT_CODES_HELP)
def show_server(
    ctx: typer.Context,
    server: Annotated[str, typer.Argument(help="The MCPServer's metadata.name.")],
    as_json: _JSON = False,
) -> None:
    """Each tool of SERVER: accepted or held and why, what changed since it was accepted, and
    what hides in its texts — every invisible or bidirectional character shown escaped."""
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        reviews = _reviews(gateway, server)
    if as_json:
        print_json([review_row(review) for review in reviews.values()])
        return
    for review in reviews.values():
        _print_review(state.out, server, review)


def _print_review(out: Console, server: str, review: ToolReview) -> None:
    """One tool's review as text: status, hash, what changed or hides, its texts escaped."""
    style = "green" if review.hold is None else "red"
    out.print(
        Text.assemble(
            (clean(review.name), "bold"),
            "  ",
            (review.status, style),
            f"  {review.definition_hash}",
        ),
        soft_wrap=True,
    )
    ambiguous = review.hold is not None and review.hold.kind == "ambiguous"
    if review.hold is not None and review.hold.changes and not ambiguous:
        out.print(Text(f"  changed: {clean(', '.join(review.hold.changes))}"), soft_wrap=True)
    for finding in review.findings:
        out.print(Text(f"  flagged: {clean(finding)}", style="yellow"), soft_wrap=True)
    description = review.definition.get("description")
    if isinstance(description, str):
        out.print(Text("  description: " + escape_hidden(description)), soft_wrap=True)
    schema = review.definition.get("inputSchema")
    if schema is not None:
        text = json.dumps(schema, ensure_ascii=False, sort_keys=True)
        out.print(Text("  input schema: " + escape_hidden(text)), soft_wrap=True)
    if review.hold is not None and ambiguous:
        out.print(
            Text(f"  cannot be accepted: {clean(review.hold.changes[0])}", style="red"),
            soft_wrap=True,
        )
    elif review.hold is not None:
        out.print(
            Text(
                f"  accept with: toolgate mcp-servers accept {clean(server)} "
                f"{clean(review.name)} --hash {review.definition_hash}",
                style="dim",
            ),
            soft_wrap=True,
        )
    out.print()


@mcp_servers_app.command("accept", epilog=EXIT_CODES_HELP)
def accept(
    ctx: typer.Context,
    server: Annotated[str, typer.Argument(help="The MCPServer's metadata.name.")],
    tools: Annotated[
        list[str] | None,
        typer.Argument(help="Tool names on the server (default: every held tool)."),
    ] = None,
    hashes: Annotated[
        list[str] | None,
        typer.Option(
            "--hash",
            metavar="SHA256",
            help="The definition hash you reviewed ('mcp-servers show'), once per TOOL in "
            "order: refused if the server changed the tool since.",
        ),
    ] = None,
    by: Annotated[
        str | None, typer.Option("--by", metavar="NAME", help="Who accepts (default: you).")
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Without --hash: accept the definitions shown without asking (needed when "
            "not on a terminal).",
        ),
    ] = False,
    as_json: _JSON = False,
) -> None:
    """Accept the definitions SERVER lists now for TOOL… (every held tool when none is
    named): they are pinned and served until the server changes them again. Give the hash
    you reviewed with --hash; without it, the definitions are shown and, on a terminal, you
    are asked to confirm (elsewhere --yes is needed)."""
    from .approvals import current_user

    state = _state(ctx)
    names = list(tools or [])
    expected: dict[str, str] | None = None
    if hashes:
        if len(hashes) != len(names):
            raise CliFailure("give one --hash per TOOL, in the same order")
        expected = dict(zip(names, hashes, strict=True))
    with state.open_gateway(approver=None, audit="off") as gateway:
        if expected is None:
            names, expected = _confirm(state, gateway, server, names, yes=yes, as_json=as_json)
            if not names:
                state.out.print(f"Nothing to accept: no tool of {clean(server)} is held.")
                return
        try:
            accepted = gateway.accept_mcp_tools(
                server, names, by=by or current_user(), expected=expected
            )
        except AcceptError as exc:
            raise CliFailure(str(exc)) from None
    if as_json:
        print_json([review_row(review) for review in accepted])
        return
    if not accepted:
        state.out.print(f"Nothing to accept: no tool of {clean(server)} is held.")
        return
    for review in accepted:
        flagged = (
            " (flagged: its texts hide something; accepted as reviewed)" if review.findings else ""
        )
        state.out.print(
            Text(
                f"accepted {clean(server)} {clean(review.name)} {review.definition_hash}{flagged}"
            ),
            soft_wrap=True,
        )


def _confirm(
    state: CliState,
    gateway: Gateway,
    server: str,
    names: list[str],
    *,
    yes: bool,
    as_json: bool,
) -> tuple[list[str], dict[str, str]]:
    """Without ``--hash``: show the definitions about to be accepted and have them confirmed
    (``--yes``, or an answer on a terminal); returns the tools and the hashes shown, so what is
    pinned is what was shown. Raises :class:`CliFailure` when not confirmed."""
    import sys

    reviews = _reviews(gateway, server)
    if names:
        chosen = [reviews[name] for name in dict.fromkeys(names) if name in reviews]
        if len(chosen) != len(dict.fromkeys(names)):
            return names, {}  # accept() names the unknown tools
    else:
        chosen = [
            review
            for review in reviews.values()
            if review.hold is not None and review.hold.kind != "ambiguous"
        ]
    if not chosen:
        return [], {}
    for review in chosen:
        # With --json, stdout is for the JSON: the definitions go to stderr.
        _print_review(state.err if as_json else state.out, server, review)
    if not yes:
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise CliFailure(
                "not accepted: give the hash you reviewed with --hash (once per TOOL; see "
                f"'toolgate mcp-servers show {server}'), or --yes to accept the definitions "
                "shown above"
            )
        try:
            answer = input("Accept these definitions? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise CliFailure("not accepted")
    return [review.name for review in chosen], {
        review.name: review.definition_hash for review in chosen
    }


def register(app: typer.Typer) -> None:
    """Add ``toolgate mcp-servers``."""
    app.add_typer(mcp_servers_app, name="mcp-servers")
