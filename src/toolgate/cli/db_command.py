"""``toolgate db``: the schema of the state database — see where it stands, upgrade it.

With ``state:`` (or ``TOOLGATE_DATABASE_URL``) naming a PostgreSQL database, ``db upgrade`` runs
the Alembic migrations this toolgate ships, in order, each in its own transaction (run it once
per deployment, before starting the new replicas; ``serve`` refuses a database it was not run
on). Without it, the state is the embedded SQLite files (``toolgate.db``, ``audit.db``), which
every command brings to the current schema when it opens them: ``db upgrade`` does so at once and
says so.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..config import STATE_FILE_NAME, load_config, toolgate_home
from ..config.shared_state import open_database, state_urls
from ..errors import ConfigError, StateUnavailableError
from .errors import EXIT_CODES_HELP
from .options import CliState, print_json

__all__ = ["db_app", "register"]

db_app = typer.Typer(
    help="The state database's schema: 'db status' shows its version, 'db upgrade' brings it to "
    "this toolgate's (PostgreSQL named by state: or TOOLGATE_DATABASE_URL; else the SQLite file "
    "$TOOLGATE_HOME/toolgate.db).",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)

_JSON = Annotated[bool, typer.Option("--json", help="Print a JSON object instead of text.")]


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def _sqlite_upgrade() -> str:
    """Open every SQLite store once (each migrates its own tables); returns the file."""
    from ..audit.sqlite_log import SQLiteAuditLog
    from ..config.build import AUDIT_FILE_NAME
    from ..stores.agent_keys import AgentKeyStore
    from ..stores.sqlite_approvals import SQLiteApprovalStore
    from ..stores.sqlite_idempotency import SQLiteIdempotencyStore
    from ..stores.sqlite_limits import SQLiteRateLimitStorage
    from ..stores.tool_pins import ToolPinStore

    path = toolgate_home() / STATE_FILE_NAME
    for store in (SQLiteApprovalStore, SQLiteIdempotencyStore, AgentKeyStore, ToolPinStore):
        store(path).close()
    SQLiteRateLimitStorage(path).close()
    audit = toolgate_home() / AUDIT_FILE_NAME
    if audit.exists():  # made by the first audited call; migrated like the others
        log = SQLiteAuditLog(audit, retention_days=None)
        problem = None if log.healthy else log.last_error
        log.close()
        if problem is not None:
            raise ConfigError(f"cannot upgrade the audit log {audit}: {problem}")
    return str(path)


@db_app.command("upgrade", epilog=EXIT_CODES_HELP)
def upgrade_command(ctx: typer.Context, as_json: _JSON = False) -> None:
    """Bring the state database's schema to this toolgate's version.

    Safe to run again (nothing to do) and from several machines at once (they take turns). A
    database from a newer toolgate is left untouched, with an error.
    """
    from ..stores.postgres_schema import SchemaError, upgrade

    loaded = load_config(_state(ctx).config_path)
    urls = state_urls(loaded)
    if urls.database is None:
        path = _sqlite_upgrade()
        if as_json:
            print_json({"engine": "sqlite", "database": path, "upgraded": True})
        else:
            typer.echo(f"SQLite state at {path} is at the current schema.")
        return
    database = open_database(urls)
    try:
        before, after = upgrade(database)
    except (SchemaError, StateUnavailableError) as exc:
        raise ConfigError(f"{urls.database_setting}: {exc}") from None
    finally:
        database.close()
    if as_json:
        print_json(
            {"engine": "postgresql", "database": database.where, "from": before, "to": after}
        )
    elif before == after:
        typer.echo(f"{database.where} is already at schema version {after}.")
    else:
        typer.echo(f"Upgraded {database.where} from schema version {before} to {after}.")


@db_app.command("status", epilog=EXIT_CODES_HELP)
def status_command(ctx: typer.Context, as_json: _JSON = False) -> None:
    """Show which database holds the state, its schema version and this toolgate's.

    Exits 1 when the schema is not the one this toolgate needs (run 'toolgate db upgrade').
    """
    from ..stores.postgres_schema import SCHEMA_VERSION, SchemaError, schema_version

    loaded = load_config(_state(ctx).config_path)
    urls = state_urls(loaded)
    if urls.database is None:
        path = toolgate_home() / STATE_FILE_NAME
        if as_json:
            print_json({"engine": "sqlite", "database": str(path), "current": True})
        else:
            typer.echo(
                f"SQLite state at {path} (brought to the current schema whenever it is opened)."
            )
        return
    database = open_database(urls)
    try:
        version = schema_version(database)
    except (SchemaError, StateUnavailableError) as exc:
        raise ConfigError(f"{urls.database_setting}: {exc}") from None
    finally:
        database.close()
    current = version == SCHEMA_VERSION
    if as_json:
        print_json(
            {
                "engine": "postgresql",
                "database": database.where,
                "version": version,
                "expected": SCHEMA_VERSION,
                "current": current,
            }
        )
    else:
        typer.echo(
            f"PostgreSQL {database.where}: schema version {version}, this toolgate needs "
            f"{SCHEMA_VERSION}" + ("." if current else " — run 'toolgate db upgrade'.")
        )
    if not current:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``toolgate db``."""
    app.add_typer(db_app, name="db")
