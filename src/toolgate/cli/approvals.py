"""``toolgate approvals`` and ``toolgate grants``: the pending queue and the "always allow" grants.

Requests and grants live in ``$TOOLGATE_HOME/toolgate.db`` (or the shared PostgreSQL state), so
a call left pending by one process (``toolgate serve``, or ``toolgate call`` exiting 4) is
decided by another (``toolgate approvals approve ID``), and grants survive restarts. A decision
is all these commands write: the agent's next call with the same arguments runs an approved
call, once. ``approve --run`` runs it here instead, which needs the tool itself (the same
``toolgate.yaml``, or the same ``--config``).
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import asyncio
import shlex
import time
from collections.abc import Mapping
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..approvals import ApprovalService
from ..gateway import Gateway
from ..model import ApprovalRequest, CallOutcome, Decision, Grant
from ..model.display import render_display
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError, report
from .options import CliState, print_json
from .outcome import print_outcome
from .prompt import (
    TerminalApprover,
    clean,
    current_user,
    format_expiry,
    format_time,
    print_confirmation,
    risk_style,
)

__all__ = [
    "approvals_app",
    "call_display",
    "current_user",
    "decide",
    "decide_at_terminal",
    "grants_app",
    "print_pending",
    "run_approved",
]

approvals_app = typer.Typer(
    help="The calls waiting for a person's approval: list them, show one, approve or deny it.\n\n"
    "A call that needs approval and was not decided at the terminal exits with code 4 and "
    "leaves its request here; repeat the same call after deciding to get its result.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)
grants_app = typer.Typer(
    help='The "always allow" grants: calls of a tool in a workspace that no longer ask.',
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)

_ID_HELP = "The approval request id (apr_…), as printed by 'toolgate call' or 'approvals list'."


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def _service(gateway: Gateway) -> ApprovalService:
    if gateway.approvals is None:  # the CLI always builds its gateway with the queue
        raise CliFailure("approvals are not enabled on this gateway")
    return gateway.approvals


def _command_prefix(state: CliState) -> str:
    if state.config_path is None:
        return "toolgate"
    return f"toolgate --config {shlex.quote(str(state.config_path))}"


def call_display(
    gateway: Gateway,
    tool_id: str,
    arguments: Mapping[str, Any],
    stored: str | None = None,
    *,
    agent: str | None = None,
) -> str | None:
    """The one-line display of a call (``Show Map Of "Cairo" At Zoom Level 12``): ``stored``
    (the request's own) when given, else rendered from the tool; ``None`` for an unknown tool,
    and for one ``agent`` may not see (the display would tell it the tool exists)."""
    if stored:
        return stored
    entry = gateway.registry.get(tool_id)
    if entry is None or not gateway.access.visible(entry.tool, agent):
        return None
    return render_display(entry.tool, arguments)


def _request_display(gateway: Gateway, request: ApprovalRequest) -> str | None:
    return call_display(gateway, request.tool_id, request.arguments, request.display)


# -- deciding ------------------------------------------------------------------------------------


def decide(
    gateway: Gateway,
    request_id: str,
    decision: Decision,
    *,
    by: str | None,
    message: str | None = None,
    grant_ttl: float | None = None,
) -> ApprovalRequest:
    """Record a decision and return the decided request; nothing runs here.

    The agent's next call with the same arguments runs an approved call (see
    :func:`run_approved` for running it here, when the person asks). Raises
    :class:`~toolgate.errors.ApprovalClosedError` for an unknown, decided or expired request.
    """
    # This process may read another version of the tool than the server that made the
    # request: a mismatch refuses the decision, it does not void the server's request.
    return _service(gateway).decide(
        request_id,
        decision,
        by=by,
        message=message,
        grant_ttl=grant_ttl,
        void_if_changed=False,
    )


def run_approved(gateway: Gateway, request_id: str, *, deliver: bool = False) -> CallOutcome:
    """Run an approved (or denied: its refusal) request in this process and return the outcome.

    Without ``deliver`` the outcome stays stored for the agent's retried call to collect; with
    it (the caller is the one waiting for the call) the request is closed.
    """
    service = _service(gateway)
    _check_runnable_here(gateway, service.get(request_id))
    outcome = asyncio.run(service.run(request_id))
    if deliver:
        service.collect(service.get(request_id))
    return outcome


def _check_runnable_here(gateway: Gateway, request: ApprovalRequest) -> None:
    """Refuse (before anything is decided) to run a request whose tool this gateway lacks."""
    if gateway.registry.get(request.tool_id) is None:
        raise CliFailure(
            f"the tool {request.tool_id} of request {request.id} is not declared here, so it "
            "cannot run here; run this where the toolgate.yaml that declares it is found (or "
            "pass --config), or leave out --run: the agent's next call runs it"
        )


def decide_at_terminal(
    gateway: Gateway, request: ApprovalRequest, console: Console, *, by: str | None
) -> CallOutcome:
    """Ask the person at the terminal (:class:`TerminalApprover`) and return the outcome: the
    person is the caller here, so an approved call runs now, in this process."""
    decision, message = TerminalApprover(console)(
        request, display=_request_display(gateway, request)
    )
    decide(gateway, request.id, decision, by=by, message=message)
    return run_approved(gateway, request.id, deliver=True)


# -- printing ------------------------------------------------------------------------------------


def print_pending(
    request: ApprovalRequest, console: Console, state: CliState, *, display: str | None = None
) -> None:
    """Print a request left pending by ``toolgate call`` (with the call's one-line
    ``display``), and how to decide it."""
    print_confirmation(request, console, display=display)
    console.print()
    prefix = _command_prefix(state)
    rows = (
        (f"{prefix} approvals approve {request.id}", "run it once, now"),
        (
            f"{prefix} approvals approve {request.id} --always",
            f"run it, and stop asking for {clean(request.tool_id)} in this workspace",
        ),
        (f"{prefix} approvals deny {request.id}", "refuse it (--message says why)"),
    )
    console.print(Text("Decide it with:", style="bold"))
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column(style="dim")
    for command, what in rows:
        grid.add_row(f"  {command}", what)
    console.print(grid)
    console.print(
        "Then repeat this 'toolgate call': an approved call runs then, once.", soft_wrap=True
    )


def _key(grant: Grant) -> str:
    return f"{grant.permission.type}:{grant.permission.key}"


# -- approvals -----------------------------------------------------------------------------------


@approvals_app.command("list", epilog=EXIT_CODES_HELP)
def list_requests(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the requests as JSON.")] = False,
) -> None:
    """List the requests waiting for a decision, oldest first: id, tool, title, risk,
    workspace, agent, when it was made and when it expires; below the table, each call's
    one-line display (e.g. 'Show Map Of "Cairo" At Zoom Level 12')."""
    state = _state(ctx)
    with state.open_gateway(demo_when_unconfigured=True) as gateway:
        pending = _service(gateway).pending()
        displays = {request.id: _request_display(gateway, request) for request in pending}
    if as_json:
        print_json([request.to_dict(displays[request.id]) for request in pending])
        return
    if not pending:
        state.out.print("No approval requests are pending.")
        return
    now = time.time()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("ID", no_wrap=True)
    table.add_column("Tool", no_wrap=True)
    for header in ("Title", "Risk", "Workspace", "Agent", "Requested", "Expires"):
        table.add_column(header, overflow="fold")
    for request in pending:
        table.add_row(
            Text(request.id, style="bold"),
            Text(clean(request.tool_id)),
            Text(clean(request.title)),
            Text(clean(request.risk), style=risk_style(request.risk)),
            Text(clean(request.workspace or "-")),
            Text(clean(request.agent or "-")),
            Text(format_time(request.created_at)),
            Text(format_expiry(request.expires_at, now, exact=False)),
        )
    state.out.print(table)
    noun = "request" if len(pending) == 1 else "requests"
    state.out.print(Text(f"{len(pending)} pending {noun}", style="dim"))
    # Each call's one-line display, unwrapped below the table: a narrow column would fold it.
    shown = [(request.id, displays[request.id]) for request in pending if displays[request.id]]
    if shown:
        state.out.print()
        state.out.print(Text("Calls:", style="bold"))
        for request_id, display in shown:
            state.out.print(Text(f"  {request_id}  {clean(display or '')}"), soft_wrap=True)


@approvals_app.command("show", epilog=EXIT_CODES_HELP)
def show_request(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    as_json: Annotated[bool, typer.Option("--json", help="Print the request as JSON.")] = False,
) -> None:
    """Show one request (any status): the confirmation with the call's one-line display, the
    exact arguments, the decision, and its log (who asked, who decided, what ran)."""
    state = _state(ctx)
    with state.open_gateway(demo_when_unconfigured=True) as gateway:
        service = _service(gateway)
        request = service.get(request_id)
        events = service.events(request_id)
        display = _request_display(gateway, request)
    if as_json:
        print_json({**request.to_dict(display), "events": events})
        return
    out = state.out
    print_confirmation(request, out, heading=f"{request.id}: ", display=display)
    out.print(Text.assemble(("Status: ", "bold"), str(request.status)))
    if request.decision is not None:
        note = f": {clean(request.decision_message)}" if request.decision_message else ""
        out.print(
            Text.assemble(
                ("Decision: ", "bold"),
                f"{request.decision} by {clean(request.decided_by or '-')} at "
                f"{format_time(request.decided_at)}{note}",
            ),
            soft_wrap=True,
        )
    if events:
        out.print(Text("Log:", style="bold"))
        for event in events:
            actor = event.get("actor")
            detail = event.get("detail")
            if isinstance(detail, dict):
                detail = ", ".join(f"{key}: {value}" for key, value in detail.items())
            out.print(
                Text(
                    f"  {format_time(event.get('at'))}  {event.get('kind')}"
                    + (f" by {clean(str(actor))}" if actor else "")
                    + (f" ({clean(str(detail))})" if detail else "")
                ),
                soft_wrap=True,
            )


@approvals_app.command("approve", epilog=EXIT_CODES_HELP)
def approve_request(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    always: Annotated[
        bool,
        typer.Option(
            "--always",
            help="Also store a grant: calls of this tool (with this permission key) in this "
            "workspace no longer ask, until the grant is revoked or the tool changes.",
        ),
    ] = False,
    by: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Who approves (default: your OS user name)."),
    ] = None,
    message: Annotated[
        str | None, typer.Option("--message", "-m", metavar="M", help="A note kept with it.")
    ] = None,
    expires_after: Annotated[
        float | None,
        typer.Option(
            "--expires-after",
            metavar="SECONDS",
            help="With --always: the grant expires after this many seconds (default: never).",
        ),
    ] = None,
    run: Annotated[
        bool,
        typer.Option(
            "--run",
            help="Also run the call now, in this command, and print its outcome (the tool must "
            "be declared here: same toolgate.yaml); the agent's retry then gets that outcome "
            "without running it again.",
        ),
    ] = False,
) -> None:
    """Approve a pending request. Only the decision is recorded: the agent's next call with
    the same arguments runs it, once, as that agent — on a running 'toolgate serve' too.

    With --run the call runs here instead and its outcome is printed. Exits 1 when the request
    is unknown, already decided or expired, or (with --run) when the call ended in an error.
    """
    if expires_after is not None and (not always or expires_after <= 0):
        raise CliUsageError("--expires-after needs --always and a positive number of seconds")
    state = _state(ctx)
    who = by or current_user()
    decision = Decision.ALWAYS if always else Decision.APPROVE
    with state.open_gateway(demo_when_unconfigured=True) as gateway:
        if run:  # checked first: a refused --run must leave the request undecided
            _check_runnable_here(gateway, _service(gateway).get(request_id))
        decided = decide(
            gateway, request_id, decision, by=who, message=message, grant_ttl=expires_after
        )
        outcome = run_approved(gateway, request_id) if run else None
        grant = next((g for g in _service(gateway).grants() if g.approval_id == request_id), None)
    what = "Approved" if not always else "Always allowed"
    agent = f"agent {clean(decided.agent)!r}" if decided.agent else "the agent"
    after = (
        "; it ran now, and the agent's retry gets this outcome."
        if outcome is not None
        else f". Nothing ran here: the next call of {clean(decided.tool_id)} with the same "
        f"arguments by {agent} runs it, once."
    )
    state.err.print(
        Text.assemble(
            (f"{what} ", "bold green"), f"{request_id} ({clean(decided.tool_id)}) by {who}{after}"
        ),
        soft_wrap=True,
    )
    if grant is not None:
        state.err.print(
            f"Grant {grant.id}: calls of {grant.tool_id} in {grant.workspace or '(no workspace)'} "
            f"no longer ask ({_command_prefix(state)} grants revoke {grant.id} undoes it).",
            soft_wrap=True,
        )
    if outcome is None:
        return
    if outcome.ok:
        print_outcome(outcome, state.out)
    raise typer.Exit(report(outcome, state.err))


@approvals_app.command("deny", epilog=EXIT_CODES_HELP)
def deny_request(
    ctx: typer.Context,
    request_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    message: Annotated[
        str | None,
        typer.Option(
            "--message", "-m", metavar="M", help="Why; the agent reads it with the refusal."
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(metavar="NAME", help="Who denies (default: your OS user name)."),
    ] = None,
) -> None:
    """Deny a pending request: the call does not run, and the agent's retry gets
    user_rejection (with the message). Exits 1 when the request is unknown, already decided or
    expired."""
    state = _state(ctx)
    who = by or current_user()
    with state.open_gateway(demo_when_unconfigured=True) as gateway:
        decided = decide(gateway, request_id, Decision.DENY, by=who, message=message)
    state.out.print(
        Text.assemble(
            ("Denied ", "bold red"),
            f"{request_id} ({clean(decided.tool_id)}) by {who}. The agent's retry gets "
            "user_rejection.",
        ),
        soft_wrap=True,
    )


# -- grants --------------------------------------------------------------------------------------


@grants_app.command("list", epilog=EXIT_CODES_HELP)
def list_grants(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the grants as JSON.")] = False,
) -> None:
    """List the live grants, newest first: id, tool, workspace, permission key, who granted it,
    when, and when it expires."""
    state = _state(ctx)
    with state.open_gateway(demo_when_unconfigured=True) as gateway:
        grants = _service(gateway).grants()
    if as_json:
        print_json([grant.to_dict() for grant in grants])
        return
    if not grants:
        state.out.print("No grants.")
        return
    now = time.time()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("ID", no_wrap=True)
    for header in ("Tool", "Workspace", "Key", "Granted by", "Granted at", "Expires"):
        table.add_column(header, overflow="fold")
    for grant in grants:
        table.add_row(
            Text(grant.id, style="bold"),
            Text(clean(grant.tool_id)),
            Text(clean(grant.workspace or "-")),
            Text(clean(_key(grant))),
            Text(clean(grant.granted_by or "-")),
            Text(format_time(grant.granted_at)),
            Text(format_expiry(grant.expires_at, now, exact=False)),
        )
    state.out.print(table)
    noun = "grant" if len(grants) == 1 else "grants"
    state.out.print(Text(f"{len(grants)} {noun}", style="dim"))


@grants_app.command("revoke", epilog=EXIT_CODES_HELP)
def revoke_grant(
    ctx: typer.Context,
    grant_id: Annotated[
        str, typer.Argument(metavar="ID", help="The grant id (grt_…), from 'grants list'.")
    ],
) -> None:
    """Revoke a grant: calls it covered ask again. Exits 1 when no live grant has this id."""
    state = _state(ctx)
    with state.open_gateway(demo_when_unconfigured=True) as gateway:
        revoked = _service(gateway).revoke(grant_id)
    if not revoked:
        raise CliFailure(f"no live grant {grant_id!r} (see 'toolgate grants list')")
    state.out.print(
        Text.assemble(("Revoked ", "bold"), f"{grant_id}: those calls ask again."),
        soft_wrap=True,
    )
