"""A throwaway PostgreSQL database for tests that need the shared state.

Tests use the server at ``TOOLGATE_TEST_POSTGRES`` (default: the local one CI starts, database
``test``, trust auth). Each test module gets its own database, dropped afterwards, so runs never
see each other's rows; when no server answers the tests are skipped with how to start one.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

ADMIN_URL = os.environ.get("TOOLGATE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")

START_HINT = (
    "PostgreSQL is not running at 127.0.0.1:5432; start it with "
    "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
    "(.ci/run does) or point TOOLGATE_TEST_POSTGRES at a server"
)


def _admin() -> Any:
    """An autocommit connection to the admin database (skips the test when none answers)."""
    psycopg = pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    try:
        return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError:
        pytest.skip(START_HINT)


def url_of(database: str) -> str:
    """The admin URL pointing at another database of the same server."""
    base, _, _ = ADMIN_URL.rpartition("/")
    return f"{base}/{database}"


@contextmanager
def scratch_database() -> Iterator[str]:
    """A new, empty database; yields its URL and drops it (closing its connections) at the end."""
    admin = _admin()
    name = "toolgate_test_" + uuid.uuid4().hex[:12]
    admin.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    try:
        yield url_of(name)
    finally:
        drop_database(url_of(name))  # a new connection: the server may have restarted meanwhile


def drop_database(url: str) -> None:
    """Drop the database of ``url`` now, cutting off every connection to it."""
    admin = _admin()
    try:
        name = url.rpartition("/")[2]
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@contextmanager
def upgraded_database() -> Iterator[str]:
    """:func:`scratch_database` brought to the current schema (``toolgate db upgrade``'s)."""
    from toolgate.stores.postgres_db import PostgresDatabase
    from toolgate.stores.postgres_schema import upgrade

    with scratch_database() as url:
        db = PostgresDatabase(url)
        try:
            upgrade(db)
        finally:
            db.close()
        yield url
