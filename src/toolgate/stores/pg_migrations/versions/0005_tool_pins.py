"""0005: accepted definitions of upstream MCP tools (tool pins) and their generation counter.

Revision ID: 0005
Revises: 0004
"""

from alembic import op
from alembic.util import CommandError

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE tool_pins (
            server TEXT NOT NULL,
            tool TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            definition TEXT NOT NULL,
            accepted_at DOUBLE PRECISION NOT NULL,
            accepted_by TEXT,
            PRIMARY KEY (server, tool)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE tool_pins_generation (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value BIGINT NOT NULL
        )
        """
    )
    op.execute("INSERT INTO tool_pins_generation (id, value) VALUES (1, 0)")


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
