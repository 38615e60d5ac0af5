"""``toolgate get tools`` (kubectl style) and ``toolgate secrets set|delete|list``.

``get tools`` lists every tool — Kubernetes-style resources and every other tool, since all have a
status — with NAME, NAMESPACE, TYPE, PHASE, CALLS(7d) and FAILURE RATE(7d), taken from the audit
log. ``-o yaml`` prints each tool as a ``kind: Tool`` resource with its ``status`` filled in (a
multi-document stream that ``toolgate validate`` accepts back), ``-o json`` the same resources as
one ``kind: List`` object.

``secrets`` manages the values ``secretRef`` names point to (REST bearer tokens, MCP server
tokens): they live in the secret store (the OS keyring, or a file only the user can read), never
in a configuration file.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..formats.resource.parse import tool_document
from ..health import Phase, ToolStatus
from ..secrets import GLOBAL_SCOPE
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError
from .folders import print_diagnostics
from .options import CliState, print_json
from .prompt import clean

if TYPE_CHECKING:
    from ..gateway import Gateway
    from ..secrets import SecretStore

__all__ = ["get_app", "register", "secrets_app"]

get_app = typer.Typer(
    help="Show resources kubectl style: 'toolgate get tools'.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)
secrets_app = typer.Typer(
    help="Set, delete and list the secrets that resources name with secretRef (REST bearer "
    "tokens, MCP server tokens). Values are read without echo and kept in the secret store, "
    "never in a configuration file.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)

_OUTPUTS = ("table", "yaml", "json")
_SECRET_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_TYPES = {"python": "function", "rest": "rest", "mcp": "mcp", "os": "os", "script": "script"}


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


# -- get tools ---------------------------------------------------------------------------------


def _status_fields(status: ToolStatus | None) -> dict[str, Any]:
    if status is None:
        return {}
    fields: dict[str, Any] = {
        "phase": str(status.phase),
        "totalCalls7d": status.total_calls_7d,
        "failureRate7d": round(status.failure_rate_7d, 4),
    }
    if status.reason:
        fields["reason"] = status.reason
    return fields


def _print_table(rows: Sequence[tuple[str, str, str, ToolStatus]], state: CliState) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("NAME", "NAMESPACE", "TYPE", "PHASE", "CALLS(7d)", "FAILURE RATE(7d)"):
        table.add_column(header, overflow="fold")
    styles = {
        Phase.READY: "green",
        Phase.DEGRADED: "yellow",
        Phase.UNAVAILABLE: "red",
        Phase.FAILED: "bold red",
    }
    for name, namespace, kind, status in rows:
        table.add_row(
            Text(clean(name), style="bold"),
            Text(clean(namespace)),
            Text(kind),
            Text(str(status.phase), style=styles.get(status.phase, "")),
            Text(str(status.total_calls_7d)),
            Text(f"{status.failure_rate_7d:.1%}"),
        )
    state.out.print(table)
    for name, namespace, _kind, status in rows:
        if status.phase is not Phase.READY and status.reason:
            label = name if namespace == "-" else f"{namespace}:{name}"
            state.out.print(
                Text.assemble((f"{clean(label)}: {status.phase}: ", "red"), clean(status.reason)),
                soft_wrap=True,
            )


def _dump_yaml(documents: list[dict[str, Any]]) -> str:
    import yaml

    text: str = yaml.safe_dump_all(
        documents, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100
    )
    return text


def get_tools(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None,
        typer.Argument(metavar="[NAME]...", help="Only these tools (name or namespace:name)."),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only tools in this namespace.")
    ] = None,
    output: Annotated[
        str,
        typer.Option("--output", "-o", metavar="FORMAT", help="table (default), yaml or json."),
    ] = "table",
) -> None:
    """List every tool with its status: NAME, NAMESPACE, TYPE (function, rest, mcp, os, or
    script for tool folders), PHASE (Ready, Degraded, Unavailable, Failed), CALLS(7d) and
    FAILURE RATE(7d) from the audit log.

    Declarations that do not load are listed as Failed, by file. '-o yaml' prints each tool as a
    'kind: Tool' resource with its status (phase, totalCalls7d, failureRate7d) — a stream
    'toolgate validate' accepts back; '-o json' prints them as one 'kind: List' object. Exits 1
    when a NAME matches no tool.
    """
    if output not in _OUTPUTS:
        raise CliUsageError(f"--output must be one of {', '.join(_OUTPUTS)}, not {output!r}")
    state = _state(ctx)
    wanted = set(names or ())
    with state.open_gateway(approver=None, audit="read") as gateway:
        entries = [
            entry
            for entry in gateway.entries()
            if (namespace is None or entry.tool.namespace == namespace)
            and (not wanted or entry.tool.id in wanted or entry.tool.name in wanted)
        ]
        statuses = {status.tool_id: status for status in gateway.statuses()}
        diagnostics = gateway.diagnostics()
    found = {entry.tool.id for entry in entries} | {entry.tool.name for entry in entries}
    missing = sorted(wanted - found)
    if missing:
        raise CliFailure(f"no tool named {', '.join(missing)}")
    if output == "table":
        rows = [
            (entry.tool.name, entry.tool.namespace, _TYPES.get(str(entry.tool.kind), "-"), status)
            for entry in entries
            if (status := statuses.get(entry.tool.id)) is not None
        ]
        if not wanted and namespace is None:
            rows.extend(
                (tool_id, "-", "-", status)
                for tool_id, status in statuses.items()
                if status.phase is Phase.FAILED
            )
        if rows:
            _print_table(rows, state)
        else:
            state.out.print("No tools found.")
            state.hint_when_unconfigured()
        if diagnostics and not wanted:
            state.out.print()
            noun = "problem" if len(diagnostics) == 1 else "problems"
            print_diagnostics(diagnostics, state.out, heading=f"{len(diagnostics)} {noun}:")
        return
    documents = [
        tool_document(entry.tool, _status_fields(statuses.get(entry.tool.id))) for entry in entries
    ]
    if output == "json":
        print_json({"apiVersion": "v1", "kind": "List", "items": documents})
    else:
        sys.stdout.write(_dump_yaml(documents))
        sys.stdout.flush()
    if diagnostics and not wanted:
        print_diagnostics(diagnostics, state.err)


# -- secrets -----------------------------------------------------------------------------------


def _check_name(name: str) -> str:
    if not _SECRET_NAME.match(name):
        raise CliUsageError(
            f"NAME: {name!r} is not a secret name: use letters, digits, '.', '_' and '-' "
            "(for example zendesk-api-token), as in secretRef.name"
        )
    return name


def _store(gateway: "Gateway") -> "SecretStore":
    store = gateway.secrets.store
    if store is None:
        raise CliFailure("this gateway has no secret store to keep secrets in")
    return store


def _referencing(gateway: "Gateway") -> dict[str, list[str]]:
    """Secret name → the ids of the tools that need it (global scope only)."""
    used: dict[str, list[str]] = {}
    for entry in gateway.entries():
        tool = entry.tool
        if tool.capability is None:
            for name in tool.secrets:
                used.setdefault(name, []).append(tool.id)
    return used


def _read_value(name: str) -> str:
    if sys.stdin.isatty():
        value: str = typer.prompt(
            f"Value of {name}", hide_input=True, confirmation_prompt=True, show_default=False
        )
    else:
        # Piped (echo "$TOKEN" | toolgate secrets set NAME): one line, its line break removed.
        value = sys.stdin.readline().rstrip("\r\n")
    if not value:
        raise CliUsageError(f"no value given for {name}; nothing was stored")
    return value


@secrets_app.command("set", epilog=EXIT_CODES_HELP)
def set_secret(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The secretRef name.")],
) -> None:
    """Set the secret NAME (what a resource's 'secretRef: {name: NAME}' reads). The value is
    read without echo, twice, at a terminal, or as one line from standard input when it is not
    one. Tools that were unavailable for want of it can run from the next command on (a
    running server notices within its reload interval)."""
    _check_name(name)
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        store = _store(gateway)
        used = _referencing(gateway).get(name, [])
        value = _read_value(name)
        store.set(GLOBAL_SCOPE, name, value)
    state.out.print(Text(f"Set {name} in {store.description}."), soft_wrap=True)
    if not used:
        state.err.print(
            Text(f"warning: no loaded resource references the secret {name!r} (yet)."),
            soft_wrap=True,
        )


@secrets_app.command("delete", epilog=EXIT_CODES_HELP)
def delete_secret(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The secretRef name.")],
) -> None:
    """Delete the secret NAME. Tools that need it become unavailable. Exits 1 when it is not
    set."""
    _check_name(name)
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        store = _store(gateway)
        deleted = store.delete(GLOBAL_SCOPE, name)
    if not deleted:
        raise CliFailure(f"the secret {name!r} is not set in {store.description}")
    state.out.print(Text(f"Deleted {name} from {store.description}."), soft_wrap=True)


@secrets_app.command("list", epilog=EXIT_CODES_HELP)
def list_secrets(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List the secrets the loaded resources reference (and any others the store holds): name,
    whether it is set, and the tools that need it. Values are never shown."""
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        store = _store(gateway)
        used = _referencing(gateway)
        lister = getattr(store, "names", None)
        stored = set(lister(GLOBAL_SCOPE)) if callable(lister) else set()
        names = sorted(set(used) | stored)
        rows = [(name, bool(store.get(GLOBAL_SCOPE, name)), used.get(name, [])) for name in names]
    if as_json:
        secrets = [{"name": name, "set": is_set, "tools": tools} for name, is_set, tools in rows]
        print_json({"store": store.description, "secrets": secrets})
        return
    if not rows:
        state.out.print("No secrets are referenced or set.")
    else:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for header in ("NAME", "SET", "USED BY"):
            table.add_column(header, overflow="fold")
        for name, is_set, tools in rows:
            table.add_row(
                Text(name, style="bold"),
                Text("yes", style="green") if is_set else Text("no", style="red"),
                Text(", ".join(tools) or "-"),
            )
        state.out.print(table)
    state.out.print(Text(f"Secrets are kept in {store.description}.", style="dim"), soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add ``toolgate get`` and ``toolgate secrets`` to ``app``."""
    get_app.command("tools", epilog=EXIT_CODES_HELP)(get_tools)
    get_app.command("tool", hidden=True)(get_tools)
    app.add_typer(get_app, name="get")
    app.add_typer(secrets_app, name="secrets")
