"""What every route needs: the gateway, who is calling, and whether they are an operator."""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ...errors import ErrorCode
from ...gateway import Gateway
from ...pipeline.approval_policy import ApprovalPolicy
from ..auth.identity import AuthenticationError, Connection, Principal
from .models import Problem
from .problems import ApiProblem, HttpErrorCode

__all__ = ["ERRORS", "ApiContext", "Caller", "caller_dependencies", "reject_unknown_query"]

#: Every operation documents its errors as problems (any status), so clients and the
#: schemathesis checks know their shape.
ERRORS: dict[int | str, dict[str, Any]] = {
    "default": {
        "description": "An RFC 9457 problem: every error (401, 403, 404, 405, 409, 413, 415, "
        "422, 500, 504…).",
        "model": Problem,  # rewritten to application/problem+json only (see app.py)
    }
}


@dataclass(frozen=True)
class ApiContext:
    """The gateway and the identity rules the routes use."""

    gateway: Gateway
    authenticate: Callable[[Connection], str]
    is_operator: Callable[[str], bool]
    approval_policy: ApprovalPolicy | None = None
    approve_link: str | None = None
    """The web UI's page deciding a request, with ``{id}`` (``None``: no UI is served)."""
    identify: Callable[[Connection], Awaitable[Principal]] | None = None
    """Who is calling, bearer tokens included
    (:meth:`~toolgate.serve.auth.callers.Callers.identify`); ``None``: :attr:`authenticate` alone
    (API keys)."""
    challenge: Callable[[AuthenticationError], str] | None = None
    """The ``WWW-Authenticate`` value of a refusal (``None``: ``Bearer realm="toolgate"``)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made the request."""

    agent: str
    operator: bool
    namespaces: frozenset[str] | None = None
    """The tool namespaces the caller's token allows (``None``: any)."""


_BEARER = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="An agent's API key (toolgate agents add NAME), or with `auth:` configured an "
    "OAuth access token (a JWT) from the identity provider. Without any keys configured the "
    "server only answers loopback clients, all as the 'default' agent, and needs none.",
)


def caller_dependencies(
    context: ApiContext,
) -> tuple[Callable[..., Awaitable[Caller]], Callable[..., Awaitable[Caller]]]:
    """The dependencies ``caller`` (any authenticated agent) and ``operator`` (an agent with
    the operator role; others get 403)."""

    async def caller(
        request: Request,
        _documented: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
    ) -> Caller:
        # HTTPBearer only documents the scheme; the identity rules decide.
        if context.identify is None:
            agent = context.authenticate(request)
            return Caller(agent, context.is_operator(agent))
        principal = await context.identify(request)
        namespaces = principal.namespaces
        if principal.token_operator is None:  # an API key: its agent's role label
            operator = context.is_operator(principal.agent)
        else:
            # A token is an operator's only by the operator scope, never by the agent name it
            # carries (the identity provider's claim could match a configured agent), and not
            # when restricted to some namespaces.
            operator = namespaces is None and principal.token_operator
        return Caller(principal.agent, operator, namespaces)

    async def operator(who: Annotated[Caller, Depends(caller)]) -> Caller:
        if not who.operator:
            raise ApiProblem(
                403,
                ErrorCode.FORBIDDEN,
                f"agent {who.agent!r} is not an operator: only agents labelled 'role: operator' "
                "in toolgate.yaml may use this endpoint",
            )
        return who

    return caller, operator


async def reject_unknown_query(request: Request) -> None:
    """Refuse query parameters the route does not declare, and any given twice (422): a
    misspelt or repeated filter must not silently widen or change a query."""
    if not request.query_params:
        return
    counts = Counter(name for name, _ in request.query_params.multi_items())
    repeated = sorted(name for name, count in counts.items() if count > 1)
    if repeated:
        raise ApiProblem(
            422,
            HttpErrorCode.INVALID_REQUEST,
            f"the query parameter {repeated[0]!r} is given more than once",
        )
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = _query_names(route.dependant)
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        expected = ", ".join(sorted(known)) or "none"
        raise ApiProblem(
            422,
            HttpErrorCode.INVALID_REQUEST,
            f"unknown query parameter {unknown[0]!r} (this endpoint takes: {expected})",
        )


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route declares, its dependencies' included."""
    names = {param.alias for param in dependant.query_params}
    for dependency in dependant.dependencies:
        names |= _query_names(dependency)
    return names
