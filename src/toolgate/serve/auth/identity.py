"""Who is calling: agents identified by API keys, the ``default`` agent, and safe binding.

Agents are named in ``toolgate.yaml`` (``agents: NAME: {labels: …, key_sha256: …}``) and/or get a
key from ``toolgate agents add NAME``, which keeps only the key's SHA-256 in
``$TOOLGATE_HOME/toolgate.db`` (:class:`~toolgate.stores.agent_keys.AgentKeyStore`). Requests carry
``Authorization: Bearer <key>``; the key's hash is compared with every known hash in constant
time, so neither the key nor which agent it belongs to leaks through timing.

* **Keys configured** (in the file or the store): every request must carry a known key, else it
  is refused (:class:`AuthenticationError`, HTTP 401).
* **No keys configured**: every caller is the ``default`` agent, and only loopback clients are
  answered; ``toolgate serve`` refuses to listen anywhere but loopback
  (:func:`check_bind` raises :class:`UnsafeBindError`). Web pages of other sites are refused
  too, since the user's browser is a loopback client: a ``Host`` that is not a loopback name
  (DNS rebinding), an ``Origin`` of another host or ``Sec-Fetch-Site: cross-site``. A key that
  is presented anyway is checked, and refused when unknown: a revoked key never silently keeps
  working.

Keys added or revoked while a server runs take effect at its next request. A server listening on
a non-loopback address keeps requiring keys even if every key is revoked (it fails closed).

Operators (who may decide approvals, revoke grants, read the audit log and connect capabilities
over the HTTP API) are agents labelled ``role: operator`` in ``toolgate.yaml``; without keys, the
local ``default`` caller is. Nobody decides a request their own agent name made.

With ``auth:`` in ``toolgate.yaml``, bearer JWTs from an identity provider are accepted too
(:mod:`toolgate.serve.auth.callers` tells the two apart; :mod:`toolgate.serve.auth.bearer` checks a
token). Either way a request is made by a :class:`Principal`: an agent name, and for a token the
namespaces its scopes allow.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import secrets
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

from ...config.schema import OPERATOR_ROLE, GatewayConfig
from ...errors import ConfigError

if TYPE_CHECKING:
    from ...stores.agent_keys import AgentKeyStore

__all__ = [
    "DEFAULT_AGENT",
    "KEY_PREFIX",
    "AgentIdentity",
    "AuthenticationError",
    "Connection",
    "Principal",
    "UnsafeBindError",
    "check_bind",
    "fingerprint",
    "is_loopback_address",
    "is_loopback_host",
    "key_sha256",
    "new_key",
]

#: The agent every caller is when no keys are configured.
DEFAULT_AGENT: Final = "default"
#: Keys start with this, so they are recognizable in a leaked file or log.
KEY_PREFIX: Final = "tg_"
#: Longer Authorization values are refused before hashing.
MAX_KEY_CHARS: Final = 256


def new_key() -> str:
    """A new random API key (256 bits), ``tg_`` followed by URL-safe base64."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_sha256(key: str) -> str:
    """The hex SHA-256 of a key: what is stored and configured instead of the key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def fingerprint(digest: str) -> str:
    """A short, non-secret name for a key, from its hex SHA-256: ``sha256:`` + 12 digits."""
    return "sha256:" + digest[:12]


class AuthenticationError(PermissionError):
    """The request carries no usable credentials (HTTP 401). ``message`` says what to send.

    ``error`` is the RFC 6750 error code of a bearer token that was refused (``invalid_token``,
    ``insufficient_scope``; ``None``: no credentials, or an API key). ``status`` is the HTTP
    status to answer: ``401``, ``403`` for ``insufficient_scope``, ``503`` when a token could
    not be checked at all (the issuer's keys are unreachable: refused, never accepted)."""

    def __init__(self, message: str, *, error: str | None = None, status: int = 401) -> None:
        super().__init__(message)
        self.message = message
        self.error = error
        self.status = status


@dataclass(frozen=True, slots=True)
class Principal:
    """Who makes a request: the agent, and what its credentials restrict it to."""

    agent: str
    """The agent name (an API key's agent, or a token's agent claim)."""
    namespaces: frozenset[str] | None = None
    """The tool namespaces its token's scopes allow (``None``: no restriction, as for an API
    key)."""
    token_operator: bool | None = None
    """For a token: whether it carries the operator scope (``auth.operator_scope``); ``None``
    for an API key, whose agent is an operator by its ``role: operator`` label."""


class UnsafeBindError(ConfigError):
    """Listening on a non-loopback address without any agent key is refused."""


class Connection(Protocol):
    """What :meth:`AgentIdentity.authenticate` reads of a request: its headers (looked up by
    lower-case name, as Starlette's ``Request`` / ``HTTPConnection`` allow) and its client."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def client(self) -> Any:
        """An object with a ``host`` attribute (the peer's address), or ``None``."""
        ...


@functools.lru_cache(maxsize=1024)
def is_loopback_address(host: str | None) -> bool:
    """Whether ``host`` is a loopback IP literal (``127.0.0.0/8``, ``::1``, IPv4-mapped)."""
    if not host:
        return False
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_host(host: str) -> bool:
    """Whether listening on ``host`` only accepts connections from this machine: a loopback
    literal, or a name every address of which is loopback (``localhost``)."""
    if is_loopback_address(host):
        return True
    try:
        ipaddress.ip_address(host.strip("[]"))
        return False  # a literal, and not a loopback one (0.0.0.0, ::, a LAN address)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    return bool(infos) and all(is_loopback_address(str(info[4][0])) for info in infos)


class AgentIdentity:
    """Authenticates requests and says who is an operator.

    ``labels``: each agent's labels (``toolgate.yaml``). ``config_keys``: agent name → hex
    SHA-256 from ``toolgate.yaml``. ``store``: the keys ``toolgate agents add`` created.
    ``require_keys``: refuse every request without a known key even when none is configured
    (set by :func:`check_bind` for non-loopback addresses).
    """

    def __init__(
        self,
        *,
        labels: Mapping[str, Mapping[str, str]] | None = None,
        config_keys: Mapping[str, str] | None = None,
        store: AgentKeyStore | None = None,
        require_keys: bool = False,
    ) -> None:
        self._labels = {name: dict(values) for name, values in (labels or {}).items()}
        self._config_keys = tuple(
            (name, bytes.fromhex(digest)) for name, digest in (config_keys or {}).items()
        )
        self._store = store
        self.require_keys = require_keys
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._stored: tuple[tuple[str, bytes], ...] = ()
        self._config_names = frozenset(name for name, _ in self._config_keys)
        self._key_names: frozenset[str] = self._config_names

    @classmethod
    def from_config(
        cls, config: GatewayConfig, store: AgentKeyStore | None, *, require_keys: bool = False
    ) -> AgentIdentity:
        """The identities ``toolgate.yaml`` declares, plus the keys in ``store``."""
        return cls(
            labels=config.agent_labels(),
            config_keys={
                name: agent.key_sha256
                for name, agent in config.agents.items()
                if agent.key_sha256 is not None
            },
            store=store,
            require_keys=require_keys,
        )

    # -- keys -----------------------------------------------------------------------------------

    def _keys(self) -> tuple[tuple[str, bytes], ...]:
        """Every live key as (agent, raw digest), the store's re-read when it changed."""
        store = self._store
        if store is None:
            return self._config_keys
        with self._lock:
            generation = store.generation()
            if generation != self._generation:
                every = store.list_keys(include_revoked=True)
                self._stored = tuple(
                    (key.agent, bytes.fromhex(key.key_sha256))
                    for key in every
                    if key.revoked_at is None
                )
                self._key_names = self._config_names | {key.agent for key in every}
                self._generation = generation
            return self._config_keys + self._stored

    def has_key(self, agent: str) -> bool:
        """Whether ``agent`` is an API-key agent: it has, or had (revoked since), a key in
        ``toolgate.yaml`` or the store. Such a name is never a bearer token's agent
        (:class:`~toolgate.serve.auth.callers.Callers`), so what the key's calls left behind — their
        idempotent outcomes, their approvals — is never a token's, nor the other way round."""
        self._keys()
        return agent in self._key_names

    @property
    def keys_configured(self) -> bool:
        """Whether any agent has a key (then every request needs one)."""
        return bool(self._keys())

    def agents(self) -> list[str]:
        """Every agent name that has labels or a key, sorted."""
        return sorted({*self._labels, *(name for name, _ in self._keys())})

    def labels(self, agent: str) -> dict[str, str]:
        """The agent's labels from ``toolgate.yaml`` (empty when it has none)."""
        return dict(self._labels.get(agent, {}))

    # -- requests -------------------------------------------------------------------------------

    def authenticate(self, connection: Connection) -> str:
        """The agent making this request. Raises :class:`AuthenticationError` (HTTP 401) when
        keys are configured and the request has no known one, when a presented key is unknown,
        or, without keys, when the client is not on this machine.

        Reads the headers ``authorization``, ``host``, ``origin`` and ``sec-fetch-site`` only:
        the HTTP API's call path decodes just these (``_IDENTITY_HEADERS`` in
        :mod:`toolgate.serve.api.calls`), so a header read here must be added there too."""
        keys = self._keys()
        header = connection.headers.get("authorization")
        if header is None:
            if keys or self.require_keys:
                raise AuthenticationError(
                    "this server requires an API key: send the header 'Authorization: Bearer "
                    "<key>' (an operator creates keys with 'toolgate agents add NAME')"
                )
            client = getattr(connection.client, "host", None)
            if not is_loopback_address(client):
                raise AuthenticationError(
                    "without agent keys this server only answers clients on the same machine; "
                    "create a key with 'toolgate agents add NAME' and send it as "
                    "'Authorization: Bearer <key>'"
                )
            _refuse_other_sites(connection.headers)
            return DEFAULT_AGENT
        return _match(_bearer_token(header), keys)

    def knows(self, key: str) -> bool:
        """Whether ``key`` is some agent's API key."""
        if len(key) > MAX_KEY_CHARS or not key.isascii():
            return False
        try:
            _match(key, self._keys())
        except AuthenticationError:
            return False
        return True

    def is_operator(self, agent: str) -> bool:
        """Whether ``agent`` may decide approvals, revoke grants, read the audit log and
        connect capabilities: labelled ``role: operator``, or — with no keys configured and
        none required — the local ``default`` caller."""
        key, value = OPERATOR_ROLE
        if self._labels.get(agent, {}).get(key) == value:
            return True
        return agent == DEFAULT_AGENT and not self.require_keys and not self._keys()


@functools.lru_cache(maxsize=256)  # the same Host and Origin on every request of a client
def _is_local_name(url: str) -> bool:
    """Whether the host of ``url`` (``//host:port`` or ``scheme://host:port``) names this
    machine; a malformed one does not."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    return host is not None and (host == "localhost" or is_loopback_address(host))


def _refuse_other_sites(headers: Mapping[str, str]) -> None:
    """Without keys, a web page the user opened elsewhere must not reach the server through
    their browser: not by DNS rebinding (a Host that is not a loopback name) nor by a
    cross-site request (an Origin of another site, or ``Sec-Fetch-Site: cross-site``)."""
    host = headers.get("host")
    if host is not None and not _is_local_name(f"//{host}"):
        raise AuthenticationError(
            f"without agent keys this server only answers requests for a loopback host, not "
            f"{host!r} (DNS-rebinding protection); use http://127.0.0.1 or give agents keys"
        )
    origin = headers.get("origin")
    if origin is not None and not _is_local_name(origin):
        raise AuthenticationError(
            f"without agent keys this server does not answer pages of other sites "
            f"(Origin {origin!r}); give agents keys (toolgate agents add NAME)"
        )
    if headers.get("sec-fetch-site") == "cross-site":
        raise AuthenticationError(
            "without agent keys this server does not answer pages of other sites"
        )


def _bearer_token(header: str) -> str:
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthenticationError("the Authorization header must be 'Bearer <key>'")
    if len(token) > MAX_KEY_CHARS or not token.isascii() or not token.isprintable():
        raise AuthenticationError("the API key is not valid (unknown or revoked)")
    return token


def _match(token: str, keys: tuple[tuple[str, bytes], ...]) -> str:
    """The agent owning ``token``; every known digest is compared, in constant time each."""
    digest = hashlib.sha256(token.encode("ascii")).digest()
    found: str | None = None
    for name, known in keys:
        if hmac.compare_digest(digest, known) and found is None:
            found = name
    if found is None:
        raise AuthenticationError("the API key is not valid (unknown or revoked)")
    return found


def check_bind(host: str, identity: AgentIdentity, *, oauth: bool = False) -> bool:
    """Check that serving on ``host`` is safe; returns whether ``host`` is loopback.

    A non-loopback address needs at least one agent key, or OAuth (``oauth``: bearer tokens
    from an identity provider are accepted), else :class:`UnsafeBindError`; then credentials
    stay required for as long as the server runs (``identity.require_keys``).
    """
    if is_loopback_host(host):
        return True
    if oauth:
        identity.require_keys = True
        return False
    if not identity.keys_configured:
        raise UnsafeBindError(
            f"refusing to listen on {host}: no agent keys are configured, so anyone who can "
            "reach this address could call your tools. Create a key with 'toolgate agents add "
            "NAME' (or set agents.NAME.key_sha256 in toolgate.yaml), configure OAuth (auth: in "
            "toolgate.yaml), or listen on 127.0.0.1."
        )
    identity.require_keys = True
    return False
