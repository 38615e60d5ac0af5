"""Opening the shared state a configuration names (``state:``, ``redis:`` and their variables).

A bad URL, a server that refuses, a database never upgraded or upgraded by a newer toolgate: each
is a :class:`~toolgate.config.ConfigError` at start that names the setting, never a failure on
the first call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError, StateUnavailableError
from .files import LoadedConfig
from .state_urls import StateUrls

if TYPE_CHECKING:
    from ..stores.postgres_db import PostgresDatabase

__all__ = [
    "SharedState",
    "open_database",
    "open_shared_state",
    "open_state_database",
    "state_urls",
]


@dataclass(slots=True)
class SharedState:
    """What a gateway shares with other replicas (``None`` parts stay in this process)."""

    database: PostgresDatabase | None = None
    redis_url: str | None = None

    def close(self) -> None:
        """Close the database's connections (idempotent)."""
        if self.database is not None:
            self.database.close()


def state_urls(loaded: LoadedConfig, environ: Mapping[str, str] | None = None) -> StateUrls:
    """The URLs the configuration and the environment name; ``ConfigError`` for a bad one."""
    try:
        return StateUrls.resolve(
            loaded.config.state, loaded.config.redis, label=loaded.label, environ=environ
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def open_database(urls: StateUrls) -> PostgresDatabase:
    """Connect to the shared database (``ConfigError`` naming the setting when it cannot)."""
    assert urls.database is not None
    try:
        from ..stores.postgres_db import PostgresDatabase
    except ImportError as exc:
        raise ConfigError(
            f"{urls.database_setting}: PostgreSQL needs the postgres extra: "
            "pip install 'toolgate[postgres]'"
        ) from exc
    try:
        return PostgresDatabase(urls.database)
    except StateUnavailableError as exc:
        raise ConfigError(f"{urls.database_setting}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a malformed URL or option, named below
        raise ConfigError(f"{urls.database_setting}: cannot use this URL: {exc}") from None


def open_shared_state(
    loaded: LoadedConfig, *, environ: Mapping[str, str] | None = None
) -> SharedState:
    """Connect to the configured shared state and check its schema (nothing when none is set)."""
    urls = state_urls(loaded, environ)
    if urls.redis is not None:
        _check_redis(urls)
    return SharedState(_checked_database(urls), urls.redis)


def open_state_database(
    loaded: LoadedConfig, *, environ: Mapping[str, str] | None = None
) -> PostgresDatabase | None:
    """The shared database at the current schema, or ``None`` when ``state:`` names none."""
    return _checked_database(state_urls(loaded, environ))


def _checked_database(urls: StateUrls) -> PostgresDatabase | None:
    if urls.database is None:
        return None
    from ..stores.postgres_schema import SchemaError, check_schema

    database = open_database(urls)
    try:
        check_schema(database)
    except (SchemaError, StateUnavailableError) as exc:
        database.close()
        raise ConfigError(f"{urls.database_setting}: {exc}") from None
    return database


def _check_redis(urls: StateUrls) -> None:
    try:
        import redis
    except ImportError as exc:
        raise ConfigError(
            f"{urls.redis_setting}: Redis needs the redis extra: pip install 'toolgate[redis]'"
        ) from exc
    from .._urls import redact_url, scrub_reason

    assert urls.redis is not None
    try:
        client = redis.Redis.from_url(urls.redis, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.ping()
        finally:
            client.close()
    except (redis.RedisError, ValueError) as exc:
        raise ConfigError(
            f"{urls.redis_setting}: cannot reach Redis at {redact_url(urls.redis)}: "
            f"{scrub_reason(str(exc), urls.redis)}"
        ) from None
