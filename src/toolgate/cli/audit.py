"""``toolgate audit``: show, filter and export the audit log (one redacted record per call).

The log lives in ``$TOOLGATE_HOME/audit.db`` unless ``--db PATH`` names another file — or, when
toolgate.yaml's ``state:`` (or ``TOOLGATE_DATABASE_URL``) names a shared PostgreSQL database and
no ``--db`` is given, in that database, with every replica's calls. These commands only read it:
they never prune, whatever retention the gateway is configured with.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError, report
from .options import CliState, print_json
from .prompt import clean, format_time

if TYPE_CHECKING:
    from ..audit.log_base import AuditLog
    from ..audit.record import AuditRecord

__all__ = ["audit_app", "default_audit_path", "parse_time"]

audit_app = typer.Typer(
    help="The audit log: one record per call (who called which tool, with what, and how it "
    "ended), with redacted fields and secrets masked. List, filter and export it.",
    epilog=EXIT_CODES_HELP,
    rich_markup_mode="markdown",
    no_args_is_help=True,
)

_STATUSES = ("ok", "error", "pending_approval")
_RELATIVE = re.compile(r"^-?(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


def default_audit_path() -> Path:
    """``$TOOLGATE_HOME/audit.db``."""
    from ..config import toolgate_home

    return toolgate_home() / "audit.db"


def parse_time(value: str, option: str, *, now: float | None = None) -> float:
    """``-1h``, ``-30m``, ``-7d``, ``-2w``, ``-45s`` (before now), or an ISO 8601 date or time
    (local time unless it has an offset), as Unix seconds. Raises :class:`CliUsageError`."""
    text = value.strip()
    match = _RELATIVE.match(text)
    if match:
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        return (time.time() if now is None else now) - seconds
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise CliUsageError(
            f"{option}: {value!r} is neither an ISO 8601 time (2024-05-01, "
            "2024-05-01T12:00:00+00:00) nor a relative time such as -1h, -30m or -7d"
        ) from None


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


@contextmanager
def _cli_errors(ctx: typer.Context) -> Iterator[None]:
    """Map failures to the CLI's exit codes and one line on stderr."""
    try:
        yield
    except (CliUsageError, CliFailure, ConfigError) as exc:
        raise typer.Exit(report(exc, _state(ctx).err)) from None


def _filters(
    tool: str | None,
    agent: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
) -> dict[str, Any]:
    from ..errors import ErrorCode

    filters: dict[str, Any] = {"tool_id": tool, "agent": agent}
    if status is not None:
        if status in _STATUSES:
            filters["status"] = status
        elif status in {code.value for code in ErrorCode}:
            filters["code"] = status
        else:
            raise CliUsageError(
                f"--status: {status!r} is not one of {', '.join(_STATUSES)} nor an error code "
                "such as tool_error or invalid_arguments"
            )
    now = time.time()
    filters["since"] = None if since is None else parse_time(since, "--since", now=now)
    filters["until"] = None if until is None else parse_time(until, "--until", now=now)
    return filters


@contextmanager
def _open_log(db: Path | None, state: CliState) -> Iterator["AuditLog | None"]:
    """The audit log opened for reading: ``db``; else the shared database that toolgate.yaml's
    ``state:`` names; else ``$TOOLGATE_HOME/audit.db`` — or ``None`` when that file does not
    exist (nothing was recorded yet)."""
    if db is None:
        from ..config import load_config
        from ..config.shared_state import open_state_database

        database = open_state_database(load_config(state.config_path))
        if database is not None:
            from ..audit.log_base import AuditStoreError
            from ..audit.postgres_log import PostgresAuditLog

            shared = PostgresAuditLog(database, retention_days=None, durable=False)
            try:
                yield shared
            except AuditStoreError as exc:
                raise CliFailure(f"cannot read the audit log at {database.where}: {exc}") from None
            finally:
                shared.close()
                database.close()
            return
    path = default_audit_path() if db is None else db
    if path.is_dir():
        raise CliUsageError(f"--db: {path} is a folder, not an audit database")
    if not path.exists():
        yield None
        return
    from ..audit.sqlite_log import AuditStoreError, SQLiteAuditLog

    log = SQLiteAuditLog(path, retention_days=None)
    try:
        if not log.healthy:
            raise CliFailure(f"cannot open the audit log {path}: {log.last_error}")
        try:
            yield log
        except AuditStoreError as exc:
            raise CliFailure(f"cannot read the audit log {path}: {exc}") from None
    finally:
        log.close()


