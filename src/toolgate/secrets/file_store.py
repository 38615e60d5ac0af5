"""Secrets in a JSON file only the user can read: the store used where no OS keyring works.

The file (``$TOOLGATE_HOME/secrets/secrets.json`` by default) is created with mode 0600 inside a
folder created with mode 0700, and every write replaces it atomically (a private temporary file
in the same folder, flushed to disk, then renamed over it), so a crash never leaves half a file.
A file that other users can read or write, that another user owns, or whose folder other users
can write to, is refused: its values are not read, :meth:`FileSecretStore.problem` says why and
how to fix it, and writing raises :class:`SecretStoreError`.

Layout (``version`` guards future changes)::

    {"version": 1, "scopes": {"notion": {"accessToken": "…", "apiBaseUrl": "…"}}}

Writers in several processes (``toolgate connect`` while a gateway runs) are serialised with an
advisory lock on a ``.lock`` file next to it (POSIX only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import SecretStoreError

__all__ = ["FILE_VERSION", "FileSecretStore"]

log = logging.getLogger("toolgate.secrets")

FILE_VERSION = 1
_POSIX = os.name == "posix"


def _mode(value: int) -> str:
    return f"{stat.S_IMODE(value):04o}"


class FileSecretStore:
    """Secret values by scope and name in one private JSON file (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        """The JSON file; created on the first write."""
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int, int, int], dict[str, dict[str, str]]] | None = None

    @property
    def description(self) -> str:
        return f"the file {self.path} (readable only by you)"

    # -- reading ------------------------------------------------------------------------------

    def _unsafe(self, info: os.stat_result, what: Path, *, folder: bool) -> str | None:
        """Why a file (or its folder) with this status must not be trusted, or ``None``."""
        if not _POSIX:
            return None  # POSIX modes mean nothing on Windows; the profile folder is private.
        if info.st_uid != os.getuid():
            return f"{what} belongs to another user (uid {info.st_uid}); it must be yours"
        if folder:
            if info.st_mode & 0o022:
                return (
                    f"other users can write to the folder {what} (mode {_mode(info.st_mode)}), "
                    f"so they could replace the secrets file; run 'chmod 700 {what}'"
                )
            return None
        if info.st_mode & 0o077:
            return (
                f"other users can read or write {what} (mode {_mode(info.st_mode)}); "
                f"run 'chmod 600 {what}' (and rotate the secrets it holds if others read it)"
            )
        return None

    def _read(self) -> dict[str, dict[str, str]]:
        """Every value, by scope. Raises :class:`SecretStoreError` for an unsafe or broken file."""
        try:
            folder_info = os.stat(self.path.parent)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SecretStoreError(
                f"cannot read the secrets folder {self.path.parent}: {exc}"
            ) from None
        problem = self._unsafe(folder_info, self.path.parent, folder=True)
        if problem is not None:
            raise SecretStoreError(problem)
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise SecretStoreError(f"cannot open the secrets file {self.path}: {exc}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise SecretStoreError(f"the secrets file {self.path} is not a regular file")
            problem = self._unsafe(info, self.path, folder=False)
            if problem is not None:
                raise SecretStoreError(problem)
            signature = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_mode)
            cached = self._cache
            if cached is not None and cached[0] == signature:
                return cached[1]
            raw = handle.read()
        scopes = self._parse(raw)
        self._cache = (signature, scopes)
        return scopes

    def _parse(self, raw: bytes) -> dict[str, dict[str, str]]:
        try:
            document: Any = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SecretStoreError(
                f"the secrets file {self.path} is not valid JSON: {exc}"
            ) from None
        if document == {}:
            return {}
        if not isinstance(document, dict) or document.get("version") != FILE_VERSION:
            raise SecretStoreError(
                f"the secrets file {self.path} is not a toolgate secrets file of version "
                f'{FILE_VERSION} (expected an object with "version": {FILE_VERSION})'
            )
        scopes = document.get("scopes", {})
        if not isinstance(scopes, dict) or not all(
            isinstance(values, dict) and all(isinstance(v, str) for v in values.values())
            for values in scopes.values()
        ):
            raise SecretStoreError(
                f"the secrets file {self.path}: /scopes must map each scope to an object of "
                "string values"
            )
        return {scope: dict(values) for scope, values in scopes.items()}

    def problem(self) -> str | None:
        """Why the values cannot be read now (unsafe permissions, a broken file), or ``None``."""
        try:
            self._read()
        except SecretStoreError as exc:
            return exc.message
        return None

    def get(self, scope: str, name: str) -> str | None:
        """The value, or ``None`` when it is not set *or the file is refused*: a gateway keeps
        serving (the capability shows as not usable, with :meth:`problem` as the reason)."""
        try:
            return self._read().get(scope, {}).get(name)
        except SecretStoreError as exc:
            log.warning("secrets not read: %s", exc.message)
            return None

    def scopes(self) -> list[str]:
        """The scopes holding at least one value, sorted (empty when the file is refused)."""
        try:
            return sorted(scope for scope, values in self._read().items() if values)
        except SecretStoreError:
            return []

    def names(self, scope: str) -> list[str]:
        """The names set in ``scope``, sorted (empty when the file is refused)."""
        try:
            return sorted(self._read().get(scope, {}))
        except SecretStoreError:
            return []

    # -- writing ------------------------------------------------------------------------------

    def _ensure_folder(self) -> None:
        folder = self.path.parent
        missing: list[Path] = []
        while not folder.exists():
            missing.append(folder)
            folder = folder.parent
        for item in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another process made it first
                item.mkdir(mode=0o700)

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """This thread and process alone may read-modify-write the file."""
        with self._lock:
            if not _POSIX:
                yield
                return
            import fcntl  # POSIX only

            fd = os.open(
                self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # closing releases the lock

    def _write(self, scopes: dict[str, dict[str, str]]) -> None:
        document = {"version": FILE_VERSION, "scopes": {k: v for k, v in scopes.items() if v}}
        data = json.dumps(document, indent=2, sort_keys=True).encode("utf-8") + b"\n"
        # mkstemp creates the file with mode 0600, so the values are never readable by others,
        # not even for the moment before the rename.
        fd, temporary = tempfile.mkstemp(prefix=".secrets-", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        self._cache = None

    def _update(self, scope: str, name: str, value: str | None) -> bool:
        try:
            self._ensure_folder()
            with self._exclusive():
                scopes = self._read()
                current = scopes.get(scope, {})
                was_set = name in current
                if value is None and not was_set:
                    return False
                updated = {**scopes, scope: dict(current)}
                if value is None:
                    del updated[scope][name]
                else:
                    updated[scope][name] = value
                self._write(updated)
                return was_set
        except OSError as exc:
            raise SecretStoreError(f"cannot write the secrets file {self.path}: {exc}") from None

    def set(self, scope: str, name: str, value: str) -> None:
        """Store (or replace) a value. Raises :class:`SecretStoreError` when the file is refused
        or cannot be written."""
        self._update(scope, name, value)

    def delete(self, scope: str, name: str) -> bool:
        """Remove a value; returns whether it was set. Raises like :meth:`set`."""
        return self._update(scope, name, None)
