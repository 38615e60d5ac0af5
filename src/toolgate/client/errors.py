"""The exceptions of :class:`toolgate.Client`, and the one place an HTTP answer becomes one.

A refusal of the request itself (``application/problem+json``, :mod:`toolgate.serve.api.problems`)
is an exception whose message is the server's ``detail``, one class per meaning; a tool call's own
errors are never exceptions (they are outcomes with a ``code``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import httpx2

from ..errors import ErrorCode, ToolgateError

__all__ = [
    "ApproverKeyRequiredError",
    "GatewayUnreachableError",
    "RemoteAuthError",
    "RemoteConflictError",
    "RemoteError",
    "RemoteNotFoundError",
    "json_object",
    "unreachable",
]


class RemoteError(ToolgateError):
    """The gateway's HTTP API refused a request; the message is the server's ``detail``.

    ``status`` is the HTTP status (0 when no answer came), ``problem`` the whole problem
    document (``code``, ``detail``, and extras such as ``errors`` or ``suggestions``)."""

    code = ErrorCode.CRASHED

    def __init__(
        self, message: str, *, status: int = 0, problem: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.problem: Mapping[str, Any] = problem or {}

    @property
    def problem_code(self) -> str | None:
        """The problem's stable ``code`` (``unauthenticated``, ``forbidden``, ``not_found``…)."""
        code = self.problem.get("code")
        return code if isinstance(code, str) else None


class RemoteAuthError(RemoteError, PermissionError):
    """``401``: no key, or an unknown or revoked one; ``403``: the key may not do this (an
    operator route, deciding its own agent's request)."""

    code = ErrorCode.FORBIDDEN


class RemoteNotFoundError(RemoteError, LookupError):
    """``404``: no such tool for this agent, no such approval request, or no such route (a
    ``url`` that is not a toolgate server)."""

    code = ErrorCode.TOOL_NOT_FOUND


class RemoteConflictError(RemoteError):
    """``409``: the approval request is no longer pending (decided, expired, or its tool
    changed)."""

    code = ErrorCode.APPROVAL_CLOSED


class GatewayUnreachableError(RemoteError, ConnectionError):
    """No answer from the gateway: nothing listens at the URL, the connection broke, the
    answer did not come in time, or a proxy in front of it answered 502-504. The message names
    the URL."""

    code = ErrorCode.UNAVAILABLE


class ApproverKeyRequiredError(ToolgateError):
    """:meth:`toolgate.Client.decide` needs an operator's key (``approver_key``)."""

    code = ErrorCode.FORBIDDEN


def unreachable(url: str, exc: httpx2.TransportError) -> NoReturn:
    """Raise the :class:`GatewayUnreachableError` of a request to ``url`` that got no answer."""
    if isinstance(exc, httpx2.TimeoutException):
        reason = "no answer in time"
    else:
        reason = str(exc) or type(exc).__name__
    raise GatewayUnreachableError(f"cannot reach the toolgate gateway at {url}: {reason}") from None


_KINDS: dict[int, type[RemoteError]] = {
    401: RemoteAuthError,
    403: RemoteAuthError,
    404: RemoteNotFoundError,
    409: RemoteConflictError,
    502: GatewayUnreachableError,
    503: GatewayUnreachableError,
    504: GatewayUnreachableError,
}


def json_object(url: str, response: httpx2.Response) -> dict[str, Any]:
    """The JSON object a success of the gateway at ``url`` carries; else the typed error of
    its problem (a redirect is an error: it is never followed)."""
    status = response.status_code
    if 200 <= status < 300:
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise RemoteError(
                f"{url} answered {status} without a JSON object: is it a toolgate server?",
                status=status,
            )
        return data
    if 300 <= status < 400:
        location = response.headers.get("location", "?")
        raise RemoteError(
            f"{url} answered a redirect ({status}) to {location}: redirects are not followed "
            "(the key must not go elsewhere); pass the final URL as url=",
            status=status,
        )
    problem: dict[str, Any] = {}
    try:
        parsed = response.json()
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        problem = parsed
    detail = problem.get("detail")
    if not isinstance(detail, str):
        detail = f"{url} answered {status}: {response.text[:300]!r}"
    raise _KINDS.get(status, RemoteError)(detail, status=status, problem=problem)
