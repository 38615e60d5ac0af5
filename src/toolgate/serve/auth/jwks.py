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
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import httpx2
from jwt import PyJWK
from jwt.exceptions import PyJWKError

from ...config.auth_schema import is_loopback_name

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


#: The signature algorithms each kind of key can make (JWK ``kty``, and ``crv`` for curves).
_ALGORITHMS_OF: dict[tuple[Any, Any], tuple[str, ...]] = {
    ("RSA", None): ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
    ("EC", "P-256"): ("ES256",),
    ("EC", "P-384"): ("ES384",),
    ("EC", "P-521"): ("ES512",),
    ("OKP", "Ed25519"): ("EdDSA",),
    ("OKP", "Ed448"): ("EdDSA",),
}


def _algorithms_for(jwk: Mapping[str, Any]) -> tuple[str, ...]:
    """The algorithms a JWK may verify: its own ``alg``, else those its key type allows."""
    declared = jwk.get("alg")
    if isinstance(declared, str):
        return (declared,)
    kty = jwk.get("kty")
    return _ALGORITHMS_OF.get((kty, None if kty == "RSA" else jwk.get("crv")), ())


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
        self._keys: dict[tuple[str | None, str], PyJWK] | None = None
        self._fetched_at: float | None = None
        self._attempted_at: float | None = None
        self._lock: asyncio.Lock | None = None
        self._last_error = "the issuer's keys could not be fetched"

    async def key(self, kid: str | None, algorithm: str | None = None) -> PyJWK | None:
        """The key a token names (``kid``; without one, the set's only key) for the token's
        ``algorithm`` (``None``: any accepted one), or ``None`` when the issuer publishes no
        such key. Raises :class:`KeysUnavailableError`.

        Keys past ``cache_seconds`` are fetched again; while the issuer cannot be reached, the
        keys last fetched are still used for as long again (a short outage of the identity
        provider does not stop every call), then refused."""
        if self._keys is None or self._expired():
            if self._failed_recently() and (self._keys is None or not self._stale_usable()):
                # The issuer did not answer a moment ago: refuse now rather than make every
                # request wait for it (and hammer it) again.
                raise KeysUnavailableError(self._last_error)
            if not (self._keys is not None and self._failed_recently()):
                try:
                    await self._refresh()
                except KeysUnavailableError:
                    if self._keys is None:
                        raise
        found = self._find(kid, algorithm)
        if found is None and self._may_refetch():
            try:
                await self._refresh()  # a key id not seen yet: the issuer may have rotated
            except KeysUnavailableError:
                if self._keys is None:
                    raise
            found = self._find(kid, algorithm)
        return found

    def _expired(self) -> bool:
        fetched = self._fetched_at
        return fetched is None or self._clock() - fetched >= self._cache_seconds

    def _stale_usable(self) -> bool:
        fetched = self._fetched_at
        return fetched is not None and self._clock() - fetched < 2 * self._cache_seconds

    def _find(self, kid: str | None, algorithm: str | None) -> PyJWK | None:
        keys = self._keys or {}
        matching = [
            key
            for (key_id, key_algorithm), key in keys.items()
            if (kid is None or key_id == kid) and (algorithm is None or key_algorithm == algorithm)
        ]
        if kid is None:
            # Without a key id only a set with one key (for this algorithm) says which.
            return matching[0] if len({id(key) for key in matching}) == 1 else None
        return matching[0] if matching else None

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
                if not self._stale_usable():
                    self._keys = None  # keys older than twice the cache time: fail closed
                raise

    async def _fetch(self) -> dict[tuple[str | None, str], PyJWK]:
        async with httpx2.AsyncClient(timeout=self._timeout, follow_redirects=False) as http:
            uri = self._jwks_uri or await self._discover(http)
            document = await _get_json(http, uri, "the issuer's key set (jwks_uri)")
        listed = document.get("keys")
        if not isinstance(listed, list):
            raise KeysUnavailableError(f"{uri} is not a JSON Web Key Set (no 'keys' list)")
        keys: dict[tuple[str | None, str], PyJWK] = {}
        for data in listed:
            if not isinstance(data, dict) or data.get("use", "sig") != "sig":
                continue
            # A key without "alg" (as some providers publish them) is bound to each accepted
            # algorithm its type allows, instead of to the one a library would guess.
            for algorithm in _algorithms_for(data):
                if algorithm not in self._algorithms:
                    continue
                try:
                    keys[(data.get("kid"), algorithm)] = PyJWK(data, algorithm=algorithm)
                except (PyJWKError, TypeError, KeyError, ValueError):
                    continue  # a key this library cannot use for it: left out
        if not listed and not keys:
            raise KeysUnavailableError(f"{uri} lists no keys")
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
                    or (parts.scheme == "http" and is_loopback_name(parts.hostname or ""))
                )
            ):
                raise KeysUnavailableError(
                    f"the metadata at {url} has no usable jwks_uri (https, or http on loopback)"
                )
            self._jwks_uri = uri
            return uri
        raise KeysUnavailableError("; ".join(problems))


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
