"""Secrets every replica must hold the same of (the key sealing MCP ``requestState``), kept in
the shared database: the first replica that asks makes one at random, the others read it."""

from __future__ import annotations

import os

from .sql import SqlDatabase

__all__ = ["shared_key"]


def shared_key(db: SqlDatabase, name: str, *, size: int = 32) -> bytes:
    """The secret called ``name`` (``size`` random bytes, made once for every replica)."""
    with db.write() as conn:
        # Of replicas starting together, one insert wins; the others wait for it, do nothing,
        # and read the winner's value.
        conn.execute(
            "INSERT INTO toolgate_keys (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
            (name, os.urandom(size).hex()),
        )
        row = conn.execute("SELECT value FROM toolgate_keys WHERE name = ?", (name,)).fetchone()
    return bytes.fromhex(row["value"])
