"""0002: the audit log, shared by the replicas (also the source of the health figures).

Revision ID: 0002
Revises: 0001
"""

from alembic import op
from alembic.util import CommandError

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
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
        """
    )
    op.execute("CREATE INDEX audit_time ON audit_records (time)")
    op.execute("CREATE INDEX audit_tool ON audit_records (tool_id, time)")
    op.execute("CREATE INDEX audit_agent ON audit_records (agent, time)")
    op.execute("CREATE INDEX audit_status ON audit_records (status, time)")
    op.execute("CREATE INDEX audit_call ON audit_records (call_id)")


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
