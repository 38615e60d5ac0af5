"""``build_api``: the HTTP API — one FastAPI application behind the request limits and the
fast path of tool calls.

Routes (all JSON; errors are RFC 9457 problems, see :mod:`.problems`):

* agents — ``GET /v1/tools``, ``GET /v1/tools/search?q=``, ``GET /v1/tools/{id}``,
  ``POST /v1/tools/{id}/call``,
  ``GET /v1/export/{openai,openai-responses,anthropic,gemini,mcp}``, ``GET /v1/status``,
  ``GET /v1/me``; filtered by the calling agent;
* approvals — ``GET /v1/approvals``, ``GET /v1/approvals/{id}``,
  ``POST /v1/approvals/{id}/decision``, ``GET /v1/grants``, ``DELETE /v1/grants/{id}``;
* operators — ``GET /v1/audit``, ``GET /v1/alerts``, ``GET /v1/diagnostics``,
  ``GET /v1/connections``, ``POST|DELETE /v1/connections/{capability}``,
  ``GET /v1/mcp-servers``, ``GET /v1/mcp-servers/{server}``,
  ``POST /v1/mcp-servers/{server}/accept``, ``GET /metrics``
  (Prometheus);
* ``GET /v1`` (the index: how to authenticate and call, links, every operation),
  ``GET /healthz`` (no key needed for either) and ``GET /openapi.json``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from ..._rst import markdown_descriptions
from ...gateway import Gateway
from ...pipeline.approval_policy import ApprovalPolicy
from ...telemetry.metrics import CallMetrics
from ..auth.identity import AuthenticationError, Connection, Principal
from .approvals import router as approvals_router
from .audit import router as audit_router
from .calls import CALL_PREFIX, CALL_SUFFIX, FastCallMiddleware
from .connections import router as connections_router
from .deps import CONTEXT_STATE_KEY, ApiContext, reject_unknown_query
from .health import router as health_router
from .index import router as index_router
from .limits import CALL_MARGIN, ApiLimits, RequestLimitsMiddleware
from .mcp_servers import router as mcp_servers_router
from .metrics import router as metrics_router
from .problems import PROBLEM_JSON, ApiJSONResponse, install_problem_handlers
from .tools import router as tools_router

__all__ = ["HttpApi", "build_api"]


def _version() -> str:
    try:
        return version("toolgate")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0+unknown"


def _nobody(agent: str) -> bool:
    return False


def _call_budget(gateway: Gateway) -> Callable[[Scope], float | None]:
    """More time for the requests that run a tool — a call (an approved one runs on the
    agent's retry) — than for the others: the longest wait for a slot of the tool plus its run
    (twice its timeout) plus a margin, so that the tool's own limits always end it first.
    Deciding an approval runs nothing: the default budget."""

    def tool_time(tool_id: str) -> float | None:
        entry = gateway.registry.get(tool_id)
        # Twice the timeout: a call may wait as long for one of the tool's concurrency slots.
        return None if entry is None else 2 * entry.tool.timeout + CALL_MARGIN

    def budget(scope: Scope) -> float | None:
        path: str = scope.get("path", "")
        if scope.get("method") != "POST":
            return None
        if path.startswith(CALL_PREFIX) and path.endswith(CALL_SUFFIX):
            return tool_time(path[len(CALL_PREFIX) : -len(CALL_SUFFIX)])
        return None

    return budget


def _operation_id(route: APIRoute) -> str:
    return route.name


def _problems_only(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` with every error response documented as ``application/problem+json``
    only (FastAPI would also list ``application/json`` for a response model), and descriptions
    in Markdown (OpenAPI's format; the docstrings they come from are reST)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema: dict[str, Any] = markdown_descriptions(generate())
            problem = {"schema": {"$ref": "#/components/schemas/Problem"}}
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    default = operation.get("responses", {}).get("default")
                    if default is not None:
                        default["content"] = {PROBLEM_JSON: problem}
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


class HttpApi:
    """The HTTP API as an ASGI application.

    Every request is bounded first (:class:`~.limits.RequestLimitsMiddleware`); a well-formed
    tool call is then answered by :class:`~.calls.FastCallMiddleware` without entering the
    framework at all (FastAPI's routing, dependencies and middleware cost several times the
    gateway's whole pipeline); everything else goes to :attr:`fastapi`, which also answers the
    calls the fast path leaves to it, with the documented problems.
    """

    def __init__(
        self,
        fastapi: FastAPI,
        *,
        context: ApiContext,
        limits: ApiLimits,
        budget: Callable[[Scope], float | None],
    ) -> None:
        self.fastapi = fastapi
        """The routes, the OpenAPI document and the problem handlers."""
        self._app = RequestLimitsMiddleware(
            FastCallMiddleware(fastapi, context=context), limits=limits, budget=budget
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI document (also served at ``/openapi.json``)."""
        return self.fastapi.openapi()


def build_api(
    gateway: Gateway,
    *,
    authenticate: Callable[[Connection], str],
    is_operator: Callable[[str], bool] | None = None,
    approval_policy: ApprovalPolicy | None = None,
    limits: ApiLimits | None = None,
    approve_link: str | None = None,
    identify: Callable[[Connection], Awaitable[Principal]] | None = None,
    challenge: Callable[[AuthenticationError], str] | None = None,
    metrics: CallMetrics | None = None,
    index_links: Mapping[str, str] | None = None,
) -> HttpApi:
    """The HTTP API over ``gateway``.

    ``authenticate(request)`` names the calling agent or raises
    :class:`~toolgate.serve.auth.identity.AuthenticationError` (401); ``is_operator(agent)`` says
    who may use the operator routes (default: nobody). ``approval_policy`` (the operator's
    ``approval.rules``) makes ``requires_approval`` in the catalog exact. ``limits`` bound
    every request's body and duration. ``approve_link`` is the web UI's page deciding a request
    (with ``{id}``), given to agents whose call waits for approval. ``identify`` (async) names
    the caller when bearer tokens are accepted too (then it is used instead of
    ``authenticate``), and ``challenge`` writes the ``WWW-Authenticate`` value of a 401.
    ``metrics`` (an observer of the gateway's calls) is served to operators at ``/metrics``.
    ``index_links`` are added to the links of the index (``GET /v1``): where MCP and the web UI
    are served beside the API.

    The gateway is neither started nor closed here (see :func:`toolgate.serve.app.build_app`).
    """
    limits = limits or ApiLimits()
    app = FastAPI(
        title="toolgate",
        version=_version(),
        summary="One gateway for every tool an AI agent calls.",
        description="Tools, calls, approvals, grants, audit, health and connections of a "
        "toolgate gateway. Send `Authorization: Bearer <key>` (an API key, or an OAuth access "
        "token when the server is configured for one; see `/v1/me`). Every error is an "
        "RFC 9457 problem (application/problem+json) with a stable 'code'.",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        default_response_class=ApiJSONResponse,
        generate_unique_id_function=_operation_id,
        # No OpenTelemetry instrumentation: toolgate's own audit log records every call, and the
        # per-request check whether a tracer is configured costs more than a tool call.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        dependencies=[Depends(reject_unknown_query)],
    )
    install_problem_handlers(app, challenge=challenge)
    context = ApiContext(
        gateway=gateway,
        authenticate=authenticate,
        is_operator=is_operator or _nobody,
        approval_policy=approval_policy,
        approve_link=approve_link,
        identify=identify,
        challenge=challenge,
        metrics=metrics,
        version=app.version,
        index_links=dict(index_links or {}),
    )
    # What the routes' dependencies read (deps.api_context).
    setattr(app.state, CONTEXT_STATE_KEY, context)
    app.include_router(index_router, tags=["server"])
    app.include_router(tools_router, tags=["tools"])
    app.include_router(approvals_router, tags=["approvals"])
    app.include_router(audit_router, tags=["operators"])
    app.include_router(connections_router, tags=["connections"])
    app.include_router(mcp_servers_router, tags=["mcp-servers"])
    app.include_router(metrics_router, tags=["operators"])
    app.include_router(health_router, tags=["server"])
    app.openapi = _problems_only(app)  # type: ignore[method-assign]
    return HttpApi(app, context=context, limits=limits, budget=_call_budget(gateway))