_TOOL_OPT = typer.Option("--tool", help="Only calls of this tool id.")
_AGENT_OPT = typer.Option("--agent", help="Only calls by this agent.")
_STATUS_OPT = typer.Option(
    "--status", help="Only this status (ok, error, pending_approval) or error code (tool_error…)."
)
_SINCE_OPT = typer.Option(
    "--since", help="Calls from this time on: ISO 8601, or relative such as -1h, -7d."
)
_UNTIL_OPT = typer.Option("--until", help="Calls before this time: ISO 8601, or -1h, -7d.")
_DB_OPT = typer.Option(
    "--db",
    help="The audit database (default: the shared database of state:, else "
    "$TOOLGATE_HOME/audit.db).",
    dir_okay=False,
)


@audit_app.command("list", epilog=EXIT_CODES_HELP)
def list_records(
    ctx: typer.Context,
    tool: Annotated[str | None, _TOOL_OPT] = None,
    agent: Annotated[str | None, _AGENT_OPT] = None,
    status: Annotated[str | None, _STATUS_OPT] = None,
    since: Annotated[str | None, _SINCE_OPT] = None,
    until: Annotated[str | None, _UNTIL_OPT] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many records.")] = 50,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many first.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the records as JSON.")] = False,
    db: Annotated[Path | None, _DB_OPT] = None,
) -> None:
    """List recorded calls, newest first: time, tool, status or error code, agent, duration,
    call id and message."""
    state = _state(ctx)
    with _cli_errors(ctx):
        filters = _filters(tool, agent, status, since, until)
        with _open_log(db, _state(ctx)) as log:
            records = [] if log is None else log.query(**filters, limit=limit, offset=offset)
    if as_json:
        print_json([record.to_dict() for record in records])
        return
    if not records:
        state.out.print("No audit records match.")
        return
    state.out.print(_table(records))
    noun = "record" if len(records) == 1 else "records"
    state.out.print(Text(f"{len(records)} {noun} (newest first)", style="dim"))


def _status_text(record: "AuditRecord") -> Text:
    if record.status == "ok":
        return Text("ok", style="green")
    if record.status == "pending_approval":
        return Text("pending", style="yellow")
    return Text(clean(record.code or record.status), style="red")


def _table(records: "list[AuditRecord]") -> Table:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("Time", no_wrap=True)
    table.add_column("Tool", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Agent", overflow="fold")
    table.add_column("Duration", justify="right", no_wrap=True)
    table.add_column("Call", overflow="fold")
    table.add_column("Message", overflow="fold")
    for record in records:
        message = record.message or ""
        if len(message) > 120:
            message = message[:119] + "…"
        table.add_row(
            Text(format_time(record.time)),
            Text(clean(record.tool_id), style="bold"),
            _status_text(record),
            Text(clean(record.agent or "-")),
            Text(f"{record.duration * 1000:.1f} ms"),
            Text(clean(record.call_id or "-")),
            Text(clean(message)),
        )
    return table


@audit_app.command("export", epilog=EXIT_CODES_HELP)
def export_records(
    ctx: typer.Context,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write to this file (mode 0600) instead of standard output."
        ),
    ] = None,
    tool: Annotated[str | None, _TOOL_OPT] = None,
    agent: Annotated[str | None, _AGENT_OPT] = None,
    status: Annotated[str | None, _STATUS_OPT] = None,
    since: Annotated[str | None, _SINCE_OPT] = None,
    until: Annotated[str | None, _UNTIL_OPT] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many records.")
    ] = None,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Skip this many first.")] = 0,
    db: Annotated[Path | None, _DB_OPT] = None,
) -> None:
    """Export matching records as JSON lines (one object per call, newest first)."""
    with _cli_errors(ctx):
        filters = _filters(tool, agent, status, since, until)
        with _open_log(db, _state(ctx)) as log:
            if output is not None:
                try:
                    if log is None:
                        output.write_text("", encoding="utf-8")
                        count = 0
                    else:
                        count = log.export_jsonl(output, **filters, limit=limit, offset=offset)
                except OSError as exc:
                    raise CliUsageError(
                        f"--output: cannot write {output}: {exc.strerror or exc}"
                    ) from None
                noun = "record" if count == 1 else "records"
                _state(ctx).err.print(f"Exported {count} {noun} to {output}.")
            elif log is not None:
                log.export_jsonl(sys.stdout, **filters, limit=limit, offset=offset)
