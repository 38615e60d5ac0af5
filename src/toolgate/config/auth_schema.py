"""The ``auth:`` section of ``toolgate.yaml``: OAuth 2.1 access tokens from an identity
provider."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from .section import Section, valid_namespace

__all__ = ["ASYMMETRIC_ALGORITHMS", "AuthConfig", "is_loopback_name"]


#: Signature algorithms a token may use: asymmetric only, so that a public key can never be
#: used as an HMAC secret (key confusion), and never ``none``.
ASYMMETRIC_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)


def is_loopback_name(host: str) -> bool:
    """Whether ``host`` (a URL's host name) is ``localhost`` or a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _https_url(value: str, what: str) -> str:
    """``value`` if it is an absolute ``https`` URL without query or fragment (``http`` only
    for a loopback host, as in tests and local development)."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        host = None
        parts = None
    if parts is None or not host or parts.scheme not in ("https", "http"):
        raise ValueError(f"{what} must be an absolute https:// URL, not {value!r}")
    if parts.scheme == "http" and not is_loopback_name(host):
        raise ValueError(
            f"{what} must use https:// (plain http:// is accepted only for a loopback host), "
            f"not {value!r}"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"{what} must not have a query or a fragment: {value!r}")
    return value


class AuthConfig(Section):
    """``auth:``: accept OAuth 2.1 access tokens (JWTs) from an identity provider, beside the
    agents' API keys, on the HTTP API and the MCP endpoint.

    .. code-block:: yaml

        auth:
          issuer: https://login.example.com/realms/tools
          resource: https://toolgate.example.com
          agent_claim: azp
          scopes:
            tools.read: [demo, docs]
            tools.ops: [ops]
            tools.all: ["*"]

    toolgate is the resource server: it publishes its Protected Resource Metadata (RFC 9728) at
    ``/.well-known/oauth-protected-resource``, answers a request without credentials with
    ``401`` and ``WWW-Authenticate: Bearer resource_metadata="…"``, and checks every token's
    signature against the issuer's JWKS and its ``iss``, ``aud``, ``exp`` and ``nbf``. Needs
    ``pip install 'toolgate[oauth]'``.
    """

    issuer: str = Field(min_length=1)
    """The authorization server's issuer identifier, exactly as its tokens' ``iss`` claim and
    its metadata's ``issuer`` say (``https://``)."""
    resource: str = Field(min_length=1)
    """This server's public base URL (``https://toolgate.example.com``): the resource the
    metadata names, and a token's audience. The MCP endpoint is the resource
    ``<resource>/mcp``."""
    audience: tuple[str, ...] = ()
    """The ``aud`` values a token may carry (any one of them); default ``resource`` and
    ``<resource>/mcp``, the resource identifiers clients ask tokens for (RFC 8707)."""
    jwks_uri: str | None = Field(default=None, min_length=1)
    """Where the issuer's signing keys are; default: the ``jwks_uri`` of its metadata
    (``<issuer>/.well-known/oauth-authorization-server``, else
    ``<issuer>/.well-known/openid-configuration``)."""
    agent_claim: str = Field(default="sub", min_length=1)
    """The claim whose value names the agent (``sub``, ``azp``, ``client_id``, ``email``…);
    the agent's ``agents:`` entry, if any, gives it labels (``role: operator``)."""
    operator_scope: str | None = Field(default=None, min_length=1)
    """The scope that makes a token's caller an operator (deciding approvals, reading the
    audit log, ``/metrics``…), for a token not restricted to some namespaces. ``None`` (the
    default): no token is an operator; operators use API keys. A token never becomes an
    operator by the agent name it carries: that name comes from the identity provider, and
    ``agents:`` labels are for policies."""
    scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    """Scope → the tool namespaces a token with that scope may list and call (``"*"``: all).
    A token may use the union over its scopes; empty (the default): scopes do not restrict."""
    require_at_jwt: bool = False
    """Accept only RFC 9068 JWT access tokens: the header's ``typ`` must be ``at+jwt`` (or
    ``application/at+jwt``). Turn it on when the issuer types its access tokens so (Auth0's
    RFC 9068 profile, Curity, node-oidc-provider, Ory…): then no other token it signs — an ID
    token, a logout token — is taken for an access token, whatever its ``aud``. Off (the
    default, for issuers that do not type them, such as Keycloak and Entra ID), a token is
    still refused when its ``typ`` names another kind of JWT (``logout+jwt``, ``dpop+jwt``…) or
    it carries what only an OpenID Connect ID token carries (``nonce``, ``at_hash``, ``c_hash``,
    ``s_hash``, or Keycloak's ``typ: ID`` claim) — heuristics only: an ID token without those
    claims and with an accepted ``aud`` is then accepted. On is the real protection."""
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    """The signature algorithms accepted (asymmetric ones only; ``none`` and HMAC never)."""
    leeway: float = Field(default=30, ge=0, le=300)
    """Seconds of clock skew allowed when checking ``exp`` and ``nbf``."""
    jwks_cache_seconds: float = Field(default=300, gt=0, le=86400)
    """Seconds the issuer's keys are kept before they are fetched again."""
    jwks_refetch_seconds: float = Field(default=10, ge=1)
    """A token signed with an unknown key id makes the keys be fetched again (a rotated key),
    at most once per this many seconds."""
    fetch_timeout: float = Field(default=5, gt=0, le=60)
    """Seconds to wait for the issuer's metadata or keys; when they cannot be had, tokens are
    refused (``503``), never accepted."""

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        return _https_url(value, "the issuer")

    @field_validator("resource")
    @classmethod
    def _resource_url(cls, value: str) -> str:
        return _https_url(value, "the resource").rstrip("/")

    @field_validator("jwks_uri")
    @classmethod
    def _jwks_url(cls, value: str | None) -> str | None:
        return None if value is None else _https_url(value, "jwks_uri")

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        refused = [name for name in value if name not in ASYMMETRIC_ALGORITHMS]
        if refused or not value:
            raise ValueError(
                "only asymmetric signature algorithms are accepted "
                f"({', '.join(ASYMMETRIC_ALGORITHMS)}), not {', '.join(refused) or 'none'}"
            )
        return value

    @field_validator("scopes")
    @classmethod
    def _namespaces(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for scope, namespaces in value.items():
            if not scope or any(char.isspace() for char in scope):
                raise ValueError(f"{scope!r} is not a scope (no white space)")
            for namespace in namespaces:
                if namespace != "*":
                    valid_namespace(namespace)
        return value

    def audiences(self) -> tuple[str, ...]:
        """The ``aud`` values accepted: :attr:`audience`, else the resource and its MCP
        endpoint."""
        return self.audience or (self.resource, self.resource + "/mcp")
