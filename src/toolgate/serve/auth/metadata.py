"""Protected Resource Metadata (RFC 9728) and the ``WWW-Authenticate`` challenge of a 401.

With ``auth:`` configured, toolgate is an OAuth 2.1 resource server. A client that gets ``401``
reads ``resource_metadata`` from the challenge, fetches that document, learns the authorization
server (``authorization_servers``) and the scopes to ask for, and gets a token for this resource
(MCP authorization specification, "Authorization Server Discovery").

Two documents are served, without credentials:

* ``/.well-known/oauth-protected-resource`` — the resource ``auth.resource`` (the HTTP API);
* ``/.well-known/oauth-protected-resource/mcp`` — the resource ``<auth.resource>/mcp`` (the MCP
  endpoint; RFC 9728 §3.1 inserts the well-known segment before the resource's path).
"""

from __future__ import annotations

import json
from typing import Any, Final

from starlette.types import Receive, Scope, Send

from ...config.schema import AuthConfig
from .identity import AuthenticationError

__all__ = ["MCP_METADATA_PATH", "METADATA_PATH", "ResourceMetadata"]

#: Where the metadata of the whole server (the HTTP API) is.
METADATA_PATH: Final = "/.well-known/oauth-protected-resource"
#: Where the metadata of the MCP endpoint is.
MCP_METADATA_PATH: Final = METADATA_PATH + "/mcp"


def _quoted(text: str) -> str:
    """``text`` as an RFC 9110 quoted-string (printable ASCII only)."""
    clean = "".join(char if " " <= char <= "~" else "?" for char in text)
    return '"' + clean.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ResourceMetadata:
    """The metadata documents (an ASGI app for :data:`METADATA_PATH` and
    :data:`MCP_METADATA_PATH`) and the challenges that point to them."""

    paths: Final = frozenset({METADATA_PATH, MCP_METADATA_PATH})

    def __init__(self, config: AuthConfig) -> None:
        self.config = config
        self._bodies = {
            METADATA_PATH: self._body(config.resource),
            MCP_METADATA_PATH: self._body(config.resource + "/mcp"),
        }

    def document(self, resource: str) -> dict[str, Any]:
        """The RFC 9728 metadata of ``resource``."""
        config = self.config
        document: dict[str, Any] = {
            "resource": resource,
            "authorization_servers": [config.issuer],
            "bearer_methods_supported": ["header"],
            "resource_signing_alg_values_supported": list(config.algorithms),
            "resource_name": "toolgate",
        }
        if config.scopes:
            document["scopes_supported"] = sorted(config.scopes)
        return document

    def _body(self, resource: str) -> bytes:
        return json.dumps(self.document(resource), separators=(",", ":")).encode("utf-8")

    def url(self, *, mcp: bool) -> str:
        """The metadata URL of the MCP endpoint (``mcp``) or of the HTTP API."""
        return self.config.resource + (MCP_METADATA_PATH if mcp else METADATA_PATH)

    def challenge(self, error: AuthenticationError | None = None, *, mcp: bool = False) -> str:
        """The ``WWW-Authenticate`` value answering ``error`` (RFC 6750 §3, RFC 9728 §5.1)."""
        parts = [f"resource_metadata={_quoted(self.url(mcp=mcp))}"]
        if error is not None and error.error is not None:
            parts.append(f"error={_quoted(error.error)}")
            parts.append(f"error_description={_quoted(error.message)}")
        if self.config.scopes:
            parts.append(f"scope={_quoted(' '.join(sorted(self.config.scopes)))}")
        return "Bearer " + ", ".join(parts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the documents (``GET``/``HEAD``; ``OPTIONS`` for browsers' preflight)."""
        body = self._bodies.get(scope.get("path", ""))
        method = scope.get("method", "GET")
        headers = [
            (b"access-control-allow-origin", b"*"),  # public, and read by browser clients
            (b"cache-control", b"public, max-age=300"),
        ]
        if body is None:
            status, body = 404, b'{"error":"not_found"}'
        elif method == "OPTIONS":
            status, body = 204, b""
            headers.append((b"access-control-allow-methods", b"GET, HEAD, OPTIONS"))
        elif method not in ("GET", "HEAD"):
            status, body = 405, b'{"error":"method_not_allowed"}'
            headers.append((b"allow", b"GET, HEAD, OPTIONS"))
        else:
            status = 200
        headers += [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("latin-1")),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})
