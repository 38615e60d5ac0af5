"""Agent API keys kept by ``toolgate agents add``: names, key hashes, creation and revocation.

Only the SHA-256 of a key is stored, never the key. The table lives in the state database
(``$TOOLGATE_HOME/toolgate.db``) next to approvals and grants, versioned as its own component
(see :class:`~toolgate.stores.sqlite_db.SQLiteDatabase`), so ``toolgate.yaml`` is never rewritten
(which would lose its comments). Revoked keys stay as rows with ``revoked_at`` set, for the record.

A running server notices keys added or revoked by another process at once: every change bumps a
generation counter, which readers compare (one indexed read) before trusting their cache.

The same table can live in the shared PostgreSQL database of several replicas (pass a
:class:`~toolgate.stores.postgres_db.PostgresDatabase`). This module imports :mod:`sqlite3`; it is
only imported when the store is used.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from ..errors import StateUnavailableError
from .sql import SqlDatabase
from .sqlite_db import SQLiteDatabase

__all__ = ["AGENT_NAME_PATTERN", "AgentKey", "AgentKeyExistsError", "AgentKeyStore"]

#: Seconds a key change made by another process may take to reach a running server.
RECHECK_SECONDS: Final = 0.5

#: Agent names: a letter or digit, then letters, digits, ``.``, ``_`` or ``-`` (64 at most).
AGENT_NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HEX_DIGEST: Final = re.compile(r"^[0-9a-f]{64}$")

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE IF NOT EXISTS agent_keys (
            id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            key_sha256 TEXT NOT NULL UNIQUE,
            created_at REAL NOT NULL,
            revoked_at REAL
        )
        """,
        # One live key per agent: rotating revokes the old key in the same transaction.
        """
        CREATE UNIQUE INDEX IF NOT EXISTS agent_keys_one_live
            ON agent_keys (agent) WHERE revoked_at IS NULL
        """,
        """
        CREATE TABLE IF NOT EXISTS agent_keys_generation (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value INTEGER NOT NULL
        )
        """,
        "INSERT OR IGNORE INTO agent_keys_generation (id, value) VALUES (1, 0)",
    ),
)

_BUMP: Final = "UPDATE agent_keys_generation SET value = value + 1 WHERE id = 1"


class AgentKeyExistsError(ValueError):
    """The agent already has a live key (rotate it with ``replace=True``)."""


@dataclass(frozen=True, slots=True)
class AgentKey:
    """One stored key of one agent."""

    id: str
    agent: str
    key_sha256: str
    """Hex SHA-256 of the key."""
    created_at: float
    revoked_at: float | None = None

    @property
    def fingerprint(self) -> str:
        """A short, non-secret name for the key: ``sha256:`` and 12 hex digits of its hash."""
        return "sha256:" + self.key_sha256[:12]


