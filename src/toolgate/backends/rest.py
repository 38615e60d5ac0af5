"""Runs REST tools (``type: rest``) with httpx2, imported only when a REST tool runs.

The request (``spec.endpoint``):

* ``{name}`` placeholders in the URL are filled from the arguments of that name, percent-encoded
  as one path segment (``/`` becomes ``%2F``; ``.`` and ``..`` are encoded too, so a value can
  never climb the path). Strings go in as they are, numbers and booleans as JSON text; objects and
  arrays cannot fill a placeholder (``invalid_arguments``). The loader allows placeholders only
  in the path and the query, so the origin — where the token goes — is the operator's.
* The other arguments are the JSON body for ``POST``, ``PUT`` and ``PATCH`` (always an object),
  or the query string for ``GET`` and ``DELETE`` (lists repeat the key, objects are sent as JSON
  text, ``null`` is left out).
* ``auth: {type: bearer, secretRef: {name}}`` sends ``Authorization: Bearer <secret>``, the secret
  read from the gateway's secret store (global scope) at each call. A missing secret makes the
  tool ``unavailable`` with the command that sets it.

The response:

* 2xx: a JSON body (``application/json`` or ``…+json``) is the result; an empty body is
  ``null``; any other text body is the result as a string; a binary body is a ``tool_error``.
  The pipeline checks the result against the output schema (``invalid_output``).
* 4xx/5xx: ``tool_error`` with the status and the first 500 characters of the body.
* Redirects are followed only within the endpoint's own origin (scheme, host and port), at most
  5 times; a redirect to any other origin is a ``tool_error`` and is never requested, so neither
  the token nor the arguments reach a host the operator did not name.
* The body is read up to 10 MiB (``max_response_bytes``); past that the call fails.
* The token never appears in a result or an error: it is replaced by ``[REDACTED]`` wherever a
  response echoes it, and the tool declares the secret (``Tool.secrets``) so the audit log
  redacts it from everything it records.

Calls of one tool share a client (:mod:`.rest_clients`; no cookie is kept, nothing is shared
between tools; the TLS context is made once), but never a connection: each call opens its own,
as an upstream's stray bytes after one answer must never become the next caller's. Every
connection goes through :class:`~toolgate.backends.rest_transport.GuardedTransport` (issue 8,
SSRF protection): the host is resolved once, and the request is refused unless every address is
public or inside the operator's CIDR grant for the tool (metadata addresses never); each
redirect hop is checked again. Proxies from the environment are not used (``trust_env=False``):
a proxy would choose the address instead.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

from ..call_state import CallState
from ..errors import ToolError
from ..model import RestEndpoint, Tool
from ..registry import RegisteredTool
from ..sandbox.addresses import EgressRefusedError
from ..secrets import SecretResolver
from ..trace_context import OUTGOING
from .base import ArgumentConversionError, BackendUnavailableError, ToolTimeoutError
from .rest_clients import MAX_CONNECTIONS, ClientPool, no_cookie_jar

if TYPE_CHECKING:
    import ssl

__all__ = [
    "DEFAULT_MAX_REDIRECTS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "HttpResponse",
    "PreparedRequest",
    "RestBackend",
    "interpret_response",
    "missing_secret_message",
    "prepare_request",
    "rest_unavailable_reason",
]

log = logging.getLogger("toolgate.backends.rest")

DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_REDIRECTS = 5
#: Characters of an error response shown to the model.
EXCERPT_CHARS = 500
REDACTED = "[REDACTED]"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

_ssl_lock = threading.Lock()
_ssl_context: ssl.SSLContext | None = None


def missing_secret_message(name: str) -> str:
    """Why a REST tool whose secret is not set cannot run, and how to set it."""
    return (
        f"the secret {name!r} (auth.secretRef) is not set; ask the operator to set it with "
        f"'toolgate secrets set {name}'"
    )


@functools.cache
def _httpx2_installed() -> bool:
    # Looked up without importing it: loading a REST tool must not pay for the HTTP client.
    return importlib.util.find_spec("httpx2") is not None


def rest_unavailable_reason(tool: Tool, secrets: SecretResolver) -> str | None:
    """Why ``tool`` cannot run now: httpx2 is not installed, or its secret is not set (or the
    secret store cannot be read). Reads the store; never sends anything."""
    if not _httpx2_installed():
        return "REST tools need the httpx2 package: pip install 'toolgate[rest]'"
    endpoint = tool.entry
    if not isinstance(endpoint, RestEndpoint):
        return f"{tool.id} has no REST endpoint declaration"
    if endpoint.secret_ref is None:
        return None
    try:
        value = secrets.get(tool, endpoint.secret_ref)
    except Exception as exc:  # noqa: BLE001 - a store that cannot be read (permissions, keyring)
        return f"the secret store cannot be read: {exc}"
    return missing_secret_message(endpoint.secret_ref) if not value else None


# -- the request -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """What one call sends: method, URL (placeholders filled, query added) and JSON body."""

    method: str
    url: str
    body: bytes | None


def _kind(value: Any) -> str:
    return (
        "an object"
        if isinstance(value, dict)
        else "an array"
        if isinstance(value, list)
        else "null"
    )


def _scalar_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return value
    return None


def _segment(name: str, value: Any) -> str:
    text = _scalar_text(value)
    if text is None:
        raise ArgumentConversionError(
            f"/{name}: fills {{{name}}} in the URL, so it must be a string or a number, "
            f"not {_kind(value)}"
        )
    if not text:
        raise ArgumentConversionError(f"/{name}: fills {{{name}}} in the URL and must not be empty")
    if text in (".", ".."):
        return text.replace(".", "%2E")  # a path segment of dots would climb the path
    return quote(text, safe="")


def _query_pairs(arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    for key, value in arguments.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item is None:
                continue
            text = _scalar_text(item)
            if text is None:
                text = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
            pairs.append((key, text))
    return pairs


def prepare_request(endpoint: RestEndpoint, arguments: Mapping[str, Any]) -> PreparedRequest:
    """Fill the URL template and place the remaining arguments (see the module documentation).

    Raises :class:`ArgumentConversionError` for an argument that cannot fill a placeholder.
    """
    used: set[str] = set()
    parts: list[str] = []
    rest = endpoint.url
    while True:
        start = rest.find("{")
        if start < 0:
            parts.append(rest)
            break
        end = rest.index("}", start)  # the loader checked the braces
        name = rest[start + 1 : end]
        if name not in arguments:
            raise ArgumentConversionError(f"/{name}: is required: it fills {{{name}}} in the URL")
        parts.append(rest[:start])
        parts.append(_segment(name, arguments[name]))
        used.add(name)
        rest = rest[end + 1 :]
    url = "".join(parts)
    remaining = {k: v for k, v in arguments.items() if k not in used}
    method = endpoint.method.upper()
    if method in _BODY_METHODS:
        body = json.dumps(remaining, ensure_ascii=False, allow_nan=False).encode("utf-8")
        return PreparedRequest(method, url, body)
    pairs = _query_pairs(remaining)
    if pairs:
        query = urlencode(pairs, quote_via=quote)
        url = f"{url}{'&' if '?' in url else '?'}{query}"
    return PreparedRequest(method, url, None)


# -- the response ------------------------------------------------------------------------------


def _redact(value: Any, token: str | None) -> Any:
    """``value`` with every occurrence of ``token`` masked in every string (keys included)."""
    if not token:
        return value
    if isinstance(value, str):
        return value.replace(token, REDACTED)
    if isinstance(value, dict):
        return {_redact(str(k), token): _redact(v, token) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(item, token) for item in value]
    return value


def _excerpt(body: bytes, charset: str | None, token: str | None) -> str:
    text = body.decode(charset or "utf-8", errors="replace")
    text = " ".join(_redact(text, token).split())
    if not text:
        return "(empty body)"
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "…"


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


def _status_hint(status: int, secret: str | None, retry_after: str | None) -> str:
    if status in (401, 403) and secret is not None:
        return (
            f" The endpoint refused the credentials: tell the user; the operator may need to "
            f"set the secret {secret!r} again."
        )
    if status == 429 or (status == 503 and retry_after):
        wait = f" after {retry_after} seconds" if retry_after else " later"
        return f" The endpoint is rate limiting: try again{wait}."
    return ""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A finished HTTP response, its body read (bounded)."""

    status: int
    reason: str
    content_type: str
    charset: str | None
    retry_after: str | None
    body: bytes


