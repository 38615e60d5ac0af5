"""What the body of a tool call must look like, said when a call's body is something else.

``POST /v1/tools/{tool_id}/call`` takes ``{"arguments": {...}}``, optionally with
``session_id`` and ``workspace``. A newcomer's first call often sends the tool's arguments
themselves (``{"a": 2}``), or JSON without ``Content-Type: application/json``; FastAPI's own
validation would answer "body /a: Extra inputs are not permitted" or "Input should be a valid
dictionary", which name neither the shape nor the fix. The call route is built with
:func:`call_route_class`, whose handler answers those with :func:`call_body_problem`: ``415``
for a body not sent as JSON, ``422`` naming the shape for one that does not match it — and, when
the unknown top-level keys are the tool's own arguments, saying to put them under
``"arguments"``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Final

from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from .problems import ApiProblem, HttpErrorCode, not_json_problem, schema_errors, unparsed_body

__all__ = [
    "CALL_BODY",
    "CALL_BODY_FIELDS",
    "ToolArguments",
    "call_body_problem",
    "call_route_class",
]

#: The shape of a call body, as the problems write it.
CALL_BODY: Final = '{"arguments": {...}}'
#: The fields a call body may have.
CALL_BODY_FIELDS: Final = (
    "arguments",
    "session_id",
    "workspace",
    "tool_call_id",
    "idempotency_key",
)
#: Said at the end of every problem with a call's body.
_SHAPE: Final = (
    f'A call body is {CALL_BODY}, the tool\'s arguments by name, optionally with "session_id", '
    '"workspace", "tool_call_id" and "idempotency_key".'
)
#: How many unknown fields a problem names.
_NAMED: Final = 5

#: ``(tool id, its argument names)`` of the tool a request calls, when the caller may see it.
ToolArguments = Callable[[Request], tuple[str, frozenset[str]] | None]


def _quoted(names: Iterable[str]) -> str:
    """``"a"``, ``"a" and "b"``, ``"a", "b" and "c"`` (at most :data:`_NAMED`, then how many
    more)."""
    items = [f'"{name}"' for name in names]
    if len(items) > _NAMED:
        items = [*items[:_NAMED], f"{len(items) - _NAMED} more"]
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _json_type(value: Any) -> str:
    """What kind of JSON value ``value`` is, for a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _unknown_fields(unknown: list[str], tool: tuple[str, frozenset[str]] | None) -> str:
    """What to say of a body with top-level keys a call body does not have: that they are the
    tool's arguments (when the tool declares them), a misspelt field, or unknown."""
    one = len(unknown) == 1
    if tool is not None:
        tool_id, arguments = tool
        given = [name for name in unknown if name in arguments]
        if given:
            single = len(given) == 1
            example = ", ".join(f'"{name}": ...' for name in given[:_NAMED])
            more = ", ..." if len(given) > _NAMED else ""
            return (
                f"{_quoted(given)} {'is an argument' if single else 'are arguments'} of "
                f"{tool_id}, not {'a field' if single else 'fields'} of a call body: put "
                f'{"it" if single else "them"} under "arguments", as in '
                f'{{"arguments": {{{example}{more}}}}}.'
            )
    for name in unknown:
        close = difflib.get_close_matches(name, CALL_BODY_FIELDS, n=1, cutoff=0.7)
        if close:
            return f'the call body has an unknown field "{name}" (did you mean "{close[0]}"?).'
    return (
        f"the call body has {'an unknown field' if one else 'unknown fields'} {_quoted(unknown)}; "
        f"if {'it is' if one else 'they are'} the tool's arguments, put "
        f'{"it" if one else "them"} under "arguments".'
    )


def call_body_problem(
    exc: RequestValidationError, request: Request, tool: tuple[str, frozenset[str]] | None
) -> ApiProblem | None:
    """The problem answering a call whose body failed validation with ``exc``; ``None`` when
    the failure is not the shape of the body (malformed JSON, a path parameter): the generic
    problem answers it.

    ``tool`` is the called tool's id and argument names when the caller may see it (then keys
    that are its arguments are named as such)."""
    errors = list(exc.errors())
    if not errors or any(
        tuple(error.get("loc", ()))[:1] != ("body",) or error.get("type") == "json_invalid"
        for error in errors
    ):
        return None  # not JSON at all (400), or not the body's failure
    if unparsed_body(exc):
        return not_json_problem(request.headers.get("content-type"), CALL_BODY)
    root = [error for error in errors if len(error.get("loc", ())) == 1]
    unknown = [
        str(error["loc"][1])
        for error in errors
        if error.get("type") == "extra_forbidden" and len(error.get("loc", ())) == 2
    ]
    arguments = [error for error in errors if tuple(error.get("loc", ())) == ("body", "arguments")]
    if root:
        said = f"the call body must be a JSON object, not {_json_type(root[0].get('input'))}."
    elif arguments and arguments[0].get("type") == "dict_type":
        said = (
            '"arguments" must be a JSON object of the tool\'s arguments by name, not '
            f"{_json_type(arguments[0].get('input'))}."
        )
    elif unknown:
        said = _unknown_fields(unknown, tool)
    else:
        details = schema_errors(exc)
        said = "; ".join(f"{d['pointer']}: {d['message']}" for d in details[:_NAMED]) + "."
        said = f"the call body does not match its schema: {said}"
    return ApiProblem(
        422,
        HttpErrorCode.INVALID_REQUEST,
        f"{said} {_SHAPE}",
        extra={"errors": schema_errors(exc)},
    )


def call_route_class(tool_arguments: ToolArguments) -> type[APIRoute]:
    """An :class:`~fastapi.routing.APIRoute` whose body problems say what a call body is
    (:func:`call_body_problem`); ``tool_arguments(request)`` names the called tool's arguments
    when its caller may see it (after the route's dependencies authenticated the caller)."""

    class CallRoute(APIRoute):
        """The route of ``POST /v1/tools/{tool_id}/call``."""

        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            handler = super().get_route_handler()

            async def handle(request: Request) -> Response:
                try:
                    return await handler(request)
                except RequestValidationError as exc:
                    problem = call_body_problem(exc, request, tool_arguments(request))
                    if problem is None:
                        raise
                    raise problem from None

            return handle

    return CallRoute
