"""0003: connection secrets, sealed with TOOLGATE_SECRETS_KEY (AES-GCM).

Revision ID: 0003
Revises: 0002
"""

from alembic import op
from alembic.util import CommandError

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE secrets (
            scope TEXT NOT NULL,
            name TEXT NOT NULL,
            sealed TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (scope, name)
        )
        """
    )


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
