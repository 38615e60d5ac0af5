"""Errors as RFC 9457 problem details, and the one place each error becomes one.

Every error response of the HTTP API — ours and the framework's own (unknown path, wrong method,
malformed JSON, a body not sent as JSON, a body that does not match the schema, a body too large,
a timeout, a bug) — is ``application/problem+json``::

    {"type": "urn:toolgate:problem:tool_not_found", "title": "Not Found", "status": 404,
     "detail": "no tool named 'demo:ad'; did you mean demo:add?", "code": "tool_not_found"}

``code`` is stable: a :class:`~toolgate.errors.ErrorCode` value where one fits (``forbidden``,
``tool_not_found``, ``approval_closed``, ``timeout``, ``unavailable``, ``crashed``), else one of the
HTTP-level :class:`HttpErrorCode` values. ``type`` is ``urn:toolgate:problem:<code>``; ``title`` is
the status's reason phrase. Validation problems add ``errors``: one entry per failing field.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from enum import StrEnum
from http import HTTPStatus
from typing import Any, Final

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from pydantic_core import PydanticSerializationError, to_json
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ...audit.log_base import AuditStoreError
from ...errors import ApprovalClosedError, ErrorCode, StateUnavailableError, ToolNotFoundError
from ..auth.identity import AuthenticationError

__all__ = [
    "PROBLEM_JSON",
    "ApiJSONResponse",
    "ApiProblem",
    "HttpErrorCode",
    "authentication_problem",
    "crash_response",
    "install_problem_handlers",
    "not_json_problem",
    "problem_response",
    "schema_errors",
    "unparsed_body",
]

log = logging.getLogger("toolgate.serve")

#: The media type of every error response.
PROBLEM_JSON: Final = "application/problem+json"


class HttpErrorCode(StrEnum):
    """Codes of HTTP-level problems that no tool call can have (the rest are
    :class:`~toolgate.errors.ErrorCode` values)."""

    UNAUTHENTICATED = "unauthenticated"
    """No API key, or one that is unknown or revoked (401)."""
    NOT_FOUND = "not_found"
    """No such path, approval request, grant or capability (404)."""
    METHOD_NOT_ALLOWED = "method_not_allowed"
    """The path exists but not with this method (405; ``Allow`` lists the methods)."""
    PAYLOAD_TOO_LARGE = "payload_too_large"
    """The request body is over the limit (413)."""
    INVALID_REQUEST = "invalid_request"
    """The body is not valid JSON (400), is not sent as JSON (415), or a field does not match
    the schema (422)."""


def _sanitize(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None`` (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(v) for v in value]
    return value


def _default(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


#: What pydantic-core refuses (a lone surrogate, which no UTF-8 text can hold) is escaped.
_ASCII_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=_default)


def render_json(value: Any) -> bytes:
    """Strict JSON: non-finite floats become ``null`` and other values their ``str``, so that
    what a tool returned can never make a response fail to render.

    pydantic-core's compiled encoder renders every answer (a tool call's included: the hot
    path); the standard library's takes what it refuses."""
    try:
        return to_json(value, inf_nan_mode="null", fallback=_default)
    except PydanticSerializationError:
        try:
            text = _ASCII_ENCODER.encode(value)
        except ValueError:  # NaN or infinity somewhere (a tool's result, a statistic)
            text = _ASCII_ENCODER.encode(_sanitize(value))
        return text.encode("ascii")


class ApiJSONResponse(JSONResponse):
    """Every JSON body of the API, rendered with :func:`render_json`."""

    def render(self, content: Any) -> bytes:
        return render_json(content)


class _ProblemResponse(ApiJSONResponse):
    media_type = PROBLEM_JSON


