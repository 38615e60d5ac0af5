"""The audit log in PostgreSQL: one log shared by every replica, written with ``COPY``.

Replicas of a gateway configured with ``state: postgresql://…`` keep their audit records in the
shared database (table ``audit_records``, created by ``toolgate db upgrade``), so ``toolgate
audit``, the web UI's call list and the tools' health figures show every replica's calls, not
the calls of whichever process answered.

The log is **durable** by default: the gateway answers a call only after the batch holding its
record is committed (:meth:`~toolgate.audit.log_base.AuditLog.recorded`). A replica killed in
the middle of calls has recorded every call it answered. Batches still form on their own: while
one batch is being committed, the calls that end meanwhile wait for the next one, so under load
one commit carries many records (a few rows are one ``INSERT``, more go through ``COPY``).

When PostgreSQL does not answer, the batch is lost and counted, its callers are told that their
calls were not recorded (``metadata.audit`` of the outcome), and the log is unhealthy until a
later batch is committed: meanwhile the AuditGuard stage refuses tools above ``local_write``.

This module imports psycopg (through :mod:`toolgate.stores.postgres_db`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import psycopg

from ..errors import StateUnavailableError
from ..stores.postgres_db import PostgresDatabase
from .log_base import UNRECORDED, AuditLog, AuditStoreError
from .record import AuditRecord
from .rollup import prune_statements, rollup_of, upserts
from .sqlite_rows import row_from_record
from .sqlite_schema import COLUMNS

__all__ = ["PostgresAuditLog"]

_COPY: Final = f"COPY audit_records ({COLUMNS}) FROM STDIN"

#: Batches up to this many records are one multi-row INSERT; larger ones go through COPY.
INSERT_ROWS: Final = 32

_ROW: Final = "(" + ", ".join(["?"] * len(COLUMNS.split(","))) + ")"


@functools.lru_cache(maxsize=INSERT_ROWS)
def _insert(rows: int) -> str:
    return f"INSERT INTO audit_records ({COLUMNS}) VALUES " + ", ".join([_ROW] * rows)


def _one_statement(statements: list[tuple[str, list[Any]]]) -> tuple[str, list[Any]]:
    """``statements`` as one: all but the last become data-modifying ``WITH`` queries, which
    PostgreSQL runs exactly once each, atomically with the last (one round trip)."""
    *first, (last, last_params) = statements
    if not first:
        return last, last_params
    named = ", ".join(f"step{i} AS ({sql})" for i, (sql, _) in enumerate(first))
    params = [value for _, values in first for value in values]
    return f"WITH {named} {last}", [*params, *last_params]


#: Times a batch is written again after PostgreSQL chose it as a deadlock's victim (four
#: replicas writing small batches at once were seen to need more than five).
DEADLOCK_RETRIES: Final = 10
#: Longest pause (seconds) before the first retry of a rolled-back batch; it doubles per
#: attempt, up to :data:`DEADLOCK_PAUSE_CAP`.
DEADLOCK_PAUSE: Final = 0.01
DEADLOCK_PAUSE_CAP: Final = 0.5
_ROLLED_BACK: Final = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)

#: Summary rows one upsert carries at most.
ROLLUP_ROWS: Final = 1000


#: Records one pruning statement deletes at most.
PRUNE_CHUNK: Final = 5000


def _storable(value: Any) -> Any:
    """``value`` as PostgreSQL text can hold it: NUL characters and lone surrogates (which no
    UTF-8 text holds) escaped, so one odd message does not lose its batch."""
    if not isinstance(value, str) or (value.isascii() and "\x00" not in value):
        return value
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value.replace("\x00", "\\x00")


class PostgresAuditLog(AuditLog):
    """The audit log of a replica, kept in the shared PostgreSQL database ``db``.

    The options are those of :class:`~toolgate.audit.sqlite_log.SQLiteAuditLog`; ``durable``
    (default ``True``) makes :meth:`recorded` wait for the commit of a call's record. Retention
    pruning runs on every replica; deleting the same old rows twice is harmless.
    """

    unlimited = "LIMIT ALL"

    def __init__(
        self,
        db: PostgresDatabase,
        *,
        batch_size: int = 2000,
        flush_interval: float = 0.2,
        retention_days: float | None = 30,
        jsonl_path: Path | str | None = None,
        queue_size: int = 100_000,
        prune_interval: float = 3600.0,
        durable: bool = True,
    ) -> None:
        self.db = db
        self._pruner: threading.Thread | None = None
        super().__init__(
            batch_size=batch_size,
            flush_interval=flush_interval,
            retention_days=retention_days,
            jsonl_path=jsonl_path,
            queue_size=queue_size,
            prune_interval=prune_interval,
            durable=durable,
        )
        self._start()

    def __repr__(self) -> str:
        db = getattr(self, "db", None)
        return f"PostgresAuditLog({None if db is None else db.where!r})"

    @property
    def path(self) -> None:
        """No file: the records are in the shared database."""
        return None

    # -- the writer -----------------------------------------------------------------------------

    def _write_records(self, batch: list[AuditRecord]) -> None:
        rows: list[tuple[Any, ...]] = []
        ids: list[str] = []
        written: list[AuditRecord] = []
        for record in batch:
            try:
                rows.append(tuple(_storable(value) for value in row_from_record(record)))
            except Exception as exc:  # noqa: BLE001 - an unserializable value loses its record
                self._lose(1)
                self._fail(f"cannot serialize the record of call {record.call_id!r}", exc)
                self._settle([record.call_id], UNRECORDED)
                continue
            ids.append(record.call_id)
            written.append(record)
        if not rows:
            return
        try:
            self._commit(rows, upserts(rollup_of(written), ROLLUP_ROWS))
        except Exception as exc:  # noqa: BLE001 - counted, reported and settled, never raised
            self._lose(len(rows))
            self._fail("cannot write to the audit log in PostgreSQL", exc)
            self._settle(ids, UNRECORDED)
            return
        self._written += len(rows)
        self._settle(ids, None)
        if self._append_jsonl(written):
            self._healthy = True

    def _commit(self, rows: list[tuple[Any, ...]], summary: list[tuple[str, list[Any]]]) -> None:
        """Write ``rows`` and add them to the health figures' summary, atomically.

        Two replicas adding to the same summary rows can deadlock (the statements of a
        ``WITH`` run in no set order, so row locks cannot be taken in one): PostgreSQL then
        rolls one transaction back whole, and it is written again, so nothing is lost or
        counted twice."""
        for attempt in range(DEADLOCK_RETRIES + 1):
            try:
                if len(rows) <= INSERT_ROWS and len(summary) <= 2:
                    # A few rows (a durable caller waits): one statement, one round trip,
                    # where COPY and a transaction take several.
                    insert = (_insert(len(rows)), list(itertools.chain.from_iterable(rows)))
                    with self.db.autocommit() as conn:
                        conn.execute(*_one_statement([insert, *summary]))
                else:
                    with self.db.write() as conn:
                        with conn.raw.cursor() as cursor, cursor.copy(_COPY) as copy:
                            for row in rows:
                                copy.write_row(row)
                        for statement, params in summary:
                            conn.execute(statement, params)
                return
            except (StateUnavailableError, psycopg.Error) as exc:
                # The database layer reports a rolled-back transaction as unavailability; what
                # PostgreSQL said is its cause.
                cause = exc.__cause__ if isinstance(exc, StateUnavailableError) else exc
                if attempt == DEADLOCK_RETRIES or not isinstance(cause, _ROLLED_BACK):
                    raise
                # Apart, at random: two writers retrying at once would meet again.
                time.sleep(random.uniform(0, min(DEADLOCK_PAUSE * 2**attempt, DEADLOCK_PAUSE_CAP)))

    def _reserve(self) -> None:
        if self.db.wrote_just_now():
            # This thread's call committed its idempotency claim here a moment ago: the server
            # answered and accepted a write, which is what the round trip below would ask.
            return
        # One round trip on a pooled connection: the server answers, and would accept a write
        # (not a standby, not a read-only session).
        with self.db.autocommit() as conn:
            row = conn.execute(
                "SELECT pg_is_in_recovery() AS standby, "
                "current_setting('transaction_read_only') AS read_only"
            ).fetchone()
        if row["standby"] or row["read_only"] != "off":
            raise AuditStoreError("the audit database accepts no writes (a read-only server)")

    # -- reading --------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        if self._closed:
            raise AuditStoreError("the audit log is closed")
        try:
            with self.db.read() as conn:
                yield conn
        except StateUnavailableError as exc:
            raise AuditStoreError(str(exc)) from exc
        except psycopg.Error as exc:
            raise AuditStoreError(f"cannot read the audit log in PostgreSQL: {exc}") from exc

    def _prune_due(self, now: float) -> None:
        # Every replica prunes the shared table: on a thread of its own, so that the callers
        # waiting for their records never wait for a large DELETE.
        if self._pruner is None or not self._pruner.is_alive():
            self._pruner = threading.Thread(
                target=self._prune_quietly, args=(now,), name="toolgate-audit-prune", daemon=True
            )
            self._pruner.start()

    def _prune_quietly(self, now: float) -> None:
        with contextlib.suppress(Exception):
            self.prune(now)

    def _delete_before(self, cutoff: float) -> int:
        # In chunks: each a short statement (within the statement timeout) holding few row
        # locks, however much is due; replicas pruning at once skip each other's rows.
        # The minute rows first: a prune stopped between the two statements leaves records
        # uncounted that the next prune deletes anyway, never counts of deleted records.
        try:
            with self.db.autocommit() as conn:  # at most a few thousand summary rows each
                for statement, params in prune_statements(cutoff):
                    conn.execute(statement, params)
        except (StateUnavailableError, psycopg.Error) as exc:
            raise AuditStoreError(f"cannot prune the audit log in PostgreSQL: {exc}") from exc
        deleted = 0
        while True:
            try:
                with self.db.autocommit() as conn:
                    chunk = conn.execute(
                        "DELETE FROM audit_records WHERE id IN (SELECT id FROM audit_records "
                        "WHERE time < ? ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED)",
                        (cutoff, PRUNE_CHUNK),
                    ).rowcount
            except (StateUnavailableError, psycopg.Error) as exc:
                raise AuditStoreError(f"cannot prune the audit log in PostgreSQL: {exc}") from exc
            deleted += int(chunk)
            if chunk < PRUNE_CHUNK:
                return deleted

    def _release(self) -> None:
        # The database belongs to the gateway's shared state, which closes it.
        return None