def interpret_response(
    what: str,
    response: HttpResponse,
    *,
    token: str | None,
    secret: str | None = None,
) -> Any:
    """The result of a finished response, or :class:`ToolError` saying why there is none.
    ``what`` names the request (``POST https://host/path``) in messages."""
    status = response.status
    if status >= 400 or status < 200:
        hint = _status_hint(status, secret, response.retry_after)
        raise ToolError(
            f"{what} failed with HTTP {status} {response.reason}".rstrip()
            + f": {_excerpt(response.body, response.charset, token)}.{hint}"
        )
    if 300 <= status < 400:
        raise ToolError(
            f"{what} answered HTTP {status}, a redirect toolgate does not follow (it follows "
            "301, 302, 303, 307 and 308 with a Location header within the same origin)"
        )
    if not response.body.strip():
        return None
    if _is_json(response.content_type):
        try:
            value = json.loads(response.body.decode(response.charset or "utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ToolError(
                f"{what} answered with a body marked as JSON that is not valid JSON ({exc}): "
                f"{_excerpt(response.body, response.charset, token)}"
            ) from None
        return _redact(value, token)
    try:
        text = response.body.decode(response.charset or "utf-8")
    except (UnicodeDecodeError, LookupError):
        raise ToolError(
            f"{what} answered with {len(response.body):,} bytes of binary content "
            f"({response.content_type or 'no content type'}), which a REST tool cannot return"
        ) from None
    return _redact(text, token)


# -- sending -----------------------------------------------------------------------------------


def _tls(httpx2: Any) -> ssl.SSLContext:
    """One TLS context for every call (loading the CA bundle is the slow part of a client)."""
    global _ssl_context
    with _ssl_lock:
        if _ssl_context is None:
            _ssl_context = httpx2.create_ssl_context()
        return _ssl_context


def _describe(method: str, url: str) -> str:
    parts = urlsplit(url)
    return f"{method} {parts.scheme}://{parts.netloc}{parts.path}"


def _span_attributes(method: str, url: str) -> dict[str, str | int]:
    """The HTTP client span's attributes: method and server, not the URL (its path and query
    hold argument values, which the audit rules of the tool may require to redact)."""
    parts = urlsplit(url)
    attributes: dict[str, str | int] = {"http.request.method": method}
    if parts.hostname:
        attributes["server.address"] = parts.hostname
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    if port is not None:
        attributes["server.port"] = port
    return attributes


class RestBackend:
    """Runs ``rest`` tools: one HTTP request per call (see the module documentation)."""

    def __init__(
        self,
        secrets: SecretResolver,
        *,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        cidr_grants: Callable[[Tool], Collection[str]] | None = None,
        deny_ports: Collection[int] = (),
        resolver: Any = None,
    ) -> None:
        self.secrets = secrets
        #: Resolves host names (``None``: the system's resolver; ``sandbox.hosts`` pins some).
        self.resolver = resolver
        self.max_response_bytes = max_response_bytes
        self.max_redirects = max_redirects
        #: The operator's CIDR grants for a tool (private ranges it may reach; never metadata).
        self.cidr_grants = cidr_grants or (lambda tool: ())
        #: The gateway's own listening ports, never a REST destination.
        self.deny_ports = tuple(deny_ports)
        self._clients = ClientPool()

    def close(self) -> None:
        """Close the kept connections (:mod:`.rest_clients`)."""
        self._clients.close()

    async def aclose(self) -> None:
        """:meth:`close`, waiting for those of the running loop."""
        await self._clients.aclose()

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        return False

    def run_inline(self, state: CallState) -> Any:
        raise RuntimeError("REST tools run on the event loop; call_sync never inlines them")

    def unavailable_reason(self, tool: Tool) -> str | None:
        """Why ``tool`` cannot run now (see :func:`rest_unavailable_reason`)."""
        return rest_unavailable_reason(tool, self.secrets)

    def _token(self, tool: Tool, endpoint: RestEndpoint) -> str | None:
        name = endpoint.secret_ref
        if name is None:
            return None
        try:
            token = self.secrets.get(tool, name)
        except Exception as exc:  # noqa: BLE001 - the store's own error says what is wrong
            raise BackendUnavailableError(f"the secret store cannot be read: {exc}") from None
        if not token:
            raise BackendUnavailableError(missing_secret_message(name))
        if token != token.strip() or not token.isprintable():
            raise ToolError(
                f"The secret {name!r} is not a usable bearer token (it holds white space at its "
                f"ends or control characters). Tell the user; the operator can set it again with "
                f"'toolgate secrets set {name}'."
            )
        return token

    async def run(self, state: CallState) -> Any:
        tool = state.tool
        endpoint = tool.entry
        if not isinstance(endpoint, RestEndpoint):
            raise BackendUnavailableError(f"{tool.id} has no REST endpoint declaration")
        try:
            import httpx2

            from .rest_transport import GuardedTransport
        except ImportError:
            raise BackendUnavailableError(
                "REST tools need the httpx2 package: pip install 'toolgate[rest]'"
            ) from None
        grants = tuple(self.cidr_grants(tool))

        def make_client() -> Any:
            transport = GuardedTransport(
                verify=_tls(httpx2),
                cidr_grants=grants,
                deny_ports=self.deny_ports,
                resolver=self.resolver,
                max_connections=MAX_CONNECTIONS,
                # Never a connection for a second call: bytes an upstream sends after an
                # answer (a mis-framed length, a late tail) would be read as the next caller's
                # answer, and no check before reuse can see bytes still on their way.
                max_keepalive_connections=0,
            )
            client = httpx2.AsyncClient(
                transport=transport,
                follow_redirects=False,
                trust_env=False,
                cookies=no_cookie_jar(),
            )
            return client, transport

        try:
            # One kept client per tool and rule set (rest_clients): its connections stay open.
            client = self._clients.client((tool.id, grants), make_client)
        except ValueError as exc:
            raise BackendUnavailableError(f"the network grant of {tool.id}: {exc}") from None
        token = self._token(tool, endpoint)
        prepared = prepare_request(endpoint, state.arguments)
        what = _describe(prepared.method, prepared.url)
        headers = {"Accept": "application/json", "User-Agent": "toolgate"}
        if prepared.body is not None:
            headers["Content-Type"] = "application/json"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        timeout = httpx2.Timeout(tool.timeout)
        try:
            outgoing = OUTGOING.get()
            if outgoing is None:
                response = await self._send(client, httpx2, prepared, headers, what, timeout)
            else:
                # Traced: a client span, whose context the endpoint receives (traceparent).
                with outgoing.client_span(
                    prepared.method, _span_attributes(prepared.method, prepared.url)
                ) as span:
                    span.inject(headers)
                    response = await self._send(client, httpx2, prepared, headers, what, timeout)
                    span.set_attribute("http.response.status_code", response.status)
                    if response.status >= 400:
                        span.fail(str(response.status))
        except EgressRefusedError as exc:
            raise ToolError(
                f"{what} was not sent: {exc}. Tell the user: the operator can allow a private "
                f"address for {tool.id} with a CIDR grant; metadata addresses are never allowed."
            ) from None
        except httpx2.TimeoutException:
            raise ToolTimeoutError(
                f"{what} did not answer within {tool.timeout:g} s (tool {tool.id})"
            ) from None
        except httpx2.ConnectError as exc:
            reason = _redact(str(exc), token) or type(exc).__name__
            raise BackendUnavailableError(f"cannot connect for {what}: {reason}") from None
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            reason = _redact(str(exc), token) or type(exc).__name__
            raise ToolError(f"{what} failed: {type(exc).__name__}: {reason}") from None
        log.debug("%s answered HTTP %s (%d bytes)", what, response.status, len(response.body))
        return interpret_response(what, response, token=token, secret=endpoint.secret_ref)

    async def _send(
        self,
        client: Any,
        httpx2: Any,
        prepared: PreparedRequest,
        headers: dict[str, str],
        what: str,
        timeout: Any,
    ) -> HttpResponse:
        method, url, body = prepared.method, httpx2.URL(prepared.url), prepared.body
        origin = url.origin
        for _hop in range(self.max_redirects + 1):
            request = client.build_request(
                method, url, headers=headers, content=body, timeout=timeout
            )
            response = await client.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in _REDIRECTS and location:
                    target = request.url.join(location)
                    if target.origin != origin:
                        # Never requested: neither the token nor the arguments may reach a host
                        # the operator did not name in the resource.
                        raise ToolError(
                            f"{what} redirected (HTTP {response.status_code}) to another origin, "
                            f"{target.scheme}://{target.netloc.decode('ascii')}; toolgate does "
                            "not follow redirects away from the endpoint's origin. Tell the user "
                            "the endpoint URL in the tool's resource needs fixing."
                        )
                    status = response.status_code
                    if status == 303 or (status in (301, 302) and method == "POST"):
                        method, body = "GET", None
                        headers = {k: v for k, v in headers.items() if k != "Content-Type"}
                    url = target
                    continue
                data = await self._read(response, what)
                return HttpResponse(
                    status=response.status_code,
                    reason=response.reason_phrase,
                    content_type=response.headers.get("content-type", ""),
                    charset=response.charset_encoding,
                    retry_after=response.headers.get("retry-after"),
                    body=data,
                )
            finally:
                await response.aclose()
        raise ToolError(f"{what} redirected more than {self.max_redirects} times")

    async def _read(self, response: Any, what: str) -> bytes:
        cap = self.max_response_bytes
        too_big = ToolError(
            f"{what} answered with more than {cap:,} bytes; the response was not read. Ask for "
            "less (a narrower request)."
        )
        declared = response.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            raise too_big
        chunks: list[bytes] = []
        total = 0
        async for chunk in response.aiter_bytes():
            total += len(chunk)
            if total > cap:
                raise too_big
            chunks.append(chunk)
        return b"".join(chunks)
