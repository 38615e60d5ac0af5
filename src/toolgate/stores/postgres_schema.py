"""The schema of the shared PostgreSQL database: versioned migrations, applied on request.

Replicas never change the schema by themselves: ``toolgate db upgrade`` brings it to
:data:`SCHEMA_VERSION` (each migration in its own transaction, under an advisory lock so two
upgrades at once cannot interleave), and :func:`check_schema` refuses a database that was never
upgraded, or one written by a newer toolgate, with a message that says what to run.

The tables are those of the embedded SQLite stores, with two differences the shared SQL relies on:
times are ``DOUBLE PRECISION`` and tables read in insertion order have a ``seq`` identity column
(SQLite's ``rowid``; see :attr:`~toolgate.stores.postgres_db.PostgresDatabase.insertion_order`).

This module imports nothing from psycopg itself; it runs its SQL through a
:class:`~toolgate.stores.postgres_db.PostgresDatabase`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .postgres_db import PostgresDatabase

__all__ = ["SCHEMA_VERSION", "SchemaError", "check_schema", "schema_version", "upgrade"]

# Any number, the same in every toolgate: the key of the advisory lock upgrades take.
_UPGRADE_LOCK: Final = 0x746F6F6C67617465  # "toolgate"

_VERSION_TABLE: Final = """
    CREATE TABLE IF NOT EXISTS toolgate_schema (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL
    )
"""

# Migration ``i`` moves the database from version ``i`` to ``i + 1``. Append new migrations;
# never edit an old one.
_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE approvals (
            id TEXT PRIMARY KEY,
            seq BIGINT GENERATED ALWAYS AS IDENTITY,
            tool_id TEXT NOT NULL,
            title TEXT NOT NULL,
            risk TEXT NOT NULL,
            facts TEXT NOT NULL,
            arguments TEXT NOT NULL,
            arguments_digest TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            workspace TEXT,
            agent TEXT,
            session_id TEXT,
            permission_type TEXT NOT NULL,
            permission_key TEXT NOT NULL,
            security_message TEXT,
            display TEXT,
            status TEXT NOT NULL,
            decision TEXT,
            decided_by TEXT,
            decided_at DOUBLE PRECISION,
            decision_message TEXT,
            outcome TEXT
        )
        """,
        """
        CREATE INDEX approvals_call
            ON approvals (arguments_digest, tool_id, definition_hash, created_at)
        """,
        "CREATE INDEX approvals_status ON approvals (status, created_at)",
        # At most one pending request per call, across every replica.
        """
        CREATE UNIQUE INDEX approvals_one_pending ON approvals (
            tool_id, definition_hash, arguments_digest, COALESCE(workspace, ''),
            COALESCE(agent, '')
        ) WHERE status = 'pending'
        """,
        """
        CREATE TABLE grants (
            id TEXT PRIMARY KEY,
            seq BIGINT GENERATED ALWAYS AS IDENTITY,
            workspace TEXT,
            tool_id TEXT NOT NULL,
            permission_type TEXT NOT NULL,
            permission_key TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            granted_by TEXT,
            granted_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION,
            approval_id TEXT,
            metadata TEXT NOT NULL,
            revoked_at DOUBLE PRECISION
        )
        """,
        """
        CREATE INDEX grants_key
            ON grants (tool_id, permission_type, permission_key, definition_hash)
        """,
        "CREATE INDEX grants_granted_at ON grants (granted_at)",
        """
        CREATE TABLE approval_events (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            request_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            actor TEXT,
            at DOUBLE PRECISION NOT NULL,
            detail TEXT
        )
        """,
        "CREATE INDEX approval_events_request ON approval_events (request_id, id)",
        """
        CREATE TABLE idempotency_keys (
            tool_id TEXT NOT NULL,
            key TEXT NOT NULL,
            arguments_digest TEXT NOT NULL,
            call_id TEXT NOT NULL,
            status TEXT NOT NULL,
            outcome TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tool_id, key)
        )
        """,
        "CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at)",
        """
        CREATE TABLE agent_keys (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            key_sha256 TEXT NOT NULL UNIQUE,
            created_at DOUBLE PRECISION NOT NULL,
            revoked_at DOUBLE PRECISION
        )
        """,
        "CREATE UNIQUE INDEX agent_keys_one_live ON agent_keys (agent) WHERE revoked_at IS NULL",
        """
        CREATE TABLE agent_keys_generation (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value BIGINT NOT NULL
        )
        """,
        "INSERT INTO agent_keys_generation (id, value) VALUES (1, 0)",
        """
        CREATE TABLE rate_limit_counters (
            key TEXT PRIMARY KEY,
            count BIGINT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        )
        """,
        "CREATE INDEX rate_limit_counters_expiry ON rate_limit_counters (expires_at)",
        # Secrets the replicas share (hex), e.g. the key sealing MCP requestState.
        "CREATE TABLE toolgate_keys (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
    # 2: the audit log, shared by the replicas (also the source of the tools' health figures).
    (
        """
        CREATE TABLE audit_records (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            time DOUBLE PRECISION NOT NULL,
            call_id TEXT NOT NULL,
            tool_id TEXT NOT NULL,
            definition_hash TEXT,
            status TEXT NOT NULL,
            code TEXT,
            message TEXT,
            detail TEXT,
            duration DOUBLE PRECISION NOT NULL,
            agent TEXT,
            session TEXT,
            workspace TEXT,
            approval_id TEXT,
            approval_decision TEXT,
            idempotency_key TEXT,
            args TEXT,
            result TEXT,
            visualization TEXT,
            metadata TEXT NOT NULL
        )
        """,
        "CREATE INDEX audit_time ON audit_records (time)",
        "CREATE INDEX audit_tool ON audit_records (tool_id, time)",
        "CREATE INDEX audit_agent ON audit_records (agent, time)",
        "CREATE INDEX audit_status ON audit_records (status, time)",
        "CREATE INDEX audit_call ON audit_records (call_id)",
    ),
    # 3: connection secrets shared by the replicas, sealed with TOOLGATE_SECRETS_KEY (AES-GCM):
    # the database never holds a value in the clear.
    (
        """
        CREATE TABLE secrets (
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            sealed TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (scope, name)
        )
        """,
    ),
)

