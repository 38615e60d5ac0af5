"""0004: the namespaces the credentials of an approval request allowed.

Revision ID: 0004
Revises: 0003
"""

from alembic import op
from alembic.util import CommandError

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A JSON list of namespaces, NULL for a request made with unrestricted credentials (every
    # request made before this revision: they were run without a restriction already).
    op.execute("ALTER TABLE approvals ADD COLUMN namespaces TEXT")


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
