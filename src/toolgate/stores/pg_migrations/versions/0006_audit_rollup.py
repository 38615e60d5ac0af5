"""0006: the audit log's summary tables for the health figures, filled from the records.

Revision ID: 0006
Revises: 0005
"""

from alembic import op
from alembic.util import CommandError

from toolgate.audit.rollup import (
    BUCKETS_PER_DOUBLING,
    INFINITE_BUCKET,
    ZERO_BUCKET,
    backfill_statements,
    create_statements,
)

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# toolgate.audit.rollup.bucket_of in SQL (an infinite duration, which no call has, in the top).
_BUCKET = (
    f"CASE WHEN duration = 'NaN' OR NOT duration > 0 THEN {ZERO_BUCKET} "
    f"WHEN duration = 'Infinity' THEN {INFINITE_BUCKET} "
    f"ELSE FLOOR(LN(duration) / LN(2) * {BUCKETS_PER_DOUBLING})::BIGINT END"
)


def upgrade() -> None:
    for statement in create_statements(
        integer="BIGINT", real="DOUBLE PRECISION", without_rowid=False
    ):
        op.execute(statement)
    for statement in backfill_statements(floor_div="FLOOR({x} / {y})::BIGINT", bucket=_BUCKET):
        op.execute(statement)
    # Statistics for the planner now, not at autovacuum's next pass: the first reads after an
    # upgrade of a large log would otherwise scan the tables instead of walking their keys.
    op.execute("ANALYZE audit_minutes")
    op.execute("ANALYZE audit_durations")


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
