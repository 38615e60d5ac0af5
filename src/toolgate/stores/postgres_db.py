"""A pool of PostgreSQL connections that speaks the stores' SQL.

The SQL stores (agent keys, idempotency records, rate-limit counters, approvals) are written once,
in the SQL that SQLite and PostgreSQL share, with ``?`` and ``:name`` placeholders as
:mod:`sqlite3` takes them. :class:`PostgresDatabase` offers the same ``read()`` / ``write()``
blocks as :class:`~toolgate.stores.sqlite_db.SQLiteDatabase`; the connection it yields rewrites
the placeholders for psycopg (once per statement text, cached) and returns rows that are read by
column name, as ``sqlite3.Row`` is.

Failures of the server itself — refused, gone, restarting, the pool exhausted past its timeout —
raise :class:`~toolgate.errors.StateUnavailableError`, which the pipeline turns into an
``unavailable`` outcome. After such a failure every operation fails at once (no caller waits out
the pool's timeout, stalling the server's event loop) while a thread tries the server every half
second; when it answers, the pool's broken connections are replaced and operations resume, so
the gateway reconnects by itself when the server is back.

The schema is not made here: :func:`~toolgate.stores.postgres_schema.upgrade` makes and
upgrades it, and :func:`~toolgate.stores.postgres_schema.check_schema` refuses one it does not know.

This module imports psycopg (``pip install 'toolgate[postgres]'``); it is only imported when a
``postgresql://`` state URL is configured.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, Final, cast

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from .._urls import redact_url, scrub_reason
from ..errors import StateUnavailableError

__all__ = ["PostgresConnection", "PostgresDatabase", "redact_url"]

#: Seconds to wait for a connection from the pool (or for the server to accept one). Short: a
#: call waits at most this long before ending in ``unavailable`` while PostgreSQL is down.
POOL_TIMEOUT: Final = 2.0

#: Seconds between attempts to reach a server that went away (see ``_probe``).
PROBE_INTERVAL: Final = 0.5

#: Seconds a statement may run before the server cancels it.
STATEMENT_TIMEOUT_MS: Final = 5000

#: Seconds for which a write a thread just committed shows that the server accepts writes
#: (see :meth:`PostgresDatabase.wrote`).
WRITE_PROOF_AGE: Final = 0.05

_NAMED = re.compile(r"(?<!:):([A-Za-z_][A-Za-z0-9_]*)")


@lru_cache(maxsize=512)
def _to_psycopg(sql: str) -> str:
    """``?`` and ``:name`` placeholders (sqlite3's) as ``%s`` and ``%(name)s`` (psycopg's)."""
    sql = sql.replace("%", "%%")
    sql = _NAMED.sub(r"%(\1)s", sql)
    return sql.replace("?", "%s")


class PostgresConnection:
    """A psycopg connection inside one transaction, taking sqlite3-style SQL."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[dict[str, Any]]) -> None:
        self._conn = conn

    def execute(
        self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> psycopg.Cursor[dict[str, Any]]:
        """Run one statement; the cursor has ``fetchone``, ``fetchall`` and ``rowcount``."""
        return self._conn.execute(_to_psycopg(sql), params or None)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement for each row (pipelined)."""
        with self._conn.cursor() as cursor:
            cursor.executemany(_to_psycopg(sql), rows)

    @property
    def raw(self) -> psycopg.Connection[dict[str, Any]]:
        """The psycopg connection (for ``COPY``)."""
        return self._conn


class PostgresDatabase:
    """A connection pool to one PostgreSQL database, shared by every store of a process.

    ``url`` is a ``postgresql://`` URL (libpq's form). Opening connects once, waiting up to
    ``timeout`` seconds, and raises :class:`StateUnavailableError` naming the server and the
    cause (``role "toolgate" does not exist``, ``Connection refused``…) when it cannot; only
    then does the pool start, so a server that refuses leaves no pool retrying in the background
    and logging its attempts.
    """

    #: The driver's error for a violated unique or check constraint.
    IntegrityError: type[Exception] = psycopg.IntegrityError

    #: Tables that need an insertion order have a ``seq`` identity column here.
    insertion_order = "seq"

    def __init__(
        self, url: str, *, max_size: int = 8, timeout: float = POOL_TIMEOUT, name: str = "toolgate"
    ) -> None:
        self.url = url
        self.where = redact_url(url)
        """The URL without its password."""
        self._timeout = timeout
        self._state_lock = threading.Lock()
        self._down: StateUnavailableError | None = None
        """While the server is known to be gone: the error every operation raises at once."""
        self._prober: threading.Thread | None = None
        self._closed = False
        self._local = threading.local()
        connect_timeout = max(1, int(timeout))
        try:
            psycopg.connect(url, connect_timeout=connect_timeout, autocommit=True).close()
        except psycopg.Error as exc:
            raise StateUnavailableError(
                f"cannot connect to PostgreSQL at {self.where}: {_connect_failure(exc, url)}"
            ) from exc
        self._pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=timeout,
            open=False,
            name=name,
            kwargs={
                "row_factory": dict_row,
                # Transactions are explicit (write()); a single statement needs no BEGIN/COMMIT
                # round trips around it (autocommit()).
                "autocommit": True,
                "connect_timeout": connect_timeout,
                "application_name": name,
                "options": f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            },
            # A server that restarted is reached again on its own: the pool retries failed
            # connections for as long as the process lives.
            reconnect_timeout=0,
        )
        try:
            self._pool.open(wait=True, timeout=timeout)
        except psycopg_pool.PoolTimeout as exc:
            self._pool.close()
            raise StateUnavailableError(
                f"cannot connect to PostgreSQL at {self.where} within {timeout:g} s"
            ) from exc

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.where!r})"

    def _unavailable(self, exc: Exception, *, outage: bool = True) -> StateUnavailableError:
        """The error for a server that cannot serve this operation. For an ``outage`` (the
        server is gone or refuses connections) every operation fails at once from now on,
        until the prober (a thread of its own) reaches the server again."""
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        error = StateUnavailableError(f"PostgreSQL at {self.where} is unavailable ({reason})")
        if outage:
            with self._state_lock:
                self._down = error
                if self._prober is None:
                    self._prober = threading.Thread(
                        target=self._probe, name=f"toolgate-pg-probe:{self.where}", daemon=True
                    )
                    self._prober.start()
        return error

    def _probe(self) -> None:
        # Why a breaker: callers run on the server's event loop, and each of them waiting out
        # the pool's timeout would stall every other request of the replica while the server is
        # down. They fail at once instead, and one thread waits for the server.
        while not self._closed:
            time.sleep(PROBE_INTERVAL)
            try:
                with psycopg.connect(
                    self.url, connect_timeout=max(1, int(self._timeout)), autocommit=True
                ) as conn:
                    conn.execute("SELECT 1")
            except psycopg.Error:
                continue
            # Drop the connections the outage broke before anyone uses them (the pool would
            # repair itself; this is only quicker).
            with contextlib.suppress(Exception):
                self._pool.check()
            with self._state_lock:
                # Cleared with the prober under one lock: a failure just after starts a new one.
                self._down = None
                self._prober = None
            return
        with self._state_lock:
            self._prober = None

    @contextmanager
    def _connection(self) -> Iterator[PostgresConnection]:
        down = self._down
        if down is not None:
            raise StateUnavailableError(str(down))
        try:
            with self._pool.connection() as conn:
                # The pool's connections return dict rows (row_factory above).
                yield PostgresConnection(cast("psycopg.Connection[dict[str, Any]]", conn))
        except psycopg_pool.PoolTimeout as exc:
            # No connection at all is an outage; every connection busy is load (shed it for
            # this call only, the server is there).
            empty = self._pool.get_stats().get("pool_size", 0) == 0
            raise self._unavailable(exc, outage=empty) from exc
        except psycopg.OperationalError as exc:
            raise self._errors(exc) from exc

    def _errors(self, exc: psycopg.OperationalError) -> StateUnavailableError:
        if isinstance(exc, psycopg.errors.QueryCanceled):
            return StateUnavailableError(
                f"PostgreSQL at {self.where} did not answer within "
                f"{STATEMENT_TIMEOUT_MS / 1000:g} s"
            )
        return self._unavailable(exc, outage=_is_outage(exc))

    def read(self) -> Any:
        """A connection for read-only statements (each sees the data committed when it runs)."""
        return self._connection()

    @contextmanager
    def write(self) -> Iterator[PostgresConnection]:
        """A connection inside a transaction: committed when the block ends, else rolled back."""
        with self._connection() as conn, conn.raw.transaction():
            yield conn

    def autocommit(self) -> Any:
        """A connection whose statements commit as they run: one round trip each, for writes
        that are a single atomic statement (no ``BEGIN`` and ``COMMIT`` around them)."""
        return self._connection()

    @contextmanager
    def dedicated(self) -> Iterator[PostgresConnection]:
        """A connection of its own, outside the pool (autocommit; closed after the block): for
        a session-level lock held while the pool's connections do the work."""
        try:
            with psycopg.connect(
                self.url,
                autocommit=True,
                row_factory=dict_row,
                connect_timeout=max(1, int(self._timeout)),
            ) as conn:
                yield PostgresConnection(conn)
        except psycopg.OperationalError as exc:
            raise self._errors(exc) from exc

    def wrote(self) -> None:
        """This thread has just committed a write here (an idempotency claim): for
        :data:`WRITE_PROOF_AGE` seconds that stands in for a round trip asking whether the server
        accepts writes (:meth:`wrote_just_now`)."""
        self._local.wrote_at = time.monotonic()

    def wrote_just_now(self) -> bool:
        """Whether this thread committed a write here within :data:`WRITE_PROOF_AGE` seconds
        (and the server is not known to be down since). Each write answers once: a second ask
        needs a write of its own."""
        at: float | None = getattr(self._local, "wrote_at", None)
        if at is None:
            return False
        self._local.wrote_at = None
        return self._down is None and time.monotonic() - at <= WRITE_PROOF_AGE

    def check(self) -> bool:
        """Whether the server answers now."""
        try:
            with self._connection() as conn:
                conn.execute("SELECT 1").fetchone()
        except StateUnavailableError:
            return False
        return True

    def close(self) -> None:
        """Close every connection (idempotent)."""
        self._closed = True
        self._pool.close()


#: How libpq starts the reason of a failed connection attempt (the URL is named already).
_ATTEMPT = re.compile(
    r"^(?:connection (?:failed|is bad):\s*)?(?:connection to server (?:at|on) .*? failed:\s*)?"
    r"(?:FATAL:\s*)?"
)
#: Reasons the scale-out guide tells how to fix.
_MISSING = re.compile(r'^(role|database) "[^"]*" does not exist$')


def _connect_failure(exc: BaseException, url: str) -> str:
    """Why connecting to ``url`` failed, on one line: the server's reason (``role "toolgate"
    does not exist``) or the network's (``Connection refused``), with libpq's hint, and never
    the URL's password."""
    raw = str(exc).strip().splitlines()
    first = raw[0].strip() if raw else ""
    if not first:
        return type(exc).__name__
    reason = _ATTEMPT.sub("", first) or first
    # libpq's hint of this attempt is its next line, indented ("Is the server running…?").
    if len(raw) > 1 and raw[1][:1].isspace() and raw[1].strip():
        hint = raw[1].strip()
        reason += f" ({hint[:1].lower()}{hint[1:]})"
    if _MISSING.match(reason):
        reason += '; create it: see "Create the role and the database" in docs/guides/scale-out.md'
    try:
        password = psycopg.conninfo.conninfo_to_dict(url).get("password")
    except psycopg.Error:
        password = None
    if isinstance(password, str) and password:
        reason = _mask(reason, password)
    return scrub_reason(reason, url)


def _mask(reason: str, password: str) -> str:
    """``reason`` with ``password`` masked: everywhere when it is long enough to mean nothing
    else, only where it stands alone when it is short (a password ``e`` must not turn
    "Connection refused" into "Conn***ction r***fus***d")."""
    if len(password) >= _SHORT_PASSWORD:
        return reason.replace(password, "***")
    return re.sub(rf"(?<![0-9A-Za-z]){re.escape(password)}(?![0-9A-Za-z])", "***", reason)


#: Below this many characters a password is masked only where it stands alone.
_SHORT_PASSWORD: Final = 4


#: SQLSTATEs of a server going away: admin, crash or restart shutdown (class 08 is the
#: connection's own failures).
_SHUTDOWN_STATES: Final = frozenset({"57P01", "57P02", "57P03"})


def _is_outage(exc: psycopg.OperationalError) -> bool:
    """Whether ``exc`` says the server is gone (not a deadlock, a full disk, a lock timeout:
    errors of one statement, which the next one may not meet)."""
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _SHUTDOWN_STATES
