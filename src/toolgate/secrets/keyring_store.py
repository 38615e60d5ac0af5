"""Secrets in the OS keyring (macOS Keychain, Windows Credential Locker, the Secret Service or
KWallet on Linux), through the ``keyring`` package.

``keyring`` is imported only when the store is first used, so commands that never touch a secret
never pay for its backend discovery. A keyring "works" when the backend ``keyring`` chooses is a
real one: not its ``fail`` backend (nothing found), not the ``null`` backend (explicitly
disabled), and not a chainer with nothing to chain.

Entries are kept under the service ``toolgate/<scope>`` (``toolgate`` for the global scope) with
the secret's name as the user name, so the OS's keyring manager shows them per extension. The
keyring API cannot list entries, so each scope also holds an index of its names (under the user
name ``__toolgate_names__``) for ``toolgate disconnect`` to remove everything it stored.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from . import SecretStoreError

__all__ = ["INDEX_NAME", "SERVICE", "KeyringSecretStore", "working_keyring"]

log = logging.getLogger("toolgate.secrets")

#: The keyring service of the global scope; a capability's secrets use ``toolgate/<id>``.
SERVICE = "toolgate"
#: The user name under which a scope's list of names is kept (never a secret's name).
INDEX_NAME = "__toolgate_names__"


def _backend_name(backend: Any) -> str:
    name = getattr(backend, "name", None)
    if isinstance(name, str) and name:
        return name
    return f"{type(backend).__module__}.{type(backend).__qualname__}"


def working_keyring() -> tuple[Any | None, str]:
    """The keyring backend to use and its name, or ``None`` and why no keyring works here.

    Never raises: a missing package or a backend that fails while being chosen is a reason.
    """
    try:
        import keyring
        from keyring.backends import chainer, fail
    except ImportError:
        return None, "the keyring package is not installed (pip install 'toolgate[keyring]')"
    try:
        backend = keyring.get_keyring()
    except Exception as exc:  # noqa: BLE001 - any backend may fail while initialising
        return None, f"keyring could not choose a backend ({type(exc).__name__}: {exc})"
    if isinstance(backend, fail.Keyring):
        return None, "keyring found no usable backend (no keychain or Secret Service here)"
    try:
        from keyring.backends import null
    except ImportError:  # pragma: no cover - every supported keyring release has it
        null = None  # type: ignore[assignment]
    if null is not None and isinstance(backend, null.Keyring):
        return None, "keyring is configured with its null backend (keyring disabled)"
    if isinstance(backend, chainer.ChainerBackend):
        chained = list(backend.backends)
        if not chained:
            return None, "keyring found no usable backend to chain"
        return backend, ", ".join(_backend_name(item) for item in chained)
    return backend, _backend_name(backend)


class KeyringSecretStore:
    """Secret values in the OS keyring. ``backend``: a ``keyring`` backend instance (default:
    the one :func:`working_keyring` finds, chosen on first use)."""

    def __init__(self, backend: Any | None = None) -> None:
        self._lock = threading.Lock()
        self._chosen = backend is not None
        self._backend = backend
        self._detail = "" if backend is None else _backend_name(backend)

    def _choose(self) -> Any | None:
        if not self._chosen:
            with self._lock:
                if not self._chosen:
                    self._backend, self._detail = working_keyring()
                    self._chosen = True
        return self._backend

    @property
    def works(self) -> bool:
        """True when a keyring backend is available."""
        return self._choose() is not None

    @property
    def description(self) -> str:
        backend = self._choose()
        if backend is None:
            return f"the OS keyring (not available: {self._detail})"
        return f"the OS keyring ({self._detail})"

    @property
    def unavailable_reason(self) -> str | None:
        """Why no keyring works here (``None`` when one does)."""
        return self._detail if self._choose() is None else None

    def problem(self) -> str | None:
        """Why values cannot be read (no working keyring), or ``None``."""
        if self._choose() is None:
            return (
                f"no OS keyring works here: {self._detail}; set TOOLGATE_SECRET_STORE=file to keep "
                "secrets in a private file instead"
            )
        return None

    @staticmethod
    def _service(scope: str) -> str:
        return f"{SERVICE}/{scope}" if scope else SERVICE

    def _backend_or_raise(self) -> Any:
        backend = self._choose()
        if backend is None:
            raise SecretStoreError(self.problem() or "no OS keyring works here")
        return backend

    def get(self, scope: str, name: str) -> str | None:
        """The value, or ``None`` when it is not set *or the keyring cannot be read* (logged):
        a gateway keeps serving, the capability shows as not connected."""
        backend = self._choose()
        if backend is None or name == INDEX_NAME:
            return None
        try:
            value = backend.get_password(self._service(scope), name)
        except Exception as exc:  # noqa: BLE001 - locked keyrings, D-Bus errors…
            log.warning("keyring read of %s/%s failed: %s", scope, name, exc)
            return None
        return value if isinstance(value, str) else None

    def names(self, scope: str) -> list[str]:
        """The names this store set in ``scope`` (from its index), sorted."""
        backend = self._choose()
        if backend is None:
            return []
        try:
            raw = backend.get_password(self._service(scope), INDEX_NAME)
            names = json.loads(raw) if raw else []
        except Exception as exc:  # noqa: BLE001 - an unreadable or foreign index
            log.warning("keyring index of %r unreadable: %s", scope, exc)
            return []
        return sorted(n for n in names if isinstance(n, str)) if isinstance(names, list) else []

    def _index(self, backend: Any, scope: str, name: str, *, present: bool) -> None:
        names = set(self.names(scope))
        if (name in names) == present:
            return
        names = names | {name} if present else names - {name}
        service = self._service(scope)
        if names:
            backend.set_password(service, INDEX_NAME, json.dumps(sorted(names)))
        else:
            try:
                backend.delete_password(service, INDEX_NAME)
            except Exception as exc:  # noqa: BLE001 - already gone
                log.debug("keyring index of %r not removed: %s", scope, exc)

    def set(self, scope: str, name: str, value: str) -> None:
        """Store (or replace) a value. Raises :class:`SecretStoreError` when no keyring works
        or the keyring refuses the write."""
        if name == INDEX_NAME:
            raise SecretStoreError(f"{INDEX_NAME!r} is reserved by toolgate's keyring store")
        backend = self._backend_or_raise()
        with self._lock:
            try:
                backend.set_password(self._service(scope), name, value)
                self._index(backend, scope, name, present=True)
            except Exception as exc:  # noqa: BLE001 - keyring errors of every backend
                raise SecretStoreError(
                    f"the OS keyring ({self._detail}) refused to store {scope}/{name}: {exc}"
                ) from None

    def delete(self, scope: str, name: str) -> bool:
        """Remove a value; returns whether it was set. Raises like :meth:`set`."""
        if name == INDEX_NAME:
            return False
        backend = self._backend_or_raise()
        with self._lock:
            was_set = self.get(scope, name) is not None
            try:
                if was_set:
                    backend.delete_password(self._service(scope), name)
                self._index(backend, scope, name, present=False)
            except Exception as exc:  # noqa: BLE001 - keyring errors of every backend
                raise SecretStoreError(
                    f"the OS keyring ({self._detail}) refused to remove {scope}/{name}: {exc}"
                ) from None
        return was_set
