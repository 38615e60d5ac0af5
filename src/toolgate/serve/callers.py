"""Who makes a request: an agent's API key, or — with ``auth:`` — a bearer JWT.

:class:`Callers` tells the two apart and answers a :class:`~toolgate.serve.identity.Principal`.
An API key is always checked as an API key: a key minted by toolgate (``tg_…``) is never read as
a token, nor is any key an agent has (one from ``toolgate.yaml`` may have dots in it); only a
credential shaped like a JWT (three dot-separated parts, the first a JSON object) that is no
agent's key is checked as a token. API keys keep working exactly as before
(:class:`~toolgate.serve.identity.AgentIdentity`), at the same cost: their prefix is looked at.

With ``auth:`` configured, credentials are always required (no anonymous ``default`` agent), so an
OAuth client without a token gets the ``401`` that starts its authorization flow.
"""

from __future__ import annotations

from .bearer_tokens import TokenVerifier, looks_like_jwt
from .identity import KEY_PREFIX, AgentIdentity, Connection, Principal

__all__ = ["Callers"]


class Callers:
    """API keys (``keys``) and, when given, bearer JWTs (``tokens``)."""

    def __init__(self, keys: AgentIdentity, tokens: TokenVerifier | None = None) -> None:
        self.keys = keys
        self.tokens = tokens
        if tokens is not None:
            keys.require_keys = True
        self._principals: dict[str, Principal] = {}

    async def identify(self, connection: Connection) -> Principal:
        """The principal making this request. Raises
        :class:`~toolgate.serve.identity.AuthenticationError`."""
        tokens = self.tokens
        if tokens is not None:
            header = connection.headers.get("authorization")
            if header is not None:
                scheme, _, token = header.strip().partition(" ")
                token = token.strip()
                if (
                    scheme.lower() == "bearer"
                    and not token.startswith(KEY_PREFIX)
                    and looks_like_jwt(token)
                    and not self.keys.knows(token)
                ):
                    return await tokens.verify(token)
        agent = self.keys.authenticate(connection)
        principal = self._principals.get(agent)
        if principal is None:
            if len(self._principals) > 4096:  # agent names come from configuration
                self._principals.clear()
            principal = self._principals[agent] = Principal(agent)
        return principal
