"""0006: the audit log's summary tables for the health figures, filled from the records.

The SQL is written out, not built from ``toolgate.audit.rollup``: a migration keeps meaning what
it meant when it was released, whatever later versions of that module say.

Revision ID: 0006
Revises: 0005
"""

from alembic import op
from alembic.util import CommandError

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The error codes that are the caller's doing, not the tool failing (model/stats.py, 0006).
_FAILURE = (
    "(status = 'error' AND (code IS NULL OR code NOT IN ('busy', 'cancelled', 'forbidden', "
    "'idempotency_conflict', 'invalid_arguments', 'rate_limited', 'tool_not_found', "
    "'user_rejection')))"
)
# audit.rollup.bucket_of: 16 buckets per doubling; 0 and NaN below all, infinity above all.
_BUCKET = (
    "CASE WHEN duration = 'NaN' OR NOT duration > 0 THEN -1000000 "
    "WHEN duration = 'Infinity' THEN 16384 "
    "ELSE FLOOR(LN(duration) / LN(2) * 16)::BIGINT END"
)


def _durations(span: int) -> str:
    return (
        "INSERT INTO audit_durations (tool_id, span, start, bucket, n) "
        f"SELECT tool_id, {span}, start, bucket, COUNT(*) FROM (SELECT tool_id, "
        f"FLOOR(time / {span})::BIGINT AS start, {_BUCKET} AS bucket FROM audit_records "
        f"WHERE status = 'ok' OR {_FAILURE}) AS ran GROUP BY tool_id, start, bucket"
    )


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS audit_minutes (
            tool_id TEXT NOT NULL,
            minute BIGINT NOT NULL,
            total BIGINT NOT NULL,
            failures BIGINT NOT NULL,
            error_time DOUBLE PRECISION,
            error_code TEXT,
            error_message TEXT,
            PRIMARY KEY (tool_id, minute)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE IF NOT EXISTS audit_durations (
            tool_id TEXT NOT NULL,
            span BIGINT NOT NULL,
            start BIGINT NOT NULL,
            bucket BIGINT NOT NULL,
            n BIGINT NOT NULL,
            PRIMARY KEY (tool_id, span, start, bucket)
        )
        """
    )
    op.execute("CREATE INDEX IF NOT EXISTS audit_minutes_time ON audit_minutes (minute)")
    op.execute("CREATE INDEX IF NOT EXISTS audit_durations_time ON audit_durations (span, start)")
    # Each minute's counts and its newest failure (the first row of its failures, newest first).
    failed = f"CASE WHEN {_FAILURE} THEN 1 ELSE 0 END"
    minute = "FLOOR(time / 60)::BIGINT"
    op.execute(
        "INSERT INTO audit_minutes "
        "(tool_id, minute, total, failures, error_time, error_code, error_message) "
        "SELECT tool_id, minute, COUNT(*), SUM(failed), "
        "MAX(CASE WHEN failed = 1 AND rn = 1 THEN time END), "
        "MAX(CASE WHEN failed = 1 AND rn = 1 THEN code END), "
        "MAX(CASE WHEN failed = 1 AND rn = 1 THEN message END) "
        f"FROM (SELECT tool_id, {minute} AS minute, time, code, message, {failed} AS failed, "
        f"ROW_NUMBER() OVER (PARTITION BY tool_id, {minute}, {failed} "
        "ORDER BY time DESC, id DESC) AS rn "
        "FROM audit_records WHERE status != 'pending_approval') AS finished "
        "GROUP BY tool_id, minute"
    )
    op.execute(_durations(3600))
    op.execute(_durations(86400))
    # Statistics for the planner now, not at autovacuum's next pass: the first reads after an
    # upgrade of a large log would otherwise scan the tables instead of walking their keys.
    op.execute("ANALYZE audit_minutes")
    op.execute("ANALYZE audit_durations")


def downgrade() -> None:
    # Deliberately refused: the schema moves forward only (records would be dropped).
    raise CommandError("toolgate's schema moves forward only; restore a backup instead")
