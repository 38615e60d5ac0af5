"""The parts of OAuth one at a time: the ``auth:`` settings and their errors, the issuer's keys
(discovery, cache, refetch for a rotated key and its throttle, symmetric keys ignored), the
challenge header, and API keys beside tokens. The whole flow is in ``test_oauth.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from doc_blocks import doc_block
from oauth_support import AuthorizationServer, authorization_server, b64url
from toolgate.config import parse_config
from toolgate.config.schema import AuthConfig
from toolgate.errors import ConfigError
from toolgate.serve.auth.bearer import TokenVerifier
from toolgate.serve.auth.callers import Callers
from toolgate.serve.auth.identity import AgentIdentity, AuthenticationError, Principal, key_sha256
from toolgate.serve.auth.jwks import IssuerKeys, KeysUnavailableError, metadata_urls
from toolgate.serve.auth.metadata import ResourceMetadata

pytestmark = pytest.mark.slow

# -- settings ------------------------------------------------------------------------------------


def test_the_documented_settings_parse() -> None:
    config = parse_config(doc_block("oauth:toolgate.yaml"))
    auth = config.auth
    assert auth is not None
    assert auth.issuer == "https://login.example.com/realms/tools"
    assert auth.audiences() == ("https://toolgate.example.com", "https://toolgate.example.com/mcp")
    assert auth.scopes["tools.ops"] == ("ops",)
    assert auth.agent_claim == "azp"


def _auth(**settings: Any) -> str:
    base = {"issuer": "https://idp.example.com", "resource": "https://tg.example.com"}
    return yaml.safe_dump({"auth": {**base, **settings}})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"issuer": "http://idp.example.com"},
            "auth.issuer: the issuer must use https",
        ),
        ({"issuer": "idp.example.com"}, "auth.issuer: the issuer must be an absolute"),
        (
            {"issuer": "https://idp.example.com/?x=1"},
            "auth.issuer: the issuer must not",
        ),
        ({"resource": "ftp://tg.example.com"}, "auth.resource: the resource must be"),
        ({"algorithms": ["RS256", "HS256"]}, "auth.algorithms: only asymmetric"),
        ({"algorithms": ["none"]}, "auth.algorithms: only asymmetric"),
        ({"scopes": {"tools": ["bad ns"]}}, "auth.scopes: 'bad ns' is not a usable"),
        ({"jwks_uri": "http://keys.example.com/jwks"}, "auth.jwks_uri: jwks_uri must"),
        ({"issuer_url": "https://x"}, "auth.issuer_url: unknown key"),
    ],
)
def test_bad_settings_are_errors_naming_the_setting(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(_auth(**settings))
    assert message in str(raised.value)


def test_a_missing_resource_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(yaml.safe_dump({"auth": {"issuer": "https://idp.example.com"}}))
    assert "auth.resource: Field required" in str(raised.value)


def test_loopback_http_is_accepted_for_tests() -> None:
    config = parse_config(_auth(issuer="http://127.0.0.1:9000", resource="http://localhost:8470/"))
    assert config.auth is not None and config.auth.resource == "http://localhost:8470"


def test_metadata_urls_follow_rfc_8414_and_oidc() -> None:
    assert metadata_urls("https://idp.example.com/realms/tools") == [
        "https://idp.example.com/.well-known/oauth-authorization-server/realms/tools",
        "https://idp.example.com/realms/tools/.well-known/openid-configuration",
    ]


# -- the challenge -------------------------------------------------------------------------------


def test_the_challenge_quotes_what_it_carries() -> None:
    auth = AuthConfig(
        issuer="https://idp.example.com",
        resource="https://tg.example.com",
        scopes={"b": ("x",), "a": ("*",)},
    )
    metadata = ResourceMetadata(auth)
    error = AuthenticationError('bad "token" \\ é', error="invalid_token")
    assert metadata.challenge(error, mcp=True) == (
        'Bearer resource_metadata="https://tg.example.com/.well-known/oauth-protected-resource/mcp"'
        ', error="invalid_token", error_description="bad \\"token\\" \\\\ ?", scope="a b"'
    )
    assert metadata.challenge() == (
        'Bearer resource_metadata="https://tg.example.com/.well-known/oauth-protected-resource"'
        ', scope="a b"'
    )


# -- the issuer's keys ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthorizationServer]:
    with authorization_server() as server:
        yield server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _keys(issuer: AuthorizationServer, clock: Clock, **options: Any) -> IssuerKeys:
    settings: dict[str, Any] = {
        "issuer": issuer.url,
        "jwks_uri": None,
        "algorithms": ("RS256", "ES256"),
        "cache_seconds": 300,
        "refetch_seconds": 10,
        **options,
    }
    return IssuerKeys(clock=clock, **settings)


def test_keys_are_discovered_cached_and_refetched_for_a_new_kid(
    issuer: AuthorizationServer,
) -> None:
    clock = Clock()
    keys = _keys(issuer, clock)
    kid = issuer.signing_key.kid
    start = issuer.jwks_requests
    assert asyncio.run(keys.key(kid)) is not None
    assert asyncio.run(keys.key(kid)) is not None
    assert issuer.jwks_requests == start + 1  # cached
    # A made-up key id: no refetch within refetch_seconds of the last fetch…
    assert asyncio.run(keys.key("made-up")) is None
    assert issuer.jwks_requests == start + 1
    # …one after it, and no more until refetch_seconds pass again.
    clock.now += 11
    assert asyncio.run(keys.key("made-up")) is None
    assert asyncio.run(keys.key("made-up-too")) is None
    assert issuer.jwks_requests == start + 2
    # The cache expires.
    clock.now += 300
    assert asyncio.run(keys.key(kid)) is not None
    assert issuer.jwks_requests == start + 3


def test_an_issuer_without_metadata_or_naming_another_is_an_error(
    issuer: AuthorizationServer,
) -> None:
    missing = IssuerKeys(issuer=issuer.url + "/other", jwks_uri=None, algorithms=("RS256",))
    with pytest.raises(KeysUnavailableError) as raised:
        asyncio.run(missing.key(None))
    assert "answered HTTP 404" in raised.value.message
    # The metadata found is the issuer's, but it names itself without the trailing slash.
    other = IssuerKeys(issuer=issuer.url + "/", jwks_uri=None, algorithms=("RS256",))
    with pytest.raises(KeysUnavailableError) as raised:
        asyncio.run(other.key(None))
    assert f"names the issuer {issuer.url!r}, not {issuer.url + '/'!r}" in raised.value.message


def test_a_symmetric_key_in_the_set_is_never_used(issuer: AuthorizationServer) -> None:
    secret = {"kty": "oct", "kid": "shared", "k": b64url(b"s" * 32), "alg": "HS256"}
    original = issuer.jwks
    issuer.jwks = lambda: {"keys": [*original()["keys"], secret]}  # type: ignore[method-assign]
    try:
        keys = _keys(issuer, Clock(), algorithms=("RS256", "ES256", "HS256"))
        assert asyncio.run(keys.key("shared")) is not None  # only if HS256 were allowed…
        keys = _keys(issuer, Clock())
        assert asyncio.run(keys.key("shared")) is None  # …which the settings never allow
    finally:
        issuer.jwks = original  # type: ignore[method-assign]


def test_an_unreachable_issuer_is_not_asked_again_on_every_request(
    issuer: AuthorizationServer,
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("the issuer's key endpoint is down")

    original = issuer.jwks
    issuer.jwks = broken  # type: ignore[method-assign]
    clock = Clock()
    keys = _keys(issuer, clock, jwks_uri=issuer.url + "/jwks")
    start = issuer.jwks_requests
    try:
        for _ in range(3):
            with pytest.raises(KeysUnavailableError) as raised:
                asyncio.run(keys.key("rsa-1"))
            assert "answered HTTP 500" in raised.value.message
        assert issuer.jwks_requests == start + 1
        issuer.jwks = original  # type: ignore[method-assign]
        clock.now += 11  # refetch_seconds later it is tried again, and recovers
        assert asyncio.run(keys.key(issuer.keys[-1][0].kid)) is not None
        assert issuer.jwks_requests == start + 2
    finally:
        issuer.jwks = original  # type: ignore[method-assign]


def test_a_key_without_alg_is_bound_to_the_algorithms_its_type_allows(
    issuer: AuthorizationServer,
) -> None:
    original = issuer.jwks

    def without_alg() -> dict[str, Any]:
        return {
            "keys": [{k: v for k, v in key.items() if k != "alg"} for key in original()["keys"]]
        }

    issuer.jwks = without_alg  # type: ignore[method-assign]
    try:
        rsa = next(key for key in original()["keys"] if key["kty"] == "RSA")
        keys = _keys(issuer, Clock(), algorithms=("PS256", "RS384"))
        # An RSA key with no "alg" serves every accepted RSA algorithm (not just a guessed RS256).
        assert asyncio.run(keys.key(rsa["kid"], "PS256")) is not None
        assert asyncio.run(keys.key(rsa["kid"], "RS384")) is not None
        assert asyncio.run(keys.key(rsa["kid"], "RS256")) is None  # not accepted here
        ec = [key for key in original()["keys"] if key["kty"] == "EC"]
        if ec:  # a P-256 key is only ever ES256
            es = _keys(issuer, Clock(), algorithms=("ES256", "ES384"))
            assert asyncio.run(es.key(ec[0]["kid"], "ES384")) is None
            assert asyncio.run(es.key(ec[0]["kid"], "ES256")) is not None
    finally:
        issuer.jwks = original  # type: ignore[method-assign]


def test_keys_outlive_a_short_outage_of_the_issuer_then_fail_closed(
    issuer: AuthorizationServer,
) -> None:
    def broken() -> dict[str, Any]:
        raise RuntimeError("down")

    original = issuer.jwks
    clock = Clock()
    keys = _keys(issuer, clock, jwks_uri=issuer.url + "/jwks")
    kid = issuer.signing_key.kid
    assert asyncio.run(keys.key(kid)) is not None
    issuer.jwks = broken  # type: ignore[method-assign]
    try:
        clock.now += 301  # expired, and the issuer is down: the keys fetched last still serve
        assert asyncio.run(keys.key(kid)) is not None
        clock.now += 300  # past twice the cache time: refused
        with pytest.raises(KeysUnavailableError):
            asyncio.run(keys.key(kid))
    finally:
        issuer.jwks = original  # type: ignore[method-assign]


# -- tokens and keys side by side ----------------------------------------------------------------


class Request:
    def __init__(self, authorization: str | None) -> None:
        self.headers = {} if authorization is None else {"authorization": authorization}
        self.client = type("Client", (), {"host": "127.0.0.1"})()


def test_api_keys_and_tokens_side_by_side(issuer: AuthorizationServer) -> None:
    auth = AuthConfig(issuer=issuer.url, resource="http://127.0.0.1:1", scopes={"s": ("t",)})
    identity = AgentIdentity(config_keys={"bot": key_sha256("the-key")})
    callers = Callers(identity, TokenVerifier(auth))
    assert identity.require_keys  # no anonymous default agent once OAuth is on
    assert asyncio.run(callers.identify(Request("Bearer the-key"))) == Principal("bot")
    token = issuer.mint(issuer.claims("http://127.0.0.1:1", "s"))
    assert asyncio.run(callers.identify(Request(f"Bearer {token}"))) == Principal(
        "alice", frozenset({"t"}), token_operator=False
    )
    for refused in (None, "Bearer a.b.c", "Bearer wrong-key"):
        with pytest.raises(AuthenticationError) as raised:
            asyncio.run(callers.identify(Request(refused)))
        assert raised.value.status == 401
    header = json.loads(_decode(token.split(".")[0]))
    assert header["alg"] == "RS256"


def _decode(segment: str) -> str:
    import base64

    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)).decode()


# -- the namespaces a token allows, in the gateway ------------------------------------------------


async def test_a_call_outside_the_allowed_namespaces_finds_no_tool_and_never_runs() -> None:
    from toolgate import Gateway, tool

    ran: list[str] = []

    @tool(namespace="t", effect="read_only")
    def inside() -> str:
        """Allowed."""
        ran.append("inside")
        return "in"

    @tool(namespace="ops", effect="read_only")
    def outside() -> str:
        """Not allowed."""
        ran.append("outside")
        return "out"

    gateway = Gateway()
    gateway.add(inside, outside)
    allowed = frozenset({"t"})
    assert [tool.id for tool in gateway.list_tools(agent="alice", namespaces=allowed)] == [
        "t:inside"
    ]
    assert len(gateway.list_tools(agent="alice")) == 2
    refused = await gateway.call("ops:outside", agent="alice", namespaces=allowed)
    # To this caller the tool does not exist: nothing says a namespace holds it.
    assert refused.code is not None and refused.code.value == "tool_not_found"
    assert refused.message == "There is no tool named 'ops:outside'. Did you mean: t:inside?"
    called = await gateway.call("t:inside", agent="alice", namespaces=allowed)
    assert called.status.value == "ok"
    # The same agent without a restriction (an API key) still reaches both.
    assert (await gateway.call("ops:outside", agent="alice")).status.value == "ok"
    assert ran == ["inside", "outside"]
    gateway.close()
