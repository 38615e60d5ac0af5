"""Secret storage: where connection secrets live, outside every configuration file.

Secrets are kept per *scope*: a capability's secrets under its capability id, secrets
that Kubernetes-style resources reference (``secretRef``) under :data:`GLOBAL_SCOPE`. A tool
receives only the secrets it declares, from its own scope (see :class:`SecretResolver`).

Where they are kept (:func:`open_secret_store`): with a shared database (``state:``) and
``TOOLGATE_SECRETS_KEY`` set, in that database, sealed, for every replica
(:mod:`~toolgate.secrets.database_store`); else the OS keyring when one works
(:mod:`~toolgate.secrets.keyring_store`), otherwise a JSON file only the user can read,
``$TOOLGATE_HOME/secrets/secrets.json`` (:mod:`~toolgate.secrets.file_store`). The environment
variable ``TOOLGATE_SECRET_STORE`` (``auto``, ``database``, ``keyring`` or ``file``) forces the
choice.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigError
from ..model import Tool

if TYPE_CHECKING:
    from .database_store import SharedDatabase
    from .file_store import FileSecretStore

__all__ = [
    "GLOBAL_SCOPE",
    "SECRET_STORE_ENV",
    "SECRET_STORE_MODES",
    "ChosenSecretStore",
    "MemorySecretStore",
    "SecretResolver",
    "SecretStore",
    "SecretStoreError",
    "open_secret_store",
    "secrets_file",
    "store_names",
    "store_problem",
]

#: The scope of secrets not tied to one capability (``secretRef`` of resources, ``secrets=``).
GLOBAL_SCOPE = ""


class SecretStore(Protocol):
    """Reads and writes secret values by scope and name."""

    @property
    def description(self) -> str:
        """Where the values are kept, in words for the operator (``the OS keyring (…)``)."""
        ...

    def get(self, scope: str, name: str) -> str | None:
        """The value, or ``None`` when it is not set."""
        ...

    def set(self, scope: str, name: str, value: str) -> None:
        """Store (or replace) a value."""
        ...

    def delete(self, scope: str, name: str) -> bool:
        """Remove a value; returns whether it was set."""
        ...


class MemorySecretStore:
    """Secrets held in memory for the gateway's lifetime (tests, embedding applications)."""

    def __init__(self, values: Mapping[tuple[str, str], str] | None = None) -> None:
        self._values = dict(values or {})
        self._lock = threading.Lock()

    @property
    def description(self) -> str:
        return "memory (lost when the process ends)"

    def get(self, scope: str, name: str) -> str | None:
        return self._values.get((scope, name))

    def set(self, scope: str, name: str, value: str) -> None:
        with self._lock:
            self._values[(scope, name)] = value

    def delete(self, scope: str, name: str) -> bool:
        with self._lock:
            return self._values.pop((scope, name), None) is not None


class SecretResolver:
    """The secrets one tool receives: the names it declares, from its own scope only.

    A capability's tool (``tool.capability`` set) reads its capability's scope and nothing else,
    so one extension never sees another's keys. Other tools read the gateway's ``secrets=``
    mapping first, then the store's global scope.
    """

    def __init__(self, static: Mapping[str, str] | None, store: SecretStore | None) -> None:
        self.static = dict(static or {})
        self.store = store

    def for_tool(self, tool: Tool) -> dict[str, str]:
        """``{name: value}`` for each declared secret that is set."""
        found: dict[str, str] = {}
        for name in tool.secrets:
            value = self.get(tool, name)
            if value is not None:
                found[name] = value
        return found

    def get(self, tool: Tool, name: str) -> str | None:
        """One secret as ``tool`` would receive it (whether or not it declares it)."""
        if tool.capability is not None:
            return None if self.store is None else self.store.get(tool.capability, name)
        value = self.static.get(name)
        if value is None and self.store is not None:
            value = self.store.get(GLOBAL_SCOPE, name)
        return value


class SecretStoreError(ConfigError):
    """A secret store cannot be read or written (unsafe file permissions, no working keyring,
    a keyring that refuses a write)."""


def store_problem(store: SecretStore | None) -> str | None:
    """Why ``store`` cannot be read now, for stores that can tell (the file and keyring stores
    have a ``problem()`` method); ``None`` when it can be read or cannot tell."""
    problem = getattr(store, "problem", None)
    if not callable(problem):
        return None
    reason = problem()
    return reason if isinstance(reason, str) else None


def store_names(store: SecretStore | None, scope: str) -> list[str]:
    """The names set in ``scope``, for stores that can list them (``names()``); else ``[]``."""
    names = getattr(store, "names", None)
    if not callable(names):
        return []
    found = names(scope)
    return [name for name in found if isinstance(name, str)] if isinstance(found, list) else []


#: The environment variable that forces where secrets live: ``auto`` (default), ``keyring``,
#: ``file``.
SECRET_STORE_ENV = "TOOLGATE_SECRET_STORE"
SECRET_STORE_MODES = ("auto", "database", "keyring", "file")


