"""0001: approvals, grants, idempotency keys, agent keys, rate-limit counters, shared keys.

Revision ID: 0001
Revises: (none: the first)
"""

from alembic import op
from alembic.util import CommandError

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
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
        """
    )
    op.execute(
        """
        CREATE INDEX approvals_call
            ON approvals (arguments_digest, tool_id, definition_hash, created_at)
        """
    )
    op.execute("CREATE INDEX approvals_status ON approvals (status, created_at)")
    op.execute(
        """
        CREATE UNIQUE INDEX approvals_one_pending ON approvals (
            tool_id, definition_hash, arguments_digest, COALESCE(workspace, ''),
            COALESCE(agent, '')
        ) WHERE status = 'pending'
        """
    )
    op.execute(
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
        """
    )
    op.execute(
        """
        CREATE INDEX grants_key
            ON grants (tool_id, permission_type, permission_key, definition_hash)
        """
    )
    op.execute("CREATE INDEX grants_granted_at ON grants (granted_at)")
    op.execute(
        """
        CREATE TABLE approval_events (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            request_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            actor TEXT,
            at DOUBLE PRECISION NOT NULL,
            detail TEXT
        )
        """
    )
    op.execute("CREATE INDEX approval_events_request ON approval_events (request_id, id)")
    op.execute(
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
        """
    )
    op.execute("CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at)")
    op.execute(
        """
        CREATE TABLE agent_keys (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            key_sha256 TEXT NOT NULL UNIQUE,
            created_at DOUBLE PRECISION NOT NULL,
            revoked_at DOUBLE PRECISION
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX agent_keys_one_live ON agent_keys (agent) WHERE revoked_at IS NULL"
    )
    op.execute(
        """
        CREATE TABLE agent_keys_generation (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value BIGINT NOT NULL
        )
        """
    )
    op.execute("INSERT INTO agent_keys_generation (id, value) VALUES (1, 0)")
    op.execute(
        """
        CREATE TABLE rate_limit_counters (
            key TEXT PRIMARY KEY,
            count BIGINT NOT NULL,
            expires_at DOUBLE PRECISION NOT NULL
        )
        """
    )
    op.execute("CREATE INDEX rate_limit_counters_expiry ON rate_limit_counters (expires_at)")
    op.execute("CREATE TABLE toolgate_keys (name TEXT PRIMARY KEY, value TEXT NOT NULL)")


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
