"""``toolgate.Client``: a running ``toolgate serve`` as a
:class:`~toolgate.integrations.base.ToolGateway`.

The framework adapters take any ``ToolGateway``; with this client they work against one gateway
service shared by many agents exactly as against an in-process gateway::

    async with Client("http://127.0.0.1:8470", key=AGENT_KEY) as gateway:
        tools = await gateway.list_tools()
        outcome = await gateway.call("demo:lookup", {"city": "Cairo"})

The agent is the one the key names (``GET /v1/me``): a client cannot call as anyone else.
A tool call's own errors are outcomes (``status="error"`` with a ``code``), never exceptions;
the API's refusals (``application/problem+json``) become the typed
:class:`~toolgate.client.errors.RemoteError` exceptions, their message the server's ``detail``.

Keys go to ``url``'s origin only: redirects are never followed, the environment's proxies and
``.netrc`` are ignored, and every path segment (a tool id chosen by a model, an approval id) is
percent-encoded so it cannot leave its route.
"""

from .errors import (
    ApproverKeyRequiredError,
    GatewayUnreachableError,
    RemoteAuthError,
    RemoteConflictError,
    RemoteError,
    RemoteNotFoundError,
)
from .remote import DEFAULT_CALL_TIMEOUT, DEFAULT_TIMEOUT, Client

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_TIMEOUT",
    "ApproverKeyRequiredError",
    "Client",
    "GatewayUnreachableError",
    "RemoteAuthError",
    "RemoteConflictError",
    "RemoteError",
    "RemoteNotFoundError",
]
