"""Bearer JWTs from an identity provider: checked, then turned into a :class:`Principal`.

A token is accepted only when all of these hold (OAuth 2.1 resource server, MCP authorization):

* its header names one of the pinned asymmetric algorithms (``auth.algorithms``): ``none`` and
  every HMAC algorithm are refused before any key is looked at, so a token "signed" with the
  issuer's public key as an HMAC secret (key confusion) never verifies;
* it is signed by a key the issuer publishes (:class:`~toolgate.serve.auth.jwks.IssuerKeys`), of the
  algorithm the token names (PyJWT binds a JWK to one algorithm);
* it is an access token: with ``auth.require_at_jwt`` its header's ``typ`` is ``at+jwt``
  (RFC 9068); without, its ``typ`` names no other kind of JWT and it carries no claim only an
  OpenID Connect ID token carries (``nonce``, ``at_hash``, ``c_hash``, ``s_hash``, Keycloak's
  ``typ: ID``) — so an ID token with a matching ``aud`` is never taken for an access token;
* ``iss`` is the configured issuer, ``aud`` one of the accepted audiences (this resource),
  ``exp`` is in the future and ``nbf`` (when present) in the past, within ``auth.leeway``;
* the agent claim (``auth.agent_claim``) is a non-empty string.

The principal's namespaces are the union of what ``auth.scopes`` maps the token's scopes to
(``scope``, space-separated, or ``scp``); a token with none of the mapped scopes is refused with
``insufficient_scope`` (403). When the keys cannot be fetched the token is refused with 503.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Mapping
from typing import Any, Final

import jwt

from ...config.schema import AuthConfig
from .identity import AuthenticationError, Principal
from .jwks import IssuerKeys, KeysUnavailableError

_log = logging.getLogger("toolgate.serve.auth")

__all__ = ["INSUFFICIENT_SCOPE", "INVALID_TOKEN", "TokenVerifier", "looks_like_jwt"]

#: RFC 6750 error codes.
INVALID_TOKEN: Final = "invalid_token"
INSUFFICIENT_SCOPE: Final = "insufficient_scope"
#: Longer tokens are refused unread.
MAX_TOKEN_CHARS: Final = 16 * 1024
#: Longest agent name a token may give.
MAX_AGENT_CHARS: Final = 256
#: Every namespace.
ALL_NAMESPACES: Final = "*"


#: ``typ`` values (lower case, RFC 7515 §4.1.9 allows leaving out ``application/``) of an RFC
#: 9068 access token.
AT_JWT_TYPES: Final = frozenset({"at+jwt", "application/at+jwt"})
#: Claims only an OpenID Connect ID token carries (OIDC Core §2, §3.3.2.11; FAPI ``s_hash``).
ID_TOKEN_CLAIMS: Final = ("nonce", "at_hash", "c_hash", "s_hash")


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer token is a JWS compact JWT: three dot-separated parts whose first
    decodes to a JSON object (the JOSE header). An API key with dots in it is not one."""
    if token.count(".") != 2 or len(token) > MAX_TOKEN_CHARS or not token.isascii():
        return False
    head = token.partition(".")[0]
    try:
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(header, dict)


def _invalid(message: str) -> AuthenticationError:
    return AuthenticationError(message, error=INVALID_TOKEN)


