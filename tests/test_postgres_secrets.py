"""Connection secrets in the shared PostgreSQL database, sealed with ``TOOLGATE_SECRETS_KEY``:
the store on its own, and a connection made on one host that every other host then has."""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from postgres_support import upgraded_database
from test_connections_cli import CONFIG, FIXTURES, SECRET, ok, run, search, sha
from toolgate.errors import ConfigError
from toolgate.secrets import SecretStoreError, open_secret_store

pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")

from toolgate.secrets.database_store import DatabaseSecretStore
from toolgate.stores.postgres_db import PostgresDatabase

pytestmark = pytest.mark.slow

KEY = base64.b64encode(b"k" * 32).decode()
OTHER_KEY = base64.b64encode(b"o" * 32).decode()


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with upgraded_database() as url:
        yield url


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresDatabase]:
    db = PostgresDatabase(pg_url)
    with db.write() as conn:
        conn.execute("TRUNCATE secrets")
    yield db
    db.close()


def _sealed(db: PostgresDatabase) -> dict[tuple[str, str], str]:
    with db.read() as conn:
        rows = conn.execute("SELECT scope, name, sealed FROM secrets").fetchall()
    return {(row["scope"], row["name"]): row["sealed"] for row in rows}


def test_values_round_trip_and_are_never_stored_in_the_clear(pg: PostgresDatabase) -> None:
    store = open_secret_store(Path("/nonexistent"), {"TOOLGATE_SECRETS_KEY": KEY}, database=pg)
    assert "sealed with TOOLGATE_SECRETS_KEY" in store.description
    store.set("notion", "accessToken", SECRET)
    store.set("notion", "apiBaseUrl", "https://notion.example/v1")
    assert store.get("notion", "accessToken") == SECRET
    assert store.names("notion") == ["accessToken", "apiBaseUrl"]
    first = _sealed(pg)[("notion", "accessToken")]
    assert SECRET not in first and SECRET.encode() not in base64.b64decode(first)
    store.set("notion", "accessToken", SECRET)  # the same value, sealed afresh
    assert _sealed(pg)[("notion", "accessToken")] != first
    assert store.delete("notion", "accessToken") and not store.delete("notion", "accessToken")
    assert store.get("notion", "accessToken") is None
    assert store.problem() is None


def test_a_value_moved_to_another_name_or_read_with_another_key_does_not_open(
    pg: PostgresDatabase,
) -> None:
    store = DatabaseSecretStore(pg, base64.b64decode(KEY))
    store.set("github", "token", SECRET)
    sealed = _sealed(pg)[("github", "token")]
    with pg.write() as conn:  # someone with write access to the table swaps rows
        conn.execute(
            "INSERT INTO secrets (scope, name, sealed, updated_at) VALUES (?, ?, ?, 0)",
            ("notion", "accessToken", sealed),
        )
    assert store.get("notion", "accessToken") is None
    with pg.write() as conn:  # a damaged row, and one too short to hold a nonce
        conn.execute(
            "INSERT INTO secrets (scope, name, sealed, updated_at) "
            "VALUES ('x', 'damaged', '!!not base64', 0), ('x', 'short', 'AAAA', 0)"
        )
    assert store.get("x", "damaged") is None and store.get("x", "short") is None
    other = DatabaseSecretStore(pg, base64.b64decode(OTHER_KEY))
    assert other.get("github", "token") is None
    assert "does not open with this TOOLGATE_SECRETS_KEY" in (other.problem() or "")


@pytest.mark.parametrize("key", ["not base64!", base64.b64encode(b"short").decode()])
def test_a_malformed_key_is_refused_naming_the_variable(pg: PostgresDatabase, key: str) -> None:
    with pytest.raises(SecretStoreError, match="TOOLGATE_SECRETS_KEY must be 32 random bytes"):
        open_secret_store(Path("/x"), {"TOOLGATE_SECRETS_KEY": key}, database=pg)


def test_the_database_store_needs_a_database_and_a_key(pg: PostgresDatabase) -> None:
    forced = {"TOOLGATE_SECRET_STORE": "database"}
    with pytest.raises(ConfigError, match=r"needs state: \(PostgreSQL\)"):
        open_secret_store(Path("/x"), {**forced, "TOOLGATE_SECRETS_KEY": KEY})
    with pytest.raises(ConfigError, match="needs TOOLGATE_SECRETS_KEY"):
        open_secret_store(Path("/x"), forced, database=pg)


def test_a_connection_made_on_one_host_is_made_on_every_host(pg_url: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    for name in ("notion", "github"):
        shutil.copytree(FIXTURES / name, project / "extensions" / name)
    (project / "toolgate.yaml").write_text(CONFIG + f"state: {pg_url}\n", encoding="utf-8")
    hosts = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        env = {**os.environ, "TOOLGATE_HOME": str(home), "TOOLGATE_SECRETS_KEY": KEY}
        for variable in ("TOOLGATE_SECRET_STORE", "TOOLGATE_DATABASE_URL", "COLUMNS"):
            env.pop(variable, None)
        hosts.append((home, env))
    (home_a, env_a), (home_b, env_b) = hosts
    assert search(project, env_b).returncode == 1  # not connected yet, anywhere

    out = ok(run(project, env_a, "connect", "notion", "--stdin", stdin=f"accessToken={SECRET}\n"))
    assert "sealed with TOOLGATE_SECRETS_KEY" in out

    # Host B never saw the secret typed, and now has the connection.
    listing = json.loads(ok(run(project, env_b, "connections", "--json")))
    assert "sealed with TOOLGATE_SECRETS_KEY" in listing["secret_store"]["description"]
    listing = {row["id"]: row for row in listing["capabilities"]}
    assert listing["notion"]["connected"] is True and listing["github"]["connected"] is False
    answer = json.loads(ok(search(project, env_b)))
    assert answer["token_sha256"] == sha(SECRET)
    for home in (home_a, home_b):  # nothing is kept on either host
        assert not (home / "secrets").exists()
    # A host with another key cannot use it, and says why.
    env_c = {**env_b, "TOOLGATE_SECRETS_KEY": OTHER_KEY}
    assert search(project, env_c).returncode == 1
