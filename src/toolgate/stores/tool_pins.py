"""Accepted definitions of tools that someone other than the operator describes (MCP servers).

An upstream MCP server can change a tool after the operator trusted it — a new parameter, another
description — or add one (the "rug pull"). Each accepted definition is kept here as a hash (and
the definition itself, to say what changed): a listing whose hash differs is held until an
operator accepts it (:mod:`toolgate.formats.mcp_server.pinning`).

Rows are keyed by the ``MCPServer`` name and the tool's name on that server. A row whose tool is
``""`` marks a server whose first listing was recorded (trust on first use happens once per
server, never again after it). The table lives in the state database (``$TOOLGATE_HOME/
toolgate.db``, versioned as its own component ``tool_pins``) or in the shared PostgreSQL database
(revision ``0005``), so pins survive restarts and every replica holds and releases the same
tools. Every change bumps a generation counter, which a running gateway polls while it holds a
tool, so an acceptance made by another process or replica releases it there too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from .._json import canonical_json
from .sql import SqlDatabase

__all__ = ["SERVER_MARK", "Pin", "ToolPinStore", "ToolPins"]

#: The tool name of the row that marks a server whose first listing was recorded.
SERVER_MARK: Final = ""

_MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (
        """
        CREATE TABLE IF NOT EXISTS tool_pins (
            server TEXT NOT NULL,
            tool TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            definition TEXT NOT NULL,
            accepted_at REAL NOT NULL,
            accepted_by TEXT,
            PRIMARY KEY (server, tool)
        )
        """,
        """
        CREATE TABLE IF NOT EXISTS tool_pins_generation (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            value INTEGER NOT NULL
        )
        """,
        "INSERT INTO tool_pins_generation (id, value) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
    ),
)

_BUMP: Final = "UPDATE tool_pins_generation SET value = value + 1 WHERE id = 1"
_UPSERT: Final = (
    "INSERT INTO tool_pins (server, tool, definition_hash, definition, accepted_at, accepted_by) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (server, tool) DO UPDATE SET "
    "definition_hash = excluded.definition_hash, definition = excluded.definition, "
    "accepted_at = excluded.accepted_at, accepted_by = excluded.accepted_by"
)
_INSERT_NEW: Final = (
    "INSERT INTO tool_pins (server, tool, definition_hash, definition, accepted_at, accepted_by) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (server, tool) DO NOTHING"
)


@dataclass(frozen=True, slots=True)
class Pin:
    """One accepted tool definition."""

    server: str
    tool: str
    definition_hash: str
    definition: Mapping[str, Any]
    """The accepted definition (name, title, description, schemas, annotations)."""
    accepted_at: float
    accepted_by: str | None
    """Who accepted it (``"first listing"`` for trust on first use)."""


class ToolPinStore:
    """Pins in a SQLite database (``path``, or ``":memory:"``) or in the shared PostgreSQL
    database (a :class:`~toolgate.stores.postgres_db.PostgresDatabase` at revision 0005+)."""

    def __init__(self, path: Path | str | SqlDatabase) -> None:
        if isinstance(path, (str, Path)):
            from .sqlite_db import SQLiteDatabase  # sqlite3 only when pins are kept there

            self._db: SqlDatabase = SQLiteDatabase(
                path, component="tool_pins", migrations=_MIGRATIONS
            )
            self._owned = True
        else:
            self._db = path
            self._owned = False  # the gateway closes the shared database

    def pins(self, server: str) -> dict[str, Pin]:
        """The server's accepted definitions by tool name (``SERVER_MARK``: its first listing
        was recorded)."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT server, tool, definition_hash, definition, accepted_at, accepted_by "
                "FROM tool_pins WHERE server = ?",
                (server,),
            ).fetchall()
        return {str(row["tool"]): _pin(row) for row in rows}

    def first_listing(
        self, server: str, definitions: Mapping[str, tuple[str, Mapping[str, Any]]], *, now: float
    ) -> bool:
        """Record the server's first listing (tool → (hash, definition)) unless one was
        recorded before (by this or another process); True when this call recorded it."""
        with self._db.write() as conn:
            marked = conn.execute(_INSERT_NEW, (server, SERVER_MARK, "", "{}", now, None))
            if marked.rowcount != 1:
                return False
            for tool, (digest, definition) in definitions.items():
                conn.execute(
                    _INSERT_NEW,
                    (server, tool, digest, canonical_json(definition), now, "first listing"),
                )
            conn.execute(_BUMP)
        return True

    def accept(
        self,
        server: str,
        definitions: Mapping[str, tuple[str, Mapping[str, Any]]],
        *,
        by: str | None,
        now: float,
    ) -> None:
        """Pin these definitions (tool → (hash, definition)) as accepted by ``by``."""
        with self._db.write() as conn:
            conn.execute(_INSERT_NEW, (server, SERVER_MARK, "", "{}", now, None))
            for tool, (digest, definition) in definitions.items():
                conn.execute(_UPSERT, (server, tool, digest, canonical_json(definition), now, by))
            conn.execute(_BUMP)

    def amend(
        self,
        server: str,
        tool: str,
        definition_hash: str,
        was: Mapping[str, Any],
        definition: Mapping[str, Any],
    ) -> bool:
        """Replace the stored definition of a pin that is still exactly ``(definition_hash,
        was)`` with ``definition`` (same hash: who accepted it and when are kept); False when
        the pin changed meanwhile (another process accepted something else). For a pin written
        before a field was recorded, to record that field as first seen."""
        with self._db.write() as conn:
            done = conn.execute(
                "UPDATE tool_pins SET definition = ? WHERE server = ? AND tool = ? "
                "AND definition_hash = ? AND definition = ?",
                (canonical_json(definition), server, tool, definition_hash, canonical_json(was)),
            )
            return bool(done.rowcount == 1)

    def generation(self) -> int:
        """A number that changes whenever a pin is written (by any process or replica)."""
        with self._db.read() as conn:
            row = conn.execute("SELECT value FROM tool_pins_generation WHERE id = 1").fetchone()
        return 0 if row is None else int(row["value"])

    def close(self) -> None:
        """Release the database when this store opened it (idempotent)."""
        if self._owned:
            self._db.close()


class ToolPins:
    """Where a gateway keeps its pins, opened on first use (a gateway without MCP servers
    creates nothing): the shared database, else the SQLite state file, else memory."""

    def __init__(self, path: Path | None = None, database: SqlDatabase | None = None) -> None:
        self.path = path
        self.database = database
        self._store: ToolPinStore | None = None

    @property
    def persistent(self) -> bool:
        """Whether pins outlive the process."""
        return self.path is not None or self.database is not None

    def store(self) -> ToolPinStore:
        """The store, opened now if it was not yet."""
        if self._store is None:
            where: Path | str | SqlDatabase
            if self.database is not None:
                where = self.database
            else:
                where = ":memory:" if self.path is None else self.path
            self._store = ToolPinStore(where)
        return self._store

    def close(self) -> None:
        """Close the store if it was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


def _pin(row: Any) -> Pin:
    try:
        definition = json.loads(row["definition"])
    except (TypeError, ValueError):
        definition = {}
    by = row["accepted_by"]
    return Pin(
        server=str(row["server"]),
        tool=str(row["tool"]),
        definition_hash=str(row["definition_hash"]),
        definition=definition if isinstance(definition, dict) else {},
        accepted_at=float(row["accepted_at"]),
        accepted_by=None if by is None else str(by),
    )
