"""The schema of the shared PostgreSQL database: Alembic migrations, applied on request.

Replicas never change the schema by themselves: ``toolgate db upgrade`` runs the Alembic
migrations in ``pg_migrations/versions`` up to :data:`SCHEMA_VERSION` (each in its own
transaction, under an advisory lock so two upgrades at once cannot interleave), and
:func:`check_schema` refuses a database that was never upgraded, or one written by a newer
toolgate, with a message that says what to run. Revision ids are the version numbers
(``0001``, ``0002`` …), so a version is one query away without importing Alembic.

The tables are those of the embedded SQLite stores, with two differences the shared SQL relies on:
times are ``DOUBLE PRECISION`` and tables read in insertion order have a ``seq`` identity column
(SQLite's ``rowid``; see :attr:`~toolgate.stores.postgres_db.PostgresDatabase.insertion_order`).

This module imports nothing from psycopg itself; it runs its SQL through a
:class:`~toolgate.stores.postgres_db.PostgresDatabase`, and imports Alembic only to upgrade.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .postgres_db import PostgresDatabase

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SchemaError",
    "check_schema",
    "schema_version",
    "upgrade",
]

# Any number, the same in every toolgate: the key of the advisory lock upgrades take.
_UPGRADE_LOCK: Final = 0x746F6F6C67617465  # "toolgate"

#: Alembic's migration scripts (``versions/0001_state.py`` …; revision ids are the versions).
MIGRATIONS: Final = Path(__file__).with_name("pg_migrations")

#: The schema version this toolgate reads and writes: its newest revision.
SCHEMA_VERSION: Final = max(
    int(script.name.split("_", 1)[0]) for script in (MIGRATIONS / "versions").glob("[0-9]*_*.py")
)


class SchemaError(RuntimeError):
    """The shared database's schema is not the one this toolgate reads and writes."""


def schema_version(db: PostgresDatabase) -> int:
    """The database's schema version (0: never upgraded): Alembic's revision, read with one
    query (no SQLAlchemy import on a replica's start). A database the earlier, hand-rolled
    migrations made reports the version they recorded until ``db upgrade`` adopts it."""
    with db.read() as conn:
        tables = conn.execute(
            "SELECT to_regclass('alembic_version') IS NOT NULL AS alembic, "
            "to_regclass('toolgate_schema') IS NOT NULL AS legacy"
        ).fetchone()
        if tables["alembic"]:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
            return 0 if row is None else _version(db, row["version_num"])
        if tables["legacy"]:
            row = conn.execute("SELECT version FROM toolgate_schema WHERE id = 1").fetchone()
            return 0 if row is None else int(row["version"])
    return 0


def _version(db: PostgresDatabase, revision: str) -> int:
    try:
        return int(revision)
    except ValueError:
        raise SchemaError(
            f"the shared database {db.where} is at schema revision {revision!r}, which no "
            "toolgate made: is it another application's database?"
        ) from None


def upgrade(db: PostgresDatabase) -> tuple[int, int]:
    """Bring the schema to :data:`SCHEMA_VERSION` with Alembic; returns the versions before
    and after. Two upgrades at once (two replicas' deploy jobs) take turns on an advisory
    lock. Raises :class:`SchemaError` for a database newer than this toolgate.

    Imports Alembic and SQLAlchemy (``toolgate db upgrade`` only).
    """
    from alembic.util import CommandError
    from sqlalchemy import create_engine
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    engine = create_engine(_sqlalchemy_url(db.url), poolclass=NullPool)
    try:
        # The lock is held by a connection of its own: the pool may have a single one.
        with db.dedicated() as lock:
            lock.execute("SELECT pg_advisory_lock(?)", (_UPGRADE_LOCK,))
            try:
                before = schema_version(db)
                if before > SCHEMA_VERSION:
                    raise SchemaError(_newer(db, before))
                _run_alembic(db, engine, before)
            except (CommandError, SQLAlchemyError) as exc:
                # Anything the migrations meet (a table that exists, a connection that broke):
                # the database is at the last migration that committed.
                detail = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                raise SchemaError(
                    f"cannot upgrade the shared database {db.where}: {detail}"
                ) from exc
            finally:
                # Closing the lock's connection releases the lock too, if this fails.
                with contextlib.suppress(Exception):
                    lock.execute("SELECT pg_advisory_unlock(?)", (_UPGRADE_LOCK,))
    finally:
        engine.dispose()
    return before, schema_version(db)


def _run_alembic(db: PostgresDatabase, engine: Any, before: int) -> None:
    """Run the migrations after ``before`` on a connection of ``engine`` (the lock is held)."""
    from alembic import command
    from alembic.config import Config

    with engine.connect() as connection:
        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        if before and not _has_table(db, "alembic_version"):
            # Made by the earlier migrations: the same tables, recorded elsewhere.
            command.stamp(config, f"{before:04d}")
        if before < SCHEMA_VERSION:
            command.upgrade(config, f"{SCHEMA_VERSION:04d}")
        connection.commit()
    if before and _has_table(db, "toolgate_schema"):
        with db.autocommit() as conn:
            conn.execute("DROP TABLE toolgate_schema")


def _has_table(db: PostgresDatabase, name: str) -> bool:
    with db.read() as conn:
        row = conn.execute("SELECT to_regclass(?) IS NOT NULL AS e", (name,)).fetchone()
    return bool(row["e"])


def _sqlalchemy_url(url: str) -> str:
    """The libpq URL as SQLAlchemy names it with the psycopg 3 driver."""
    scheme, _, rest = url.partition("://")
    return f"postgresql+psycopg://{rest}" if scheme in ("postgresql", "postgres") else url


def check_schema(db: PostgresDatabase) -> None:
    """Refuse (:class:`SchemaError`) a database whose schema is not this toolgate's."""
    version = schema_version(db)
    if version > SCHEMA_VERSION:
        raise SchemaError(_newer(db, version))
    if version < SCHEMA_VERSION:
        state = "has no toolgate schema" if version == 0 else f"has schema version {version}"
        raise SchemaError(
            f"the shared database {db.where} {state}; this toolgate needs version "
            f"{SCHEMA_VERSION}: run `toolgate db upgrade` first"
        )


def _newer(db: PostgresDatabase, version: int) -> str:
    return (
        f"the shared database {db.where} has schema version {version}, newer than the "
        f"{SCHEMA_VERSION} this toolgate knows: upgrade toolgate on this machine"
    )
