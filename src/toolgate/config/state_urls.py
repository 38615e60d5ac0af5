"""Which shared state a gateway uses: the ``state:`` and ``redis:`` settings and their
environment variables, checked before anything connects."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "DATABASE_URL_VARIABLE",
    "REDIS_URL_VARIABLE",
    "StateUrls",
    "check_redis_url",
    "check_state_url",
]

#: Names the shared PostgreSQL database; wins over ``state:`` in ``toolgate.yaml``.
DATABASE_URL_VARIABLE = "TOOLGATE_DATABASE_URL"
#: Names the Redis server of the rate-limit counters; wins over ``redis:``.
REDIS_URL_VARIABLE = "TOOLGATE_REDIS_URL"

_STATE_SCHEMES = ("postgresql", "postgres")
_REDIS_SCHEMES = ("redis", "rediss", "unix")


def check_state_url(url: str) -> str:
    """``url`` if it is a PostgreSQL URL with a host or socket; else ``ValueError`` saying why."""
    parts = urlsplit(url)
    if parts.scheme not in _STATE_SCHEMES:
        raise ValueError(
            f"must be a postgresql:// URL (e.g. postgresql://toolgate@db.internal/toolgate), "
            f"not {parts.scheme + '://' if parts.scheme else 'a bare name'}…; leave it out "
            "to keep the state in the embedded SQLite file"
        )
    if not parts.path.strip("/"):
        raise ValueError("names no database: add it after the host, e.g. …/toolgate")
    return url


def check_redis_url(url: str) -> str:
    """``url`` if it is a Redis URL; else ``ValueError`` saying why."""
    parts = urlsplit(url)
    if parts.scheme not in _REDIS_SCHEMES:
        raise ValueError(
            "must be a redis://, rediss:// or unix:// URL (e.g. redis://127.0.0.1:6379/0)"
        )
    return url


@dataclass(frozen=True, slots=True)
class StateUrls:
    """The shared state a gateway is told to use, and which setting named each part."""

    database: str | None
    database_setting: str
    redis: str | None
    redis_setting: str

    @classmethod
    def resolve(
        cls,
        state: str | None,
        redis: str | None,
        *,
        label: str,
        environ: Mapping[str, str] | None = None,
    ) -> StateUrls:
        """The environment variables win over the file's ``state:`` and ``redis:``; ``label``
        names the file in messages. Raises ``ValueError`` naming the setting for a bad URL."""
        env = os.environ if environ is None else environ
        database, database_setting = state, f"{label}: state"
        if env.get(DATABASE_URL_VARIABLE):
            database, database_setting = env[DATABASE_URL_VARIABLE], DATABASE_URL_VARIABLE
        redis_url, redis_setting = redis, f"{label}: redis"
        if env.get(REDIS_URL_VARIABLE):
            redis_url, redis_setting = env[REDIS_URL_VARIABLE], REDIS_URL_VARIABLE
        for url, setting, check in (
            (database, database_setting, check_state_url),
            (redis_url, redis_setting, check_redis_url),
        ):
            if url is not None:
                try:
                    check(url)
                except ValueError as exc:
                    raise ValueError(f"{setting}: {exc}") from None
        return cls(database, database_setting, redis_url, redis_setting)

    @property
    def shared(self) -> bool:
        """Whether any state lives outside this process's SQLite file."""
        return self.database is not None or self.redis is not None
