"""Who makes a request: an agent's API key, or — with ``auth:`` — a bearer JWT.

:class:`Callers` tells the two apart and answers a :class:`~toolgate.serve.auth.identity.Principal`.
An API key is always checked as an API key: a key minted by toolgate (``tg_…``) is never read as
a token, nor is any key an agent has (one from ``toolgate.yaml`` may have dots in it); only a
credential shaped like a JWT (three dot-separated parts, the first a JSON object) that is no
agent's key is checked as a token. API keys keep working exactly as before
(:class:`~toolgate.serve.auth.identity.AgentIdentity`), at the same cost: their prefix is looked at.

The two kinds of credentials never share an agent: a token whose agent claim names an agent that
has (or had) an API key is refused (``invalid_token``). An agent's name is what its idempotent
outcomes, its approvals and its MCP sessions belong to; were a token ``sub: alice`` the agent
``alice`` of an API key, it would replay that key's stored outcomes, follow and retry its
approvals, and the key those of the token. An agent of ``agents:`` without a key is still a
token's (its labels and policies apply to the token, as documented).

With ``auth:`` configured, credentials are always required (no anonymous ``default`` agent), so an
OAuth client without a token gets the ``401`` that starts its authorization flow.
"""

from __future__ import annotations

from .bearer import INVALID_TOKEN, TokenVerifier, looks_like_jwt
from .identity import KEY_PREFIX, AgentIdentity, AuthenticationError, Connection, Principal

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
        :class:`~toolgate.serve.auth.identity.AuthenticationError`."""
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
                    verified = await tokens.verify(token)
                    if self.keys.has_key(verified.agent):
                        raise AuthenticationError(
                            "the token's agent claim names an agent that uses an API key; a "
                            "token cannot act as it (the identity provider must name another "
                            "agent)",
                            error=INVALID_TOKEN,
                        )
                    return verified
        agent = self.keys.authenticate(connection)
        principal = self._principals.get(agent)
        if principal is None:
            if len(self._principals) > 4096:  # agent names come from configuration
                self._principals.clear()
            principal = self._principals[agent] = Principal(agent)
        return principal
