"""The issuer's signing keys: its JWKS, fetched, cached, and fetched again for a rotated key.

:class:`IssuerKeys` finds the key a token names (``kid``). The key set is fetched on first use
and kept for ``cache_seconds``; a token naming a key id the set does not have makes it fetch the
set again (the issuer rotated its keys), at most once per ``refetch_seconds`` so that tokens
with made-up key ids cannot make toolgate hammer the issuer. Only keys of the pinned asymmetric
algorithms are kept: a symmetric (``oct``) key in the set is never used.

Without a configured ``jwks_uri`` the issuer's metadata says where the keys are (RFC 8414
``/.well-known/oauth-authorization-server``, else OpenID Connect discovery), and the metadata
must name the configured issuer.

When the keys cannot be had (the issuer is unreachable, answers an error or something that is
not a key set) :class:`KeysUnavailableError` is raised: tokens are then refused, never accepted.
The fetch is tried again after ``refetch_seconds`` (at least a second), not on every request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx2
from jwt import PyJWK, PyJWKSet
from jwt.exceptions import PyJWKError, PyJWKSetError

__all__ = ["IssuerKeys", "KeysUnavailableError", "metadata_urls"]

log = logging.getLogger("toolgate.serve")

#: Seconds before keys that could not be fetched are tried again (at least).
MIN_RETRY_SECONDS = 1.0
#: Largest metadata or key set document read, in bytes.
MAX_DOCUMENT_BYTES = 512 * 1024


class KeysUnavailableError(Exception):
    """The issuer's keys could not be fetched; ``message`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may be: RFC 8414 (the well-known segment inserted before the
    issuer's path), then OpenID Connect discovery (appended to it)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    return [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]


class IssuerKeys:
    """The signing keys of one issuer (see the module docstring)."""

    def __init__(
        self,
        *,
        issuer: str,
        jwks_uri: str | None,
        algorithms: Sequence[str],
        cache_seconds: float = 300,
        refetch_seconds: float = 10,
        timeout: float = 5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._jwks_uri = jwks_uri
        self._algorithms = frozenset(algorithms)
        self._cache_seconds = cache_seconds
        self._refetch_seconds = refetch_seconds
        self._timeout = timeout
        self._clock = clock
        self._keys: dict[str | None, PyJWK] | None = None
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._lock: asyncio.Lock | None = None
        self._last_error = "the issuer's keys could not be fetched"

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key a token names (``kid``; without one, the set's only key), or ``None`` when
        the issuer publishes no such key. Raises :class:`KeysUnavailableError`."""
        if self._keys is None or self._expired():
            if self._keys is None and self._failed_recently():
                # The issuer did not answer a moment ago: refuse now rather than make every
                # request wait for it (and hammer it) again.
                raise KeysUnavailableError(self._last_error)
            await self._refresh()
        found = self._find(kid)
        if found is None and self._may_refetch():
            await self._refresh()  # a key id not seen yet: the issuer may have rotated
            found = self._find(kid)
        return found

    def _expired(self) -> bool:
        fetched = self._fetched_at
        return fetched is None or self._clock() - fetched >= self._cache_seconds

    def _find(self, kid: str | None) -> PyJWK | None:
        keys = self._keys or {}
        if kid is None:
            return next(iter(keys.values())) if len(keys) == 1 else None
        return keys.get(kid)

    def _failed_recently(self) -> bool:
        attempted = self._attempted_at
        if attempted is None or self._fetched_at == attempted:
            return False
        return self._clock() - attempted < max(self._refetch_seconds, MIN_RETRY_SECONDS)

    def _may_refetch(self) -> bool:
        attempted = self._attempted_at
        return attempted is None or self._clock() - attempted >= self._refetch_seconds

    async def _refresh(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        requested = self._clock()
        async with self._lock:
            if self._attempted_at is not None and self._attempted_at >= requested:
                # Fetched by another request while this one waited: its result stands.
                if self._keys is None:
                    raise KeysUnavailableError(self._last_error)
                return
            self._attempted_at = self._clock()
            try:
                self._keys = await self._fetch()
                self._fetched_at = self._attempted_at
            except KeysUnavailableError as exc:
                self._last_error = exc.message
                log.warning("the issuer's keys are unavailable: %s", exc.message)
                if self._expired():
                    self._keys = None  # expired keys are not used: fail closed
                raise

    async def _fetch(self) -> dict[str | None, PyJWK]:
        async with httpx2.AsyncClient(timeout=self._timeout, follow_redirects=False) as http:
            uri = self._jwks_uri or await self._discover(http)
            document = await _get_json(http, uri, "the issuer's key set (jwks_uri)")
        try:
            found = PyJWKSet.from_dict(document).keys
        except (PyJWKSetError, PyJWKError, TypeError, KeyError) as exc:
            raise KeysUnavailableError(f"{uri} is not a usable JSON Web Key Set: {exc}") from None
        keys = {
            key.key_id: key
            for key in found
            if key.algorithm_name in self._algorithms and key.public_key_use in (None, "sig")
        }
        if not keys:
            raise KeysUnavailableError(
                f"{uri} has no signing key for the accepted algorithms "
                f"({', '.join(sorted(self._algorithms))})"
            )
        return keys

    async def _discover(self, http: httpx2.AsyncClient) -> str:
        problems = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await _get_json(http, url, "the issuer's metadata")
            except KeysUnavailableError as exc:
                problems.append(exc.message)
                continue
            if metadata.get("issuer") != self.issuer:
                raise KeysUnavailableError(
                    f"the metadata at {url} names the issuer {metadata.get('issuer')!r}, not "
                    f"{self.issuer!r} (auth.issuer must be exactly the issuer's identifier)"
                )
            uri = metadata.get("jwks_uri")
            parts = urlsplit(uri) if isinstance(uri, str) else None
            # As for auth.jwks_uri: https, or plain http to a loopback host only.
            if (
                not isinstance(uri, str)
                or parts is None
                or not (
                    parts.scheme == "https"
                    or (parts.scheme == "http" and parts.hostname in _LOOPBACK_HOSTS)
                )
            ):
                raise KeysUnavailableError(
                    f"the metadata at {url} has no usable jwks_uri (https, or http on loopback)"
                )
            self._jwks_uri = uri
            return uri
        raise KeysUnavailableError("; ".join(problems))


_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


async def _get_json(http: httpx2.AsyncClient, url: str, what: str) -> dict[str, Any]:
    try:
        async with http.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise KeysUnavailableError(f"{what} at {url} answered HTTP {response.status_code}")
            # Read at most the cap: a hostile or broken issuer cannot exhaust memory.
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise KeysUnavailableError(
                        f"{what} at {url} is larger than {MAX_DOCUMENT_BYTES} bytes"
                    )
    except httpx2.HTTPError as exc:
        reason = str(exc) or type(exc).__name__
        raise KeysUnavailableError(f"cannot reach {what} at {url}: {reason}") from None
    try:
        document = json.loads(bytes(body))
    except ValueError:
        raise KeysUnavailableError(f"{what} at {url} is not JSON") from None
    if not isinstance(document, dict):
        raise KeysUnavailableError(f"{what} at {url} is not a JSON object")
    return document