class AgentKeyStore:
    """Agent keys in a SQLite database (``path``, or ``":memory:"``), or in the shared
    PostgreSQL database (a :class:`~toolgate.stores.postgres_db.PostgresDatabase`)."""

    def __init__(self, path: Path | str | SqlDatabase) -> None:
        if isinstance(path, (str, Path)):
            sqlite = SQLiteDatabase(path, component="agent_keys", migrations=_MIGRATIONS)
            self.path: Path | None = sqlite.path
            """The SQLite file (``None`` in memory or in a server database)."""
            self._db: SqlDatabase = sqlite
            self._shared = False
        else:  # PostgreSQL, whose schema postgres_schema.upgrade made
            self.path = None
            self._db = path
            self._shared = True
        self._checked_at = -RECHECK_SECONDS  # monotonic time of the last read; none yet
        self._seen_generation = 0

    def add(
        self, agent: str, key_sha256: str, *, now: float, replace: bool = False
    ) -> tuple[AgentKey, AgentKey | None]:
        """Store a new key for ``agent``; returns it and the key it replaced (if any).

        Raises :class:`AgentKeyExistsError` when the agent has a live key and ``replace`` is
        false, and ``ValueError`` for a malformed name or digest.
        """
        self._checked_at = -RECHECK_SECONDS  # changed here: the next read is fresh
        if not AGENT_NAME_PATTERN.match(agent):
            raise ValueError(
                f"{agent!r} is not a usable agent name: use letters, digits, '.', '_' and '-' "
                "(starting with a letter or digit, at most 64 characters)"
            )
        if not _HEX_DIGEST.match(key_sha256):
            raise ValueError("key_sha256 must be 64 lower-case hex digits")
        key = AgentKey("key_" + os.urandom(8).hex(), agent, key_sha256, now)
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT id, agent, key_sha256, created_at, revoked_at FROM agent_keys "
                "WHERE agent = ? AND revoked_at IS NULL",
                (agent,),
            ).fetchone()
            old = None if row is None else _key(row)
            if old is not None:
                if not replace:
                    raise AgentKeyExistsError(
                        f"agent {agent!r} already has a key ({old.fingerprint}); pass --replace "
                        "to rotate it (the old key stops working at once)"
                    )
                conn.execute("UPDATE agent_keys SET revoked_at = ? WHERE id = ?", (now, old.id))
            conn.execute(
                "INSERT INTO agent_keys (id, agent, key_sha256, created_at) VALUES (?, ?, ?, ?)",
                (key.id, key.agent, key.key_sha256, key.created_at),
            )
            conn.execute(_BUMP)
        return key, old

    def list_keys(self, *, include_revoked: bool = False) -> list[AgentKey]:
        """Stored keys, live ones only unless ``include_revoked``, by agent then age."""
        where = "" if include_revoked else " WHERE revoked_at IS NULL"
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT id, agent, key_sha256, created_at, revoked_at FROM agent_keys"
                f"{where} ORDER BY agent, created_at"
            ).fetchall()
        return [_key(row) for row in rows]

    def revoke(self, agent: str, *, now: float) -> list[AgentKey]:
        """Revoke the agent's live key; returns what was revoked (empty: it had none)."""
        self._checked_at = -RECHECK_SECONDS  # changed here: the next read is fresh
        with self._db.write() as conn:
            rows = conn.execute(
                "SELECT id, agent, key_sha256, created_at, revoked_at FROM agent_keys "
                "WHERE agent = ? AND revoked_at IS NULL",
                (agent,),
            ).fetchall()
            if rows:
                conn.execute(
                    "UPDATE agent_keys SET revoked_at = ? WHERE agent = ? AND revoked_at IS NULL",
                    (now, agent),
                )
                conn.execute(_BUMP)
        return [
            AgentKey(key.id, key.agent, key.key_sha256, key.created_at, now)
            for key in map(_key, rows)
        ]

    def generation(self) -> int:
        """A number that changes whenever a key is added or revoked (by any process).

        A server asks on every request, so the answer is re-read from the database at most every
        :data:`RECHECK_SECONDS` (a query per request would cost more than the call it
        authenticates): a key added or revoked by another process (``toolgate agents``) takes
        effect within that time; one changed through this store, at once.
        """
        now = time.monotonic()
        if (self.path is not None or self._shared) and now - self._checked_at < RECHECK_SECONDS:
            return self._seen_generation
        try:
            with self._db.read() as conn:
                row = conn.execute(
                    "SELECT value FROM agent_keys_generation WHERE id = 1"
                ).fetchone()
        except StateUnavailableError:
            if not self._shared:
                raise
            # The shared database is down: no key can be added or revoked meanwhile (that
            # writes to it too), so the keys read last are still the keys; ask again next time.
            return self._seen_generation
        self._checked_at, self._seen_generation = now, 0 if row is None else int(row["value"])
        return self._seen_generation

    def close(self) -> None:
        """Release the database (idempotent)."""
        self._db.close()

    def __enter__(self) -> AgentKeyStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _key(row: Any) -> AgentKey:
    revoked = row["revoked_at"]
    return AgentKey(
        id=str(row["id"]),
        agent=str(row["agent"]),
        key_sha256=str(row["key_sha256"]),
        created_at=float(row["created_at"]),
        revoked_at=None if revoked is None else float(revoked),
    )
