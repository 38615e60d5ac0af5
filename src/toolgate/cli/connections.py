"""``toolgate connect``, ``toolgate disconnect`` and ``toolgate connections``: the connections of
capabilities (their ``requiredPreferenceNames`` secrets and ``publicPreferenceNames``
settings).

``connect ID`` asks for each secret with hidden input (never echoed; Enter keeps a value already
set) and each public setting (the current value as default), stores them in the secret store, and
prints whether the capability is now connected. Without a terminal, ``--stdin`` reads
``NAME=VALUE`` lines instead; ``--set NAME=VALUE`` gives a public setting (never a secret: the
command line shows in process lists and shell history). ``disconnect ID`` removes both.
``connections`` lists every configured capability: connected or not, which secrets are missing
(names, never values), its settings, and where secrets are stored.

The store is the OS keyring when one works, else ``$TOOLGATE_HOME/secrets/secrets.json``
(``TOOLGATE_SECRET_STORE=keyring|file`` forces one). Exit codes: 0 done, 1 an unknown capability
id or a capability still not connected, 2 a usage error (no terminal, a bad ``--set``/``--stdin``
line), 3 a configuration error (including a secret store that cannot be written).
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import sys
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..formats._common.diagnostics import Severity
from ..formats.capability.connection_status import connection_status
from ..formats.capability.source import CapabilitySource, LoadedCapability
from ..gateway import Gateway
from ..secrets import SecretStore, store_names, store_problem
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError
from .folders import print_diagnostics
from .options import CliState, print_json

__all__ = ["register"]

_ID_HELP = "The capability id (aiCapability.id), as listed by 'toolgate connections'."


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def _capabilities(gateway: Gateway) -> list[tuple[CapabilitySource, LoadedCapability]]:
    return [
        (source, capability)
        for source in gateway.declarations.sources
        if isinstance(source, CapabilitySource)
        for capability in source.capabilities
    ]


def _find(
    gateway: Gateway, capability_id: str, state: CliState
) -> tuple[CapabilitySource, LoadedCapability]:
    found = _capabilities(gateway)
    for source, capability in found:
        if capability.manifest.id == capability_id:
            return source, capability
    roots = [
        source.path if source.path.is_dir() else source.path.parent
        for source in gateway.declarations.sources
        if isinstance(source, CapabilitySource)
    ]
    problems = [
        d
        for d in gateway.declarations.diagnostics()
        if d.severity is Severity.ERROR and any(Path(d.path).is_relative_to(r) for r in roots)
    ]
    print_diagnostics(problems, state.err, heading="Capability manifests that did not load:")
    known = ", ".join(sorted(c.manifest.id for _, c in found))
    if not known:
        raise CliFailure(
            f"unknown capability {capability_id!r}: no capability is configured (list capability "
            "manifests under 'sources:' in toolgate.yaml)"
        )
    raise CliFailure(f"unknown capability {capability_id!r}; known: {known}")


def _store(gateway: Gateway) -> SecretStore:
    store = gateway.secrets.store
    if store is None:  # build_gateway always gives one; a hand-built gateway may not
        raise CliFailure("this gateway has no secret store")
    return store


def _where(store: SecretStore) -> str:
    """``Secrets are stored in …; chosen because ….``"""
    reason = getattr(store, "reason", None)
    why = f"; chosen because {reason}" if isinstance(reason, str) and reason else ""
    return f"Secrets are stored in {store.description}{why}."


# -- values from the command line, stdin or the terminal ----------------------------------------


def _pair(text: str, where: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise CliUsageError(f"{where}: expected NAME=VALUE, got {text.split('=')[0]!r}…")
    return name.strip(), value


def _check_name(name: str, capability: LoadedCapability, where: str) -> None:
    manifest = capability.manifest
    known = (*manifest.required_preferences, *manifest.public_preferences)
    if name not in known:
        raise CliUsageError(
            f"{where}: {manifest.id} has no preference {name!r}; its preferences are "
            f"{', '.join(known) or 'none'}"
        )


def _from_options(settings: list[str], capability: LoadedCapability) -> dict[str, str]:
    values: dict[str, str] = {}
    for text in settings:
        name, value = _pair(text, "--set")
        _check_name(name, capability, "--set")
        if name in capability.manifest.required_preferences:
            raise CliUsageError(
                f"--set: {name} is a secret: enter it at the prompt, or pipe it with --stdin, "
                "never on the command line (process lists and shell history would show it)"
            )
        values[name] = value
    return values


def _from_stdin(capability: LoadedCapability) -> dict[str, str]:
    values: dict[str, str] = {}
    for number, line in enumerate(sys.stdin.read().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, value = _pair(line, f"standard input, line {number}")
        _check_name(name, capability, f"standard input, line {number}")
        values[name] = value
    return values


def _ask(
    capability: LoadedCapability, store: SecretStore, given: dict[str, str], state: CliState
) -> dict[str, str]:
    """Prompt for each secret (hidden) and each public setting not given already."""
    manifest = capability.manifest
    values = dict(given)
    state.out.print(Text(f"Connecting {manifest.title} ({manifest.id})", style="bold"))
    for name in manifest.required_preferences:
        if name in values:
            continue
        is_set = bool(store.get(manifest.id, name))
        note = "secret, input hidden" + ("; Enter keeps the current value" if is_set else "")
        while True:
            value = click.prompt(
                f"{name} ({note})", hide_input=True, default="", show_default=False
            )
            if value or is_set:
                break
            state.err.print(Text(f"{name} is required to connect {manifest.title}."))
        if value:
            values[name] = value
    for name in manifest.public_preferences:
        if name in values:
            continue
        current = store.get(manifest.id, name)
        values[name] = click.prompt(
            f"{name} (setting{'' if current else '; Enter leaves it unset'})",
            default=current or "",
            show_default=bool(current),
        )
    return values


# -- commands -------------------------------------------------------------------------------------


def _status_line(capability: LoadedCapability, source: CapabilitySource) -> Text:
    manifest = capability.manifest
    connection = source.connection(manifest.id) or capability.connection
    if connection.connected:
        tools = ", ".join(capability.tool_ids) or "none loaded"
        return Text.assemble(
            ("connected", "bold green"),
            f": {manifest.title} ({manifest.id}); tools available: {tools}",
        )
    return Text.assemble(("not connected", "bold red"), f": {connection.reason}")


def connect(
    ctx: typer.Context,
    capability_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="NAME=VALUE",
            help="A public setting (repeatable). Secrets are never accepted here.",
        ),
    ] = None,
    from_stdin: Annotated[
        bool,
        typer.Option(
            "--stdin",
            help="Read NAME=VALUE lines (secrets and settings) from standard input instead of "
            "prompting; for scripts without a terminal.",
        ),
    ] = False,
) -> None:
    """Connect a capability: store its secrets (asked with hidden input) and public settings,
    then show whether its tools are available."""
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        source, capability = _find(gateway, capability_id, state)
        store = _store(gateway)
        manifest = capability.manifest
        values = _from_options(settings or [], capability)
        if not from_stdin and not sys.stdin.isatty():
            first = (*manifest.required_preferences, *manifest.public_preferences, "NAME")[0]
            raise CliUsageError(
                "connect asks for secrets at a terminal, and standard input is not one; pipe "
                f"NAME=VALUE lines with --stdin instead (for example: printf '{first}=%s\\n' "
                f'"$VALUE" | toolgate connect {manifest.id} --stdin)'
            )
        if from_stdin:
            values.update(_from_stdin(capability))
            missing = [
                name
                for name in manifest.required_preferences
                if not values.get(name) and not store.get(manifest.id, name)
            ]
            if missing:
                raise CliFailure(
                    f"{manifest.id} needs {', '.join(missing)}: give each as NAME=VALUE on "
                    "standard input"
                )
        else:
            values = _ask(capability, store, values, state)
        # Everything was asked before anything is stored: an interrupted prompt changes nothing.
        for name, value in values.items():
            if value:
                store.set(manifest.id, name, value)
            elif name in manifest.public_preferences:
                store.delete(manifest.id, name)
        gateway.declarations.reload(source)
        reloaded = next(c for c in source.capabilities if c.manifest.id == manifest.id)
        state.out.print(_status_line(reloaded, source), soft_wrap=True)
        state.out.print(Text(_where(store)), soft_wrap=True)
        if not reloaded.connection.connected:
            raise CliFailure(f"{manifest.id} is not connected")


def disconnect(
    ctx: typer.Context,
    capability_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
) -> None:
    """Disconnect a capability: remove its secrets and public settings; its tools become
    unavailable."""
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        _, capability = _find(gateway, capability_id, state)
        store = _store(gateway)
        manifest = capability.manifest
        names = dict.fromkeys(
            [
                *manifest.required_preferences,
                *manifest.public_preferences,
                *store_names(store, manifest.id),
            ]
        )
        removed = [name for name in names if store.delete(manifest.id, name)]
    if not removed:
        state.out.print(
            Text(f"{manifest.title} ({manifest.id}) was not connected; nothing to remove."),
            soft_wrap=True,
        )
        return
    state.out.print(
        Text(
            f"Disconnected {manifest.title} ({manifest.id}): removed {', '.join(removed)} from "
            f"{store.description}. Its tools are unavailable until you connect it again."
        ),
        soft_wrap=True,
    )


def _row(
    source: CapabilitySource, capability: LoadedCapability, store: SecretStore
) -> dict[str, Any]:
    return {
        **connection_status(source, capability, store),
        "manifest": str(capability.manifest.path),
    }


def connections(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False,
) -> None:
    """List every configured capability: connected or not, the secrets it is missing (names,
    never values), its public settings, its tools, and where secrets are stored."""
    state = _state(ctx)
    with state.open_gateway(approver=None, audit="off") as gateway:
        found = _capabilities(gateway)
        store = gateway.secrets.store
        rows = [] if store is None else [_row(s, c, store) for s, c in found]
        where = None if store is None else _where(store)
        problem = store_problem(store)
    if as_json:
        print_json(
            {
                "capabilities": rows,
                "secret_store": {"description": where, "problem": problem},
            }
        )
        return
    if not rows:
        state.out.print(
            "No capabilities are configured (list capability manifests under 'sources:' in "
            "toolgate.yaml)."
        )
    else:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False)
        for column in ("ID", "Title", "Status", "Missing secrets", "Settings", "Tools"):
            table.add_column(column, overflow="fold")
        for row in rows:
            settings = ", ".join(
                f"{name}={value}" if value else f"{name} (not set)"
                for name, value in row["settings"].items()
            )
            table.add_row(
                Text(row["id"]),
                Text(row["title"]),
                Text("connected", style="green")
                if row["connected"]
                else Text("not connected", style="red"),
                Text(", ".join(row["missing"]) or ("-" if not row["problem"] else "?")),
                Text(settings or "-"),
                Text(str(len(row["tools"]))),
            )
        state.out.print(table)
    if where is not None:
        state.out.print(Text(where), soft_wrap=True)
    if problem is not None:
        state.err.print(Text(f"The secret store cannot be read: {problem}", style="bold red"))


def register(app: typer.Typer) -> None:
    """Add ``toolgate connect``, ``toolgate disconnect`` and ``toolgate connections``."""
    app.command("connect", epilog=EXIT_CODES_HELP)(connect)
    app.command("disconnect", epilog=EXIT_CODES_HELP)(disconnect)
    app.command("connections", epilog=EXIT_CODES_HELP)(connections)
