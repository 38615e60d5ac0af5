"""What every route needs: the gateway, who is calling, and whether they are an operator.

The routes are module-level (``router = APIRouter(...)`` in each module of this package) and get
what they need as FastAPI dependencies, all defined here:

* :data:`Context` — the :class:`ApiContext` :func:`~.app.build_api` keeps in the application's
  state (the gateway, the identity rules, the options of the routes);
* :data:`Agent` — the authenticated :class:`Caller` (any agent; ``401`` otherwise);
* :data:`Operator` — the same, when it is an operator (``403`` otherwise).

FastAPI resolves each once per request, however many routes and dependencies ask for it.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ...errors import ErrorCode
from ...gateway import Gateway
from ...pipeline.approval_policy import ApprovalPolicy
from ...telemetry.metrics import CallMetrics
from ..auth.identity import AuthenticationError, Connection, Principal
from .models import Problem
from .problems import ApiProblem, HttpErrorCode

__all__ = [
    "CONTEXT_STATE_KEY",
    "ERRORS",
    "Agent",
    "ApiContext",
    "Caller",
    "Context",
    "Operator",
    "api_context",
    "caller",
    "context_of",
    "operator",
    "reject_unknown_query",
]

#: Where :func:`~.app.build_api` keeps the :class:`ApiContext` in the application's state.
CONTEXT_STATE_KEY: Final = "api"

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
    metrics: CallMetrics | None = None
    """The call metrics served at ``/metrics`` (``None``: it answers ``404``)."""
    version: str = "0+unknown"
    """toolgate's version, as the index and the OpenAPI document give it."""
    index_links: Mapping[str, str] = field(default_factory=dict)
    """Links added to the index's own (where MCP and the web UI are served)."""


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


async def api_context(request: Request) -> ApiContext:
    """The :class:`ApiContext` of the application serving ``request``."""
    # Async, though it awaits nothing: FastAPI runs a plain function in its thread pool, which
    # costs more than the route itself.
    return context_of(request)


def context_of(request: Request) -> ApiContext:
    """The :class:`ApiContext` of the application serving ``request``, outside dependencies."""
    context: ApiContext = getattr(request.app.state, CONTEXT_STATE_KEY)
    return context


#: The API's context, as a route parameter.
Context = Annotated[ApiContext, Depends(api_context)]


async def caller(
    request: Request,
    _documented: Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)],
) -> Caller:
    """Any authenticated agent (else :class:`AuthenticationError`, a ``401``)."""
    # HTTPBearer only documents the scheme; the identity rules decide. The context is read
    # directly, not as a dependency: each one resolved costs every request of every route.
    context = context_of(request)
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


#: The calling agent, as a route parameter.
Agent = Annotated[Caller, Depends(caller)]


async def operator(who: Agent) -> Caller:
    """An authenticated agent with the operator role (others get ``403``)."""
    if not who.operator:
        raise ApiProblem(
            403,
            ErrorCode.FORBIDDEN,
            f"agent {who.agent!r} is not an operator: only agents labelled 'role: operator' "
            "in toolgate.yaml may use this endpoint",
        )
    return who


#: The calling operator, as a route parameter.
Operator = Annotated[Caller, Depends(operator)]


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
