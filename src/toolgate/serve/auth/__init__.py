"""Who is calling: authentication for the HTTP API, the MCP endpoint and the web UI.

:mod:`.identity` checks agents' API keys (stored hashed) and who is an operator; with ``auth:``
configured, :mod:`.bearer` checks OAuth bearer JWTs against the issuer's keys (:mod:`.jwks`),
:mod:`.callers` tells the two kinds of credential apart, :mod:`.metadata` serves the protected
resource metadata and the ``WWW-Authenticate`` challenges, and :mod:`.oauth` builds these parts
for ``toolgate serve``. Nothing is imported here: PyJWT loads only when ``auth:`` is configured.
"""