#: The schema version this toolgate reads and writes.
SCHEMA_VERSION: Final = len(_MIGRATIONS)


class SchemaError(RuntimeError):
    """The shared database's schema is missing, older or newer than this toolgate's."""


def schema_version(db: PostgresDatabase) -> int:
    """The database's schema version (0: never upgraded)."""
    with db.read() as conn:
        exists = conn.execute("SELECT to_regclass('toolgate_schema') IS NOT NULL AS e").fetchone()
        if not exists["e"]:
            return 0
        row = conn.execute("SELECT version FROM toolgate_schema WHERE id = 1").fetchone()
    return 0 if row is None else int(row["version"])


def upgrade(db: PostgresDatabase) -> tuple[int, int]:
    """Bring the schema to :data:`SCHEMA_VERSION`; returns the versions before and after.

    Raises :class:`SchemaError` for a database newer than this toolgate.
    """
    before: int | None = None
    while True:
        with db.write() as conn:
            # Two upgrades at once (two replicas' deploy jobs) take turns.
            conn.execute("SELECT pg_advisory_xact_lock(?)", (_UPGRADE_LOCK,))
            conn.execute(_VERSION_TABLE)
            row = conn.execute("SELECT version FROM toolgate_schema WHERE id = 1").fetchone()
            version = 0 if row is None else int(row["version"])
            before = version if before is None else before
            if version > SCHEMA_VERSION:
                raise SchemaError(_newer(db, version))
            if version == SCHEMA_VERSION:
                return before, version
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO toolgate_schema (id, version) VALUES (1, ?) "
                "ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                (version + 1,),
            )


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
