"""Routes for operators: review and accept the tools of upstream MCP servers.

An upstream server may change a tool after it was accepted, add one, or describe one with hidden
text; such a tool is held (unavailable) until an operator accepts it (see
:mod:`toolgate.formats.mcp_server.pinning`). Accepting pins the definition the server lists now and
releases the tool at once, on every replica sharing the state.

* ``GET /v1/mcp-servers`` — every declared server, with its held and flagged tools;
* ``GET /v1/mcp-servers/{server}`` — each of its tools: accepted or held, why, what changed,
  what hides in its texts, and the definition as listed;
* ``POST /v1/mcp-servers/{server}/accept`` — accept ``tools`` (names on the server; none: the
  tools ``hashes`` names) at the ``hashes`` the operator reviewed. ``hashes`` is required and
  must name every tool accepted (400 otherwise): what is pinned is what the operator saw, never
  whatever the server happens to list at that moment.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from ...errors import ErrorCode
from ...formats.mcp_server.source import AcceptError
from .deps import ERRORS, Context, Operator
from .problems import ApiJSONResponse, ApiProblem, HttpErrorCode

__all__ = ["AcceptRequest", "router"]


class AcceptRequest(BaseModel):
    """The body of ``POST /v1/mcp-servers/{server}/accept``."""

    model_config = ConfigDict(extra="forbid")

    tools: list[str] = Field(
        default_factory=list,
        description="Tool names on the server to accept (default: the tools 'hashes' names).",
        max_length=1000,
    )
    hashes: dict[str, str] = Field(
        default_factory=dict,
        description="Required: tool name → the definition hash the operator reviewed "
        "(GET /v1/mcp-servers/{server}), for every tool accepted; a tool whose definition "
        "changed since is refused (409).",
    )


router = APIRouter(prefix="/v1", responses=ERRORS)
"""The MCP server review routes (operators only)."""


@router.get("/mcp-servers", summary="Upstream MCP servers")
def list_servers(who: Operator, context: Context) -> Response:
    """Every declared MCP server: connected or not, its pin mode, and which of its tools are
    held or flagged (operators only)."""
    rows: list[dict[str, Any]] = []
    for name, (_source, servers) in sorted(context.gateway.mcp_servers().items()):
        rows.append(servers.summary(name))
    return ApiJSONResponse({"servers": rows})


@router.get("/mcp-servers/{server}", summary="An upstream MCP server's tools")
def show_server(server: str, who: Operator, context: Context) -> Response:
    """Each tool the server lists now: accepted or held and why, what changed since it was
    accepted, what hides in its texts, and its definition as listed (operators only)."""
    try:
        reviews = context.gateway.review_mcp_server(server)
    except AcceptError as exc:
        raise ApiProblem(404, HttpErrorCode.NOT_FOUND, str(exc)) from None
    return ApiJSONResponse(
        {"server": server, "tools": [review.to_dict() for review in reviews.values()]}
    )


@router.post("/mcp-servers/{server}/accept", summary="Accept an MCP server's tools")
async def accept_tools(
    server: str, body: AcceptRequest, who: Operator, context: Context
) -> Response:
    """Accept the definitions the server lists now for the named tools, each at the hash
    the operator reviewed (``hashes``, required); they are served from now on, until the
    server changes them (operators only)."""
    gateway = context.gateway
    # On the event loop, where every other reload of the registry happens.
    if server not in gateway.mcp_servers():
        known = ", ".join(sorted(gateway.mcp_servers())) or "none"
        raise ApiProblem(
            404,
            HttpErrorCode.NOT_FOUND,
            f"no MCP server {server!r} is declared (declared: {known})",
        )
    # Checked here, after the operator check and the server's: an agent learns nothing.
    tools = body.tools or list(body.hashes)
    unhashed = [tool for tool in tools if tool not in body.hashes]
    if not tools or unhashed:
        missing = ", ".join(repr(tool) for tool in unhashed) or "every tool to accept"
        raise ApiProblem(
            400,
            HttpErrorCode.INVALID_REQUEST,
            f"the field 'hashes' must give the definition hash you reviewed (GET "
            f"/v1/mcp-servers/{server}) for {missing}; nothing was accepted",
        )
    try:
        accepted = gateway.accept_mcp_tools(server, tools, by=who.agent, expected=body.hashes)
    except AcceptError as exc:
        raise ApiProblem(409, ErrorCode.UNAVAILABLE, str(exc)) from None
    return ApiJSONResponse(
        {"server": server, "accepted": [review.to_dict() for review in accepted]}
    )
