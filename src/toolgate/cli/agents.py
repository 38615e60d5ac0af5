"""``toolgate agents add|list|revoke``: API keys of the agents that call ``toolgate serve``.

``add NAME`` prints a new random key once, on stdout alone (``KEY=$(toolgate agents add bot)``),
and keeps only its SHA-256 in ``$TOOLGATE_HOME/toolgate.db`` — so ``toolgate.yaml`` is never
rewritten and keeps its comments. A key's hash may also be written in ``toolgate.yaml`` as
``agents: NAME: {key_sha256: …}``. Labels (for policies, and ``role: operator`` for who may decide
approvals over HTTP) are always set in ``toolgate.yaml``.

Once any key exists, ``toolgate serve`` requires one on every request (``Authorization: Bearer
KEY``). A running server sees keys added or revoked here at its next request; keys in
``toolgate.yaml`` are read when it starts.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import time
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..config import STATE_FILE_NAME, LoadedConfig, load_config, toolgate_home
from ..config.schema import OPERATOR_ROLE
from ..config.shared_state import open_state_database, state_urls
from ..serve.auth.identity import fingerprint, key_sha256, new_key
from ..stores.agent_keys import AgentKey, AgentKeyExistsError, AgentKeyStore
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError
from .options import CliState, print_json

__all__ = ["agents_app", "register"]

agents_app = typer.Typer(
    help="API keys of the agents calling 'toolgate serve': add (prints a new key once), list, "
    "revoke. Only a key's SHA-256 is stored, in $TOOLGATE_HOME/toolgate.db. Labels (and "
    "'role: operator') are set under agents: in toolgate.yaml.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)

_NAME_HELP = "The agent's name (letters, digits, '.', '_', '-')."


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def _store(loaded: LoadedConfig) -> AgentKeyStore:
    """The keys in the shared database when ``state:`` names one, else in the SQLite file."""
    database = open_state_database(loaded)
    return AgentKeyStore(toolgate_home() / STATE_FILE_NAME if database is None else database)


def _stored_keys(loaded: LoadedConfig) -> list[AgentKey]:
    """The live stored keys; none (and no database created) when there is no state file."""
    shared = state_urls(loaded).database is not None
    if not shared and not (toolgate_home() / STATE_FILE_NAME).is_file():
        return []
    with _store(loaded) as store:
        return store.list_keys()


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


@agents_app.command("add", epilog=EXIT_CODES_HELP)
def add_agent(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help=_NAME_HELP)],
    replace: Annotated[
        bool,
        typer.Option("--replace", help="Rotate: the agent's current key stops working at once."),
    ] = False,
) -> None:
    """Create an API key for agent NAME and print it, once, on stdout.

    Only its SHA-256 is kept; the key cannot be shown again (rotate it with --replace). The
    agent sends it as 'Authorization: Bearer KEY'. From now on 'toolgate serve' requires a key
    on every request, and may listen on addresses other than loopback.
    """
    state = _state(ctx)
    loaded = load_config(state.config_path)
    key = new_key()
    digest = key_sha256(key)
    with _store(loaded) as store:
        try:
            _, replaced = store.add(name, digest, now=time.time(), replace=replace)
        except AgentKeyExistsError as exc:
            raise CliFailure(str(exc)) from None
        except ValueError as exc:
            raise CliUsageError(str(exc)) from None
    typer.echo(key)
    err = state.err
    rotated = f" (replacing {fingerprint(replaced.key_sha256)})" if replaced else ""
    err.print(
        Text(f"Created the key of agent {name}, {fingerprint(digest)}{rotated}."), soft_wrap=True
    )
    err.print(
        "Store it now: it is not shown again. The agent sends it as 'Authorization: Bearer "
        "KEY'; 'toolgate serve' requires a key on every request from now on.",
        soft_wrap=True,
    )
    if name not in loaded.config.agents:
        key_label, value = OPERATOR_ROLE
        err.print(
            Text(
                f"{name} has no labels. To give it some (for policies), or to let it decide "
                f"approvals over HTTP, add to toolgate.yaml:\n  agents:\n    {name}:\n      "
                f"labels: {{{key_label}: {value}}}"
            ),
            soft_wrap=True,
        )


def _rows(state: CliState) -> list[dict[str, Any]]:
    loaded = load_config(state.config_path)
    stored = _stored_keys(loaded)
    agents: dict[str, dict[str, Any]] = {}
    for name, agent in loaded.config.agents.items():
        row = agents.setdefault(name, {"name": name, "labels": dict(agent.labels), "keys": []})
        if agent.key_sha256 is not None:
            row["keys"].append(
                {
                    "fingerprint": fingerprint(agent.key_sha256),
                    "source": loaded.label,
                    "created_at": None,
                }
            )
    for key in stored:
        row = agents.setdefault(key.agent, {"name": key.agent, "labels": {}, "keys": []})
        row["keys"].append(
            {"fingerprint": key.fingerprint, "source": "store", "created_at": key.created_at}
        )
    label, value = OPERATOR_ROLE
    for row in agents.values():
        row["operator"] = row["labels"].get(label) == value
    return [agents[name] for name in sorted(agents)]


@agents_app.command("list", epilog=EXIT_CODES_HELP)
def list_agents(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the agents as JSON.")] = False,
) -> None:
    """List the agents: name, labels, whether it is an operator, and its key's fingerprint,
    where the key is kept and when it was created (never the key)."""
    state = _state(ctx)
    rows = _rows(state)
    if as_json:
        print_json(rows)
        return
    if not rows:
        state.out.print(
            "No agents. 'toolgate agents add NAME' creates a key; until one exists, "
            "'toolgate serve' answers only this machine, everyone as the 'default' agent."
        )
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("Agent", "Labels", "Operator", "Key", "Kept in", "Created"):
        table.add_column(header, overflow="fold")
    for row in rows:
        labels = ", ".join(f"{k}={v}" for k, v in sorted(row["labels"].items())) or "-"
        keys = row["keys"] or [{"fingerprint": "(no key)", "source": "-", "created_at": None}]
        for index, key in enumerate(keys):
            first = index == 0
            table.add_row(
                Text(row["name"] if first else "", style="bold"),
                Text(labels if first else ""),
                Text(("yes" if row["operator"] else "no") if first else ""),
                Text(key["fingerprint"]),
                Text(key["source"]),
                Text(_when(key["created_at"]) or "-"),
            )
    state.out.print(table)


@agents_app.command("revoke", epilog=EXIT_CODES_HELP)
def revoke_agent(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help=_NAME_HELP)],
) -> None:
    """Revoke agent NAME's key: a running server refuses it from its next request."""
    state = _state(ctx)
    loaded = load_config(state.config_path)
    revoked: list[AgentKey] = []
    shared = state_urls(loaded).database is not None
    if shared or (toolgate_home() / STATE_FILE_NAME).is_file():
        with _store(loaded) as store:
            revoked = store.revoke(name, now=time.time())
    configured = loaded.config.agents.get(name)
    if not revoked:
        if configured is not None and configured.key_sha256 is not None:
            raise CliFailure(
                f"{name}'s key is set in {loaded.label} (agents.{name}.key_sha256): remove it "
                "there, then restart 'toolgate serve'"
            )
        raise CliFailure(f"agent {name!r} has no key to revoke ('toolgate agents list')")
    printed = ", ".join(key.fingerprint for key in revoked)
    state.out.print(
        Text(f"Revoked the key of agent {name} ({printed}); a running server refuses it now."),
        soft_wrap=True,
    )
    if configured is not None and configured.key_sha256 is not None:
        state.err.print(
            Text(
                f"note: {loaded.label} also sets a key for {name} (agents.{name}.key_sha256); "
                "remove it there, then restart 'toolgate serve'."
            ),
            soft_wrap=True,
        )


def register(app: typer.Typer) -> None:
    """Add ``toolgate agents``."""
    app.add_typer(agents_app, name="agents")