def secrets_file(home: Path) -> Path:
    """The secrets file of the file store: ``$TOOLGATE_HOME/secrets/secrets.json``."""
    return home / "secrets" / "secrets.json"


class ChosenSecretStore:
    """The store :func:`open_secret_store` picks, picked on first use so that commands which
    never read a secret never load a keyring backend.

    ``auto``: the shared ``database`` when one is given with a ``secrets_key``; else the file
    store when its file already exists (holding values, or refused for unsafe permissions:
    switching stores silently would lose the connections made so far), else the OS keyring when
    one works, else the file store. ``database`` / ``keyring`` / ``file``: that store only (a
    forced keyring that does not work reports why in :meth:`problem`; a forced database needs
    both, else :class:`~toolgate.errors.ConfigError` at once).
    """

    def __init__(
        self,
        home: Path,
        mode: str = "auto",
        *,
        database: SharedDatabase | None = None,
        secrets_key: str | None = None,
    ) -> None:
        if mode not in SECRET_STORE_MODES:
            raise ConfigError(
                f"{SECRET_STORE_ENV}={mode!r} is not a secret store; use one of "
                f"{', '.join(SECRET_STORE_MODES)}"
            )
        self.home = home
        self.mode = mode
        self._shared: SecretStore | None = None
        if secrets_key and database is not None and mode in ("auto", "database"):
            from .database_store import DatabaseSecretStore, parse_secrets_key

            where = getattr(database, "where", "the shared database")
            self._shared = DatabaseSecretStore(
                database, parse_secrets_key(secrets_key), where=where
            )
        elif mode == "database":
            missing = "TOOLGATE_SECRETS_KEY" if database is not None else "state: (PostgreSQL)"
            raise ConfigError(
                f"{SECRET_STORE_ENV}=database needs {missing}: the shared secrets live in the "
                "shared database, sealed with a key every replica has"
            )
        self._store: SecretStore | None = None
        self._reason = ""
        self._lock = threading.Lock()

    def _file(self) -> FileSecretStore:
        from .file_store import FileSecretStore

        return FileSecretStore(secrets_file(self.home))

    def _choose(self) -> tuple[SecretStore, str]:
        from .keyring_store import KeyringSecretStore

        forced = f"{SECRET_STORE_ENV}={self.mode}"
        if self._shared is not None:
            return self._shared, (
                forced
                if self.mode == "database"
                else "a shared database and TOOLGATE_SECRETS_KEY are configured"
            )
        if self.mode == "file":
            return self._file(), forced
        if self.mode == "keyring":
            return KeyringSecretStore(), forced
        file_store = self._file()
        if file_store.path.exists() and (file_store.problem() or file_store.scopes()):
            return file_store, (
                "it already holds secrets; set "
                f"{SECRET_STORE_ENV}=keyring to use the OS keyring instead"
            )
        keyring_store = KeyringSecretStore()
        if keyring_store.works:
            return (
                keyring_store,
                f"an OS keyring works here; set {SECRET_STORE_ENV}=file to use a file",
            )
        return file_store, f"no OS keyring works here: {keyring_store.unavailable_reason}"

    @property
    def store(self) -> SecretStore:
        """The store in use (chosen now if it was not yet)."""
        if self._store is None:
            with self._lock:
                if self._store is None:
                    self._store, self._reason = self._choose()
        return self._store

    @property
    def reason(self) -> str:
        """Why this store was chosen, for the operator."""
        _ = self.store
        return self._reason

    @property
    def description(self) -> str:
        return self.store.description

    def get(self, scope: str, name: str) -> str | None:
        return self.store.get(scope, name)

    def set(self, scope: str, name: str, value: str) -> None:
        self.store.set(scope, name, value)

    def delete(self, scope: str, name: str) -> bool:
        return self.store.delete(scope, name)

    def names(self, scope: str) -> list[str]:
        """The names set in ``scope`` (see :func:`store_names`)."""
        return store_names(self.store, scope)

    def problem(self) -> str | None:
        """Why the store cannot be read now (see :func:`store_problem`)."""
        return store_problem(self.store)


def open_secret_store(
    home: Path,
    environ: Mapping[str, str] | None = None,
    *,
    database: SharedDatabase | None = None,
) -> ChosenSecretStore:
    """The secret store of a gateway whose ``$TOOLGATE_HOME`` is ``home``: the shared
    ``database`` when ``TOOLGATE_SECRETS_KEY`` is set, else the OS keyring when one works, else
    ``$TOOLGATE_HOME/secrets/secrets.json`` (see :class:`ChosenSecretStore`).

    ``TOOLGATE_SECRET_STORE`` in ``environ`` (default ``os.environ``) forces ``database``,
    ``keyring`` or ``file``; any other value, a malformed key, or ``database`` without a
    database or a key raises :class:`~toolgate.errors.ConfigError`. Opens nothing yet.
    """
    env = os.environ if environ is None else environ
    mode = (env.get(SECRET_STORE_ENV) or "auto").strip().lower()
    return ChosenSecretStore(
        home, mode, database=database, secrets_key=env.get("TOOLGATE_SECRETS_KEY") or None
    )
