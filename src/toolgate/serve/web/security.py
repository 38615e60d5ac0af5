"""What keeps the operator's console safe in a browser that also visits other sites.

One ASGI middleware, :class:`ConsoleGuard`, runs before every page:

* **Host check** — the ``Host`` header must name one of ``allowed_hosts`` (by default the
  loopback names). A loopback server is otherwise reachable from any web page through DNS
  rebinding: ``evil.example`` re-pointed at 127.0.0.1 would be same-origin with the console.
* **Operator check** — ``require_operator(request)`` says who is using the console (the name is
  recorded as the person who decided an approval) or refuses (403). The default,
  :func:`loopback_operator`, admits loopback clients only.
* **Cross-site request forgery** — every request that is not GET/HEAD must be a same-origin form
  post: ``Sec-Fetch-Site`` (when the browser sends it) must be ``same-origin``, ``Origin`` (when
  sent) must be the console's own, the body must be a url-encoded form of at most
  :data:`MAX_FORM_BYTES`, and its ``csrf_token`` field must match the browser's session cookie
  (a signed double-submit token: HMAC of the random cookie value under a per-process key). The
  cookie is ``HttpOnly`` and ``SameSite=Strict``. The parsed form is handed to the page (see
  :func:`form_of`); pages never read the body themselves.
* **Headers** — a Content-Security-Policy that allows scripts and styles from the console itself
  only (no inline scripts, no inline styles, no frames around it), ``nosniff``, a same-origin
  referrer policy (``no-referrer`` would make browsers send ``Origin: null`` with the console's own
  form posts), and ``no-store`` for pages.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ipaddress
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from http.cookies import SimpleCookie
from typing import Final
from urllib.parse import parse_qsl

from starlette.datastructures import ImmutableMultiDict
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CSP",
    "CSRF_COOKIE",
    "DEFAULT_ALLOWED_HOSTS",
    "LOOPBACK_OPERATOR",
    "MAX_FORM_BYTES",
    "ConsoleGuard",
    "OperatorCheck",
    "SignInRequired",
    "csrf_token_of",
    "form_of",
    "is_loopback",
    "loopback_operator",
    "operator_of",
]

#: Who may use the console: returns the operator's name, or ``None`` to refuse the request.
OperatorCheck = Callable[[Request], "str | Awaitable[str | None] | None"]

#: The name recorded for decisions made through the console by :func:`loopback_operator`.
LOOPBACK_OPERATOR: Final = "operator"
#: Host names a loopback-bound console answers to.
DEFAULT_ALLOWED_HOSTS: Final = ("127.0.0.1", "localhost", "::1")
CSRF_COOKIE: Final = "toolgate_console"
CSRF_FIELD: Final = "csrf_token"
#: The largest form the console accepts (the biggest is a call's JSON arguments).
MAX_FORM_BYTES: Final = 256 * 1024
CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
_STATE_FORM: Final = "toolgate.form"
_STATE_TOKEN: Final = "toolgate.csrf"
_STATE_OPERATOR: Final = "toolgate.operator"


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (an address as the server saw it) is a loopback address."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def loopback_operator(request: Request) -> str | None:
    """The default operator check: requests from a loopback address are the operator's.

    Every local user of the machine can reach a loopback port; see the web UI docs for exposing
    the console behind an operator credential instead.
    """
    client = request.client
    return LOOPBACK_OPERATOR if client is not None and is_loopback(client.host) else None


def form_of(request: Request) -> ImmutableMultiDict[str, str]:
    """The form of a (verified) POST: :class:`ConsoleGuard` parsed it before the page ran."""
    form = request.scope.get(_STATE_FORM)
    return form if isinstance(form, ImmutableMultiDict) else ImmutableMultiDict()


def csrf_token_of(request: Request) -> str:
    """The token the console's forms must carry in ``csrf_token``."""
    return str(request.scope.get(_STATE_TOKEN, ""))


def operator_of(request: Request) -> str:
    """The operator's name, as the operator check gave it."""
    return str(request.scope.get(_STATE_OPERATOR, LOOPBACK_OPERATOR))