class TokenVerifier:
    """Checks bearer JWTs against ``auth:`` (see the module docstring)."""

    def __init__(self, config: AuthConfig, keys: IssuerKeys | None = None) -> None:
        self.config = config
        self.keys = keys or IssuerKeys(
            issuer=config.issuer,
            jwks_uri=config.jwks_uri,
            algorithms=config.algorithms,
            cache_seconds=config.jwks_cache_seconds,
            refetch_seconds=config.jwks_refetch_seconds,
            timeout=config.fetch_timeout,
        )
        self._audiences = list(config.audiences())
        self._scopes = {scope: frozenset(found) for scope, found in config.scopes.items()}

    async def verify(self, token: str) -> Principal:
        """The principal ``token`` names. Raises :class:`AuthenticationError`: 401
        ``invalid_token``, 403 ``insufficient_scope``, or 503 when the keys are unavailable."""
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise _invalid("the bearer token is not a valid JWT")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise _invalid("the bearer token is not a valid JWT") from None
        algorithm = header.get("alg")
        if algorithm not in self.config.algorithms:
            raise _invalid(
                f"tokens signed with {str(algorithm)[:20]!r} are not accepted (accepted: "
                f"{', '.join(self.config.algorithms)})"
            )
        self._check_type(header.get("typ"))
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise _invalid("the token's key id (kid) is not a string")
        try:
            key = await self.keys.key(kid, algorithm)
        except KeysUnavailableError as exc:
            # The details (the issuer's URLs, the network error) are for the operator's log,
            # not for whoever sent a token.
            _log.warning("bearer tokens cannot be checked: %s", exc.message)
            raise AuthenticationError(
                "the token cannot be checked now: the identity provider's signing keys are "
                "unavailable (the server's log says why); try again later",
                status=503,
            ) from None
        if key is None:
            raise _invalid("the token is not signed by a key the issuer publishes")
        claims = self._claims(token, key, algorithm)
        self._not_an_id_token(header.get("typ"), claims)
        operator_scope = self.config.operator_scope
        return Principal(
            self._agent(claims),
            self._namespaces(claims),
            token_operator=operator_scope is not None and operator_scope in token_scopes(claims),
        )

    def _claims(self, token: str, key: jwt.PyJWK, algorithm: str) -> dict[str, Any]:
        config = self.config
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[algorithm],
                audience=self._audiences,
                issuer=config.issuer,
                leeway=config.leeway,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise _invalid("the token has expired; get a new one") from None
        except jwt.ImmatureSignatureError:
            raise _invalid("the token is not valid yet (nbf)") from None
        except jwt.InvalidAudienceError:
            raise _invalid(
                f"the token is for another resource (aud); ask the issuer for a token for "
                f"{config.resource}"
            ) from None
        except jwt.InvalidIssuerError:
            raise _invalid(f"the token was not issued by {config.issuer}") from None
        except jwt.MissingRequiredClaimError as exc:
            raise _invalid(f"the token has no {exc.claim!r} claim") from None
        except jwt.InvalidSignatureError:
            raise _invalid("the token's signature does not verify") from None
        except jwt.PyJWTError:
            raise _invalid("the bearer token is not a valid JWT") from None
        return claims

    def _check_type(self, typ: Any) -> None:
        """Refuse, before any key is looked at, a token typed as something other than an
        access token (and, with ``require_at_jwt``, one not typed ``at+jwt``)."""
        kind = typ.lower() if isinstance(typ, str) else None
        if kind in AT_JWT_TYPES:
            return
        if self.config.require_at_jwt:
            raise _invalid(
                "the token is not an access token: its header's typ must be 'at+jwt' (RFC 9068)"
            )
        if typ is not None and (kind is None or kind.endswith("+jwt")):
            # logout+jwt, secevent+jwt, dpop+jwt…: another kind of token the issuer signs.
            raise _invalid("the token is not an access token (its typ names another kind)")

    def _not_an_id_token(self, typ: Any, claims: Mapping[str, Any]) -> None:
        """Refuse an untyped token that carries what only an OpenID Connect ID token does."""
        if isinstance(typ, str) and typ.lower() in AT_JWT_TYPES:
            return
        if any(name in claims for name in ID_TOKEN_CLAIMS) or claims.get("typ") == "ID":
            raise _invalid("the token is an ID token, not an access token; send an access token")

    def _agent(self, claims: Mapping[str, Any]) -> str:
        claim = self.config.agent_claim
        agent = claims.get(claim)
        if (
            not isinstance(agent, str)
            or not agent
            or len(agent) > MAX_AGENT_CHARS
            or not agent.isprintable()
        ):
            raise _invalid(f"the token's {claim!r} claim does not name an agent")
        return agent

    def _namespaces(self, claims: Mapping[str, Any]) -> frozenset[str] | None:
        if not self._scopes:
            return None
        allowed: set[str] = set()
        for scope in token_scopes(claims):
            allowed |= self._scopes.get(scope, frozenset())
        if ALL_NAMESPACES in allowed:
            return None
        if not allowed:
            raise AuthenticationError(
                "the token has none of the scopes this server maps to tools (ask for "
                f"{' or '.join(sorted(self._scopes))})",
                error=INSUFFICIENT_SCOPE,
                status=403,
            )
        return frozenset(allowed)


def token_scopes(claims: Mapping[str, Any]) -> list[str]:
    """The scopes a token grants: ``scope`` (space-separated, RFC 9068) or ``scp`` (a list or
    a string, as some providers write it)."""
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []
