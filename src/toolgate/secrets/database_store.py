"""Connection secrets in the shared database, sealed: one set of connections for every replica.

Replicas that share ``state:`` (PostgreSQL) and the key ``TOOLGATE_SECRETS_KEY`` keep the
secrets of their connections (a capability's access token, its public settings) in the table
``secrets``, so ``toolgate connections connect`` on one host connects every replica. Each value
is sealed with AES-GCM under that key, bound to its scope and name (a value copied to another
row does not open), with a fresh 96-bit nonce per write: the database, its backups and its
operators never see a secret in the clear, and without the key the rows are useless.

The key is 32 random bytes, given base64-encoded (``python -c "import os, base64;
print(base64.b64encode(os.urandom(32)).decode())"``); every replica must have the same one.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import time
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import StateUnavailableError
from . import SecretStoreError

__all__ = ["SECRETS_KEY_ENV", "DatabaseSecretStore", "SharedDatabase", "parse_secrets_key"]

#: The environment variable holding the key that seals the shared secrets (base64, 32 bytes).
SECRETS_KEY_ENV: Final = "TOOLGATE_SECRETS_KEY"

_NONCE: Final = 12

log = logging.getLogger("toolgate.secrets")


class SharedDatabase(Protocol):
    """What this store needs of :class:`~toolgate.stores.sql.SqlDatabase` (the stores sit
    above the secrets in the layering, so the protocol is restated here)."""

    def read(self) -> AbstractContextManager[Any]: ...

    def autocommit(self) -> AbstractContextManager[Any]: ...


def parse_secrets_key(text: str) -> bytes:
    """The 32-byte key from its base64 text; :class:`SecretStoreError` naming the variable when
    it is not one."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise SecretStoreError(
            f"{SECRETS_KEY_ENV} must be 32 random bytes in base64 (44 characters), e.g. "
            '`python -c "import os, base64; print(base64.b64encode(os.urandom(32)).decode())"`'
        )
    return key


class DatabaseSecretStore:
    """A :class:`~toolgate.secrets.SecretStore` in the shared database ``db``, sealed with
    ``key`` (see the module docstring)."""

    def __init__(
        self, db: SharedDatabase, key: bytes, *, where: str = "the shared database"
    ) -> None:
        self._db = db
        self._aead = AESGCM(key)
        self._where = where

    @property
    def description(self) -> str:
        return f"{self._where}, sealed with {SECRETS_KEY_ENV} (shared by every replica)"

    @staticmethod
    def _bound(scope: str, name: str) -> bytes:
        return f"{scope}\0{name}".encode()

    def _seal(self, scope: str, name: str, value: str) -> str:
        nonce = os.urandom(_NONCE)
        sealed = self._aead.encrypt(nonce, value.encode(), self._bound(scope, name))
        return base64.b64encode(nonce + sealed).decode("ascii")

    def _open(self, scope: str, name: str, text: str) -> str | None:
        """The value, or ``None`` when the row does not open (another key, another row's
        value, or damaged: all the same to a tool, which must not get it)."""
        try:
            raw = base64.b64decode(text, validate=True)
            value = self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], self._bound(scope, name))
            return value.decode()
        except (InvalidTag, binascii.Error, ValueError):
            return None

    def get(self, scope: str, name: str) -> str | None:
        """The value, or ``None`` when it is not set — or does not open with this key (then
        :meth:`problem` says so: a tool must not receive a value it cannot trust)."""
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT sealed FROM secrets WHERE scope = ? AND name = ?", (scope, name)
            ).fetchone()
        if row is None:
            return None
        value = self._open(scope, name, row["sealed"])
        if value is None:
            log.warning("%s", _mismatch(scope, name))
        return value

    def set(self, scope: str, name: str, value: str) -> None:
        """Store (or replace) a value."""
        with self._db.autocommit() as conn:
            conn.execute(
                "INSERT INTO secrets (scope, name, sealed, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (scope, name) DO UPDATE SET sealed = excluded.sealed, "
                "updated_at = excluded.updated_at",
                (scope, name, self._seal(scope, name, value), time.time()),
            )

    def delete(self, scope: str, name: str) -> bool:
        """Remove a value; returns whether it was set."""
        with self._db.autocommit() as conn:
            cursor = conn.execute("DELETE FROM secrets WHERE scope = ? AND name = ?", (scope, name))
            return bool(cursor.rowcount == 1)

    def names(self, scope: str) -> list[str]:
        """The names set in ``scope``."""
        with self._db.read() as conn:
            rows = conn.execute(
                "SELECT name FROM secrets WHERE scope = ? ORDER BY name", (scope,)
            ).fetchall()
        return [row["name"] for row in rows]

    def problem(self) -> str | None:
        """Why the store cannot be read now: the database does not answer, or its values were
        sealed with another key; else ``None``."""
        try:
            with self._db.read() as conn:
                row = conn.execute("SELECT scope, name, sealed FROM secrets LIMIT 1").fetchone()
        except StateUnavailableError as exc:
            return str(exc)
        if row is not None and self._open(row["scope"], row["name"], row["sealed"]) is None:
            return _mismatch(row["scope"], row["name"])
        return None


def _mismatch(scope: str, name: str) -> str:
    return (
        f"the shared secret {name!r} of {scope or 'the global scope'} does not open with this "
        f"{SECRETS_KEY_ENV}: every replica must have the key the secrets were stored with"
    )
