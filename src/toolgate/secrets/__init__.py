"""Secret storage: where connection secrets live, outside every configuration file.

Secrets are kept per *scope*: a Jingle capability's secrets under its capability id, secrets
that Kubernetes-style resources reference (``secretRef``) under :data:`GLOBAL_SCOPE`. A tool
receives only the secrets it declares, from its own scope (see :class:`SecretResolver`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from ..model import Tool

__all__ = ["GLOBAL_SCOPE", "MemorySecretStore", "SecretResolver", "SecretStore"]

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