def problem_response(
    status: int,
    code: ErrorCode | HttpErrorCode | str,
    detail: str,
    *,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    """An ``application/problem+json`` response."""
    body: dict[str, Any] = {
        "type": f"urn:toolgate:problem:{code}",
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": str(code),
    }
    if extra:
        body.update(extra)
    return _ProblemResponse(body, status_code=status, headers=dict(headers or {}))


class ApiProblem(Exception):
    """Raise in a route to answer with a problem."""

    def __init__(
        self,
        status: int,
        code: ErrorCode | HttpErrorCode,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers
        self.extra = extra

    def response(self) -> Response:
        """The problem as a response."""
        return problem_response(
            self.status, self.code, self.detail, headers=self.headers, extra=self.extra
        )


_HTTP_CODES: Final[dict[int, ErrorCode | HttpErrorCode]] = {
    400: HttpErrorCode.INVALID_REQUEST,
    401: HttpErrorCode.UNAUTHENTICATED,
    403: ErrorCode.FORBIDDEN,
    404: HttpErrorCode.NOT_FOUND,
    405: HttpErrorCode.METHOD_NOT_ALLOWED,
    413: HttpErrorCode.PAYLOAD_TOO_LARGE,
    415: HttpErrorCode.INVALID_REQUEST,
    422: HttpErrorCode.INVALID_REQUEST,
    504: ErrorCode.TIMEOUT,
}

_HTTP_DETAILS: Final[dict[int, str]] = {
    404: "no such path in the toolgate API (GET /v1 lists its routes; /openapi.json documents "
    "them)",
    405: "this path does not accept this method (the Allow header lists the ones it does)",
}


def _pointer(loc: tuple[Any, ...] | list[Any]) -> str:
    """A validation error's location as a JSON pointer into the part it names."""
    return "/" + "/".join(str(part).replace("~", "~0").replace("/", "~1") for part in loc)


def not_json_problem(content_type: str | None, example: str | None = None) -> ApiProblem:
    """The ``415`` problem of a request body not sent as JSON (``content_type`` is what the
    request said, ``None``: nothing); ``example`` is what the body should look like."""
    said = (
        "this request has no Content-Type header"
        if not content_type
        else f"this request's Content-Type is {content_type[:100]!r}"
    )
    shape = f", as in {example}" if example else ""
    return ApiProblem(
        415,
        HttpErrorCode.INVALID_REQUEST,
        f"send the request body as JSON{shape}, with the header Content-Type: application/json "
        f"({said})",
    )


def unparsed_body(exc: RequestValidationError) -> bool:
    """Whether validation failed because the body was not parsed as JSON at all: FastAPI hands
    the schema the raw bytes of a body whose ``Content-Type`` is not JSON (or missing)."""
    return any(
        tuple(error.get("loc", ())) == ("body",) and isinstance(error.get("input"), bytes)
        for error in exc.errors()
    )


def schema_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    """The failing fields of ``exc``, each with where (``in``), a JSON ``pointer`` into that
    part of the request, a ``message`` and its ``type``."""
    return [
        {
            "in": str(error["loc"][0]) if error.get("loc") else "request",
            "pointer": _pointer(tuple(error.get("loc", ()))[1:]),
            "message": str(error.get("msg", "invalid")),
            "type": str(error.get("type", "invalid")),
        }
        for error in exc.errors()
    ]


def _json_invalid(exc: RequestValidationError) -> Response | None:
    """The ``400`` problem of a body that is not valid JSON, if that is what ``exc`` is."""
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            loc = error.get("loc", ())
            position = loc[1] if len(loc) > 1 else "?"
            reason = (error.get("ctx") or {}).get("error", "invalid JSON")
            return problem_response(
                400,
                HttpErrorCode.INVALID_REQUEST,
                f"the request body is not valid JSON: {reason} (at character {position})",
            )
    return None


def _validation_problem(exc: RequestValidationError, request: Request) -> Response:
    """The problem answering a request FastAPI's validation refused: ``400`` for malformed JSON,
    ``415`` for a body not sent as JSON, else ``422`` listing each failing field."""
    invalid = _json_invalid(exc)
    if invalid is not None:
        return invalid
    if unparsed_body(exc):
        return not_json_problem(request.headers.get("content-type")).response()
    details = schema_errors(exc)
    summary = "; ".join(f"{d['in']} {d['pointer']}: {d['message']}" for d in details[:5])
    more = f" (and {len(details) - 5} more)" if len(details) > 5 else ""
    return problem_response(
        422,
        HttpErrorCode.INVALID_REQUEST,
        f"the request does not match the API's schema: {summary}{more}",
        extra={"errors": details},
    )


def crash_response() -> Response:
    """The ``500`` problem of a request the gateway failed to handle (a bug, logged)."""
    return problem_response(
        500,
        ErrorCode.CRASHED,
        "the gateway failed while handling this request (a bug); the details are in the "
        "server's log",
    )


def authentication_problem(
    exc: AuthenticationError, challenge: Callable[[AuthenticationError], str] | None = None
) -> Response:
    """The problem answering a refused credential: ``401`` (``unauthenticated``) with the
    ``WWW-Authenticate`` challenge, ``403`` (``forbidden``) for a token without the needed
    scope, ``503`` (``unavailable``) when a token could not be checked at all."""
    if exc.status == 503:
        return problem_response(
            503, ErrorCode.UNAVAILABLE, exc.message, headers={"Retry-After": "30"}
        )
    header = 'Bearer realm="toolgate"' if challenge is None else challenge(exc)
    code = ErrorCode.FORBIDDEN if exc.status == 403 else HttpErrorCode.UNAUTHENTICATED
    return problem_response(exc.status, code, exc.message, headers={"WWW-Authenticate": header})


def install_problem_handlers(
    app: FastAPI, *, challenge: Callable[[AuthenticationError], str] | None = None
) -> None:
    """Answer every error of ``app`` — including the framework's own — with a problem.
    ``challenge`` writes the ``WWW-Authenticate`` value of a 401 (OAuth resource metadata)."""

    async def on_problem(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApiProblem)
        return exc.response()

    async def on_authentication(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AuthenticationError)
        return authentication_problem(exc, challenge)

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        status = exc.status_code
        code = _HTTP_CODES.get(
            status, HttpErrorCode.INVALID_REQUEST if status < 500 else ErrorCode.CRASHED
        )
        detail = _HTTP_DETAILS.get(status) or (
            exc.detail if isinstance(exc.detail, str) else HTTPStatus(status).phrase
        )
        if status == 400 and detail == "There was an error parsing the body":
            detail = "the request body cannot be parsed (JSON nested too deeply, or not text)"
        return problem_response(status, code, detail, headers=exc.headers)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return _validation_problem(exc, request)

    async def on_tool_not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ToolNotFoundError)
        return problem_response(
            404,
            ErrorCode.TOOL_NOT_FOUND,
            exc.message,
            extra={"suggestions": list(exc.suggestions)},
        )

    async def on_approval_closed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ApprovalClosedError)
        return problem_response(409, ErrorCode.APPROVAL_CLOSED, exc.message)

    async def on_audit_store(request: Request, exc: Exception) -> Response:
        return problem_response(
            503, ErrorCode.UNAVAILABLE, f"the audit log cannot be read now: {exc}"
        )

    async def on_state_unavailable(request: Request, exc: Exception) -> Response:
        # PostgreSQL or Redis is down: the pool reconnects by itself, the client retries.
        return problem_response(503, ErrorCode.UNAVAILABLE, str(exc), headers={"Retry-After": "5"})

    async def on_crash(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return crash_response()

    app.add_exception_handler(ApiProblem, on_problem)
    app.add_exception_handler(AuthenticationError, on_authentication)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(ToolNotFoundError, on_tool_not_found)
    app.add_exception_handler(ApprovalClosedError, on_approval_closed)
    app.add_exception_handler(AuditStoreError, on_audit_store)
    app.add_exception_handler(StateUnavailableError, on_state_unavailable)
    app.add_exception_handler(Exception, on_crash)
