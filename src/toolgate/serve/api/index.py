"""``GET /v1``: the API's front door.

What a newcomer who opens ``http://127.0.0.1:8470/v1`` needs to find the rest without the docs:
where the OpenAPI document is, how to authenticate, what a tool call's body looks like, links to
the main routes (and to MCP and the web UI when they are served beside the API), and every
operation with its summary, read from the OpenAPI document so the list is never out of date.
No key is needed: it says nothing about the tools or the callers.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from collections.abc import Mapping
from typing import Any, Final, Literal

from fastapi import APIRouter, FastAPI
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import Response

from .call_body import CALL_BODY
from .deps import ERRORS, Context
from .problems import ApiJSONResponse

__all__ = ["ApiIndex", "router"]

#: Where the OpenAPI document is served.
OPENAPI_PATH: Final = "/openapi.json"
#: The call route, as the index shows it.
CALL_PATH: Final = "/v1/tools/{tool_id}/call"

_AUTHENTICATION: Final = (
    "Send 'Authorization: Bearer <key>' (toolgate agents add NAME creates a key; with auth: "
    "configured, an OAuth access token works too). Without any keys configured, only this "
    "machine is answered, as the 'default' agent: send no Authorization header then. GET /v1/me "
    "says who the caller is."
)
_DOCS: Final = (
    "Every operation, with its parameters, bodies and answers, is in the OpenAPI document at "
    "/openapi.json (open it in any OpenAPI viewer). The guide is 'Serving over HTTP' "
    "(docs/guides/serving.md in toolgate's source); the docs site built from it (mkdocs) has "
    "the same reference under reference/http-api."
)
#: The main routes, by what a newcomer looks for.
_LINKS: Final = {
    "openapi": OPENAPI_PATH,
    "tools": "/v1/tools",
    "search": "/v1/tools/search?q={query}",
    "call": CALL_PATH,
    "me": "/v1/me",
    "status": "/v1/status",
    "approvals": "/v1/approvals",
    "health": "/healthz",
    "metrics": "/metrics",
}


class CallHelp(BaseModel):
    """How to call a tool."""

    method: Literal["POST"]
    path: str = Field(description="`tool_id` is `namespace:name` or the provider name.")
    content_type: Literal["application/json"] = Field(description="The header the body needs.")
    body: str = Field(description="The body's shape: the tool's arguments under `arguments`.")
    example: str = Field(
        description="A complete call with curl, of the bundled demo tool `demo:add` (add "
        "`-H 'Authorization: Bearer <key>'` when keys are configured)."
    )


class Operation(BaseModel):
    """One operation of the API."""

    method: str
    path: str
    summary: str
    tag: str = Field(description="Its group in the OpenAPI document.")


class ApiIndex(BaseModel):
    """The body of ``GET /v1``."""

    name: Literal["toolgate"]
    version: str
    authentication: str = Field(description="How to send a key.")
    docs: str = Field(description="Where the API is documented.")
    call: CallHelp
    links: dict[str, str] = Field(
        description="The main routes by name (`openapi`, `tools`, `approvals`, `health`…), and "
        "`mcp` and `ui` when MCP and the web UI are served beside the API."
    )
    operations: list[Operation] = Field(description="Every operation, by path.")


def _operations(document: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every operation of the OpenAPI ``document``, by path then method."""
    found = [
        {
            "method": method.upper(),
            "path": path,
            "summary": str(operation.get("summary") or operation.get("operationId", "")),
            "tag": str((operation.get("tags") or [""])[0]),
        }
        for path, operations in document.get("paths", {}).items()
        for method, operation in operations.items()
    ]
    return sorted(found, key=lambda row: (row["path"], row["method"]))


def _index(app: FastAPI, version: str, base: str, extra: Mapping[str, str]) -> dict[str, Any]:
    """The index, with the curl example addressed to ``base`` (the URL it was asked at)."""
    example = (
        "curl -H 'Content-Type: application/json' "
        f"""-d '{{"arguments": {{"a": 2, "b": 40}}}}' {base}/v1/tools/demo:add/call"""
    )
    return {
        "name": "toolgate",
        "version": version,
        "authentication": _AUTHENTICATION,
        "docs": _DOCS,
        "call": {
            "method": "POST",
            "path": CALL_PATH,
            "content_type": "application/json",
            "body": CALL_BODY,
            "example": example,
        },
        "links": {**_LINKS, **extra},
        "operations": _operations(app.openapi()),
    }


router = APIRouter(responses=ERRORS)
"""``GET /v1`` (and ``GET /v1/``, the same answer, left out of the OpenAPI document), with the
context's ``index_links`` added to the index's own (the MCP endpoint, the web UI)."""


@router.get("/v1", response_model=ApiIndex, summary="What this API offers")
def api_index(request: Request, context: Context) -> Response:
    """The API's front door (no key needed): how to authenticate, what a call's body looks
    like, where the OpenAPI document and the docs are, links to the main routes, and every
    operation with its summary."""
    app = request.app
    assert isinstance(app, FastAPI)
    base = str(request.base_url).rstrip("/")
    return ApiJSONResponse(_index(app, context.version, base, context.index_links))


router.add_api_route("/v1/", api_index, methods=["GET"], include_in_schema=False)
