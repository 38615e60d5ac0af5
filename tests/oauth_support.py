"""A real OAuth 2.1 authorization server on loopback, for the OAuth tests (no tests here).

A small Starlette app that signs its tokens with joserfc (real RSA and EC keys; another JOSE
library than the PyJWT toolgate checks them with) and serves what an MCP client needs:

* ``/.well-known/oauth-authorization-server`` — RFC 8414 metadata;
* ``/jwks`` — the public keys (rotated by :meth:`AuthorizationServer.rotate`);
* ``/register`` — dynamic client registration (RFC 7591), public clients;
* ``/authorize`` — approves at once (the "user" always consents) and redirects with a code;
* ``/token`` — the authorization-code grant with PKCE (S256 checked) and RFC 8707 ``resource``,
  answering a JWT access token for the requested resource (``aud``) and scopes.

:meth:`AuthorizationServer.mint` signs any claims with the current key, for the attack tests.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from web_support import Served

SigningKey = RSAKey | ECKey


def b64url(data: bytes) -> str:
    """Base64url without padding (RFC 7515)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class _Grant:
    client_id: str
    redirect_uri: str
    challenge: str
    scope: str
    resource: str | None


@dataclass
class AuthorizationServer:
    """The server's state: keys, clients, codes. Serve it with :func:`authorization_server`."""

    subject: str = "alice"
    """Whom every token is for (the "user" who always consents)."""
    granted_scopes: set[str] | None = None
    """Scopes it grants (``None``: whatever is asked)."""
    url: str = ""
    keys: list[tuple[SigningKey, str]] = field(default_factory=list)
    """(key, algorithm), newest first; the first signs."""
    clients: dict[str, list[str]] = field(default_factory=dict)
    codes: dict[str, _Grant] = field(default_factory=dict)
    issued: list[dict[str, Any]] = field(default_factory=list)
    """The claims of every token /token issued."""
    jwks_requests: int = 0

    def __post_init__(self) -> None:
        self.keys = [(RSAKey.generate_key(2048, parameters={"kid": "rsa-1"}), "RS256")]

    # -- keys -----------------------------------------------------------------------------------

    def rotate(self, *, kind: str = "EC") -> str:
        """Sign with a new key from now on (published beside the old ones); its key id."""
        kid = f"{kind.lower()}-{len(self.keys) + 1}"
        key: SigningKey = (
            ECKey.generate_key("P-256", parameters={"kid": kid})
            if kind == "EC"
            else RSAKey.generate_key(2048, parameters={"kid": kid})
        )
        self.keys.insert(0, (key, "ES256" if kind == "EC" else "RS256"))
        return kid

    @property
    def signing_key(self) -> SigningKey:
        return self.keys[0][0]

    def public_pem(self) -> bytes:
        """The signing key's public key as PEM (what a key-confusion attacker uses as an HMAC
        secret)."""
        return self.signing_key.as_pem(private=False)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [{**key.as_dict(private=False), "use": "sig"} for key, _ in self.keys]}

    def mint(
        self, claims: dict[str, Any], *, key: SigningKey | None = None, alg: str | None = None
    ) -> str:
        """A JWT of ``claims`` signed with ``key`` (default: the current one)."""
        chosen = key or self.keys[0][0]
        algorithm = alg or dict((id(k), a) for k, a in self.keys).get(id(chosen), "RS256")
        header = {"alg": algorithm, "kid": chosen.kid, "typ": "at+jwt"}
        return jwt.encode(header, claims, chosen)

    def claims(self, resource: str, scope: str, **extra: Any) -> dict[str, Any]:
        """The claims of a token for ``resource`` with ``scope``, valid for 5 minutes."""
        now = int(time.time())
        return {
            "iss": self.url,
            "sub": self.subject,
            "aud": resource,
            "scope": scope,
            "iat": now,
            "nbf": now - 5,
            "exp": now + 300,
            "jti": secrets.token_hex(8),
            **extra,
        }

    # -- endpoints ------------------------------------------------------------------------------

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "registration_endpoint": f"{self.url}/register",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "authorization_response_iss_parameter_supported": True,
        }

    async def _metadata(self, request: Request) -> Response:
        return JSONResponse(self.metadata())

    async def _jwks(self, request: Request) -> Response:
        self.jwks_requests += 1
        return JSONResponse(self.jwks())

    async def _register(self, request: Request) -> Response:
        body = await request.json()
        redirect_uris = body.get("redirect_uris") or []
        if not redirect_uris:
            return JSONResponse({"error": "invalid_redirect_uri"}, status_code=400)
        client_id = "client-" + secrets.token_hex(8)
        self.clients[client_id] = list(redirect_uris)
        return JSONResponse(
            {
                **body,
                "client_id": client_id,
                "client_id_issued_at": int(time.time()),
                "token_endpoint_auth_method": "none",
            },
            status_code=201,
        )

    async def _authorize(self, request: Request) -> Response:
        query = request.query_params
        client_id = query.get("client_id", "")
        redirect_uri = query.get("redirect_uri", "")
        if redirect_uri not in self.clients.get(client_id, []):
            return JSONResponse({"error": "invalid_client"}, status_code=400)
        if query.get("response_type") != "code" or query.get("code_challenge_method") != "S256":
            return JSONResponse({"error": "invalid_request"}, status_code=400)
        code = secrets.token_urlsafe(24)
        self.codes[code] = _Grant(
            client_id=client_id,
            redirect_uri=redirect_uri,
            challenge=query.get("code_challenge", ""),
            scope=query.get("scope", ""),
            resource=query.get("resource"),
        )
        answer = {"code": code, "state": query.get("state", ""), "iss": self.url}
        return RedirectResponse(f"{redirect_uri}?{urlencode(answer)}", status_code=302)

    async def _token(self, request: Request) -> Response:
        form = await request.form()
        if form.get("grant_type") != "authorization_code":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        grant = self.codes.pop(str(form.get("code", "")), None)
        if grant is None or grant.client_id != form.get("client_id"):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        if grant.redirect_uri != form.get("redirect_uri"):
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        verifier = str(form.get("code_verifier", ""))
        if b64url(hashlib.sha256(verifier.encode("ascii")).digest()) != grant.challenge:
            return JSONResponse({"error": "invalid_grant", "error_description": "PKCE"}, 400)
        resource = str(form.get("resource") or grant.resource or "")
        asked = grant.scope.split()
        scopes = [s for s in asked if self.granted_scopes is None or s in self.granted_scopes]
        claims = self.claims(resource, " ".join(scopes), client_id=grant.client_id)
        self.issued.append(claims)
        return JSONResponse(
            {
                "access_token": self.mint(claims),
                "token_type": "Bearer",
                "expires_in": 300,
                "scope": " ".join(scopes),
            },
            headers={"Cache-Control": "no-store"},
        )

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/jwks", self._jwks),
                Route("/register", self._register, methods=["POST"]),
                Route("/authorize", self._authorize),
                Route("/token", self._token, methods=["POST"]),
            ]
        )


@contextmanager
def authorization_server(**options: Any) -> Iterator[AuthorizationServer]:
    """An :class:`AuthorizationServer` served by uvicorn on 127.0.0.1 for the block."""
    server = AuthorizationServer(**options)
    served = Served(server.app())
    server.url = served.url
    served.start()
    try:
        yield server
    finally:
        served.stop()


def unsigned(claims: dict[str, Any]) -> str:
    """A JWT with ``alg: none`` and no signature (the "unsigned" attack)."""
    import json

    header = b64url(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    return f"{header}.{b64url(json.dumps(claims).encode())}."


def hmac_with_public_key(claims: dict[str, Any], public_pem: bytes, kid: str | None) -> str:
    """A JWT "signed" with HS256 using the issuer's public key as the secret (key confusion)."""
    import hmac
    import json

    header: dict[str, Any] = {"alg": "HS256", "typ": "JWT"}
    if kid is not None:
        header["kid"] = kid
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = hmac.new(public_pem, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def tampered(token: str, **changes: Any) -> str:
    """``token`` with its payload changed and its signature kept."""
    import json

    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims.update(changes)
    return f"{header}.{b64url(json.dumps(claims).encode())}.{signature}"