def _host_name(host_header: str) -> str:
    """``example.org:8000`` → ``example.org``; ``[::1]:8000`` → ``::1``."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else ""
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _headers(scope: Scope) -> dict[str, str]:
    # Later duplicates lose: a second Host or Origin header is not a way around the checks,
    # since every check reads the same first value.
    found: dict[str, str] = {}
    for key, value in scope.get("headers", ()):
        name = key.decode("latin-1").lower()
        found.setdefault(name, value.decode("latin-1"))
    return found


class SignInRequired(Exception):
    """Raised by an operator check when the request carries no (valid) operator credential:
    the console answers 401 with an HTTP Basic challenge, so the browser asks for one."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _Refusal(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class ConsoleGuard:
    """The console's ASGI middleware (see the module docstring).

    ``refuse(scope, status, message)`` builds the page shown when a request is refused.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        require_operator: OperatorCheck,
        allowed_hosts: Iterable[str] | None,
        refuse: Callable[[Scope, int, str], ASGIApp],
        key: bytes | None = None,
    ) -> None:
        self.app = app
        self.require_operator = require_operator
        self.allowed_hosts = (
            None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        )
        self.refuse = refuse
        self._key = key or secrets.token_bytes(32)

    def token_for(self, cookie: str) -> str:
        """The form token that goes with a session cookie value."""
        return hmac.new(self._key, cookie.encode(), hashlib.sha256).hexdigest()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            self._check_host(headers)
            operator = await self._operator(scope)
        except _Refusal as refusal:
            await self.refuse(scope, refusal.status, refusal.message)(scope, receive, send)
            return
        cookie = _cookie(headers)
        new_cookie = None
        if cookie is None:
            cookie = new_cookie = secrets.token_urlsafe(32)
        scope[_STATE_OPERATOR] = operator
        scope[_STATE_TOKEN] = self.token_for(cookie)
        if scope["method"] not in _SAFE_METHODS:
            try:
                scope[_STATE_FORM] = await self._verified_form(scope, headers, receive, new_cookie)
            except _Refusal as refusal:
                await self.refuse(scope, refusal.status, refusal.message)(scope, receive, send)
                return
            receive = _replayed(receive)
        secure = scope.get("scheme") == "https"

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = _security_headers(message, secure, new_cookie)
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _check_host(self, headers: Mapping[str, str]) -> None:
        if self.allowed_hosts is None:
            return
        host = _host_name(headers.get("host", ""))
        if host not in self.allowed_hosts:
            raise _Refusal(
                400,
                f"this console answers to {', '.join(sorted(self.allowed_hosts))} only "
                "(the Host header names another; see the web UI docs to allow more names)",
            )

    async def _operator(self, scope: Scope) -> str:
        try:
            answer = self.require_operator(Request(scope))
            if inspect.isawaitable(answer):
                answer = await answer
        except SignInRequired as exc:
            raise _Refusal(401, exc.message) from None
        except Exception as exc:  # noqa: BLE001 - a failing check refuses (fail closed)
            raise _Refusal(403, f"the operator check failed: {type(exc).__name__}") from None
        if not isinstance(answer, str) or not answer:
            raise _Refusal(
                403,
                "this console is the operator's: open it from the machine toolgate runs on, "
                "or sign in with an operator credential",
            )
        return answer

    async def _verified_form(
        self,
        scope: Scope,
        headers: Mapping[str, str],
        receive: Receive,
        new_cookie: str | None,
    ) -> ImmutableMultiDict[str, str]:
        if scope["method"] != "POST":
            raise _Refusal(405, "the console changes things with form posts only")
        fetch_site = headers.get("sec-fetch-site")
        if fetch_site is not None and fetch_site != "same-origin":
            raise _Refusal(403, "cross-site form posts are refused")
        origin = headers.get("origin")
        if origin is not None:
            own = f"{scope.get('scheme', 'http')}://{headers.get('host', '')}".lower()
            if origin.lower() != own:
                raise _Refusal(403, "form posts from another origin are refused")
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise _Refusal(415, "the console accepts url-encoded forms only")
        body = await _read_body(receive, MAX_FORM_BYTES)
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise _Refusal(400, "the form is not valid UTF-8 url-encoded data") from None
        form = ImmutableMultiDict(pairs)
        token = form.get(CSRF_FIELD, "")
        if new_cookie is not None or not hmac.compare_digest(
            token.encode(), str(scope[_STATE_TOKEN]).encode()
        ):
            raise _Refusal(
                403,
                "the form's security token does not match this browser's session; reload the "
                "page and try again",
            )
        return form


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refusal(400, "the client went away")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _Refusal(413, f"forms are limited to {limit // 1024} KiB")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replayed(receive: Receive) -> Receive:
    """The body was read (and handed over as the parsed form): the app gets one empty body
    message, then the connection's own messages (``http.disconnect``)."""
    delivered = False

    async def replay() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return await receive()

    return replay


def _cookie(headers: Mapping[str, str]) -> str | None:
    raw = headers.get("cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # noqa: BLE001 - a malformed Cookie header is no session
        return None
    morsel = jar.get(CSRF_COOKIE)
    value = None if morsel is None else morsel.value
    # Only values this console could have made: 43 url-safe characters.
    if value is None or len(value) != 43 or not value.replace("-", "").replace("_", "").isalnum():
        return None
    return value


def _security_headers(
    message: Message, secure: bool, new_cookie: str | None
) -> list[tuple[bytes, bytes]]:
    present = {key.lower() for key, _ in message.get("headers", ())}
    extra: list[tuple[bytes, bytes]] = [
        (b"content-security-policy", CSP.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"x-frame-options", b"DENY"),
        (b"referrer-policy", b"same-origin"),
        (b"cross-origin-opener-policy", b"same-origin"),
        (b"cross-origin-resource-policy", b"same-origin"),
    ]
    if b"cache-control" not in present:
        extra.append((b"cache-control", b"no-store"))
    if new_cookie is not None:
        attributes = "; Path=/; HttpOnly; SameSite=Strict" + ("; Secure" if secure else "")
        extra.append((b"set-cookie", f"{CSRF_COOKIE}={new_cookie}{attributes}".encode()))
    return extra
