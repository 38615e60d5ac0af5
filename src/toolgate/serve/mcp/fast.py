"""The fast path for the hottest MCP request: a 2026-07-28 ``tools/call`` POST.

At 2026-07-28 a ``tools/call`` is one self-contained POST: the request carries its protocol
version and client capabilities, and the answer is one JSON-RPC response. The SDK serves it
through its general machinery — a runner, a connection, a middleware chain, a task group and a
memory stream per request, the result re-validated through pydantic — which costs many times
the whole gateway pipeline (about 1 ms per call against 50 µs measured here). This module answers
exactly that request directly, with the SDK's own checks, and leaves everything else to the SDK:

* the same transport checks first: the SDK's ``TransportSecurityMiddleware`` (Content-Type, and
  Host/Origin against DNS rebinding), its ``Accept`` rule, its routing-header comparison
  (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``, none duplicated) and its per-version
  validation of the request params (``mcp_types.methods.validate_client_request``);
* only requests with nothing else to do: no ``requestState`` or ``inputResponses`` (an approval
  answer), no progress token or log level, a tool without ``x-mcp-header`` parameters;
* the same result: the handler's own :meth:`McpSurface.result` and the ``serverInfo`` stamp the
  SDK adds; errors as the SDK maps them to HTTP statuses;
* the same cancellation: a client that closes its POST while the tool runs (how a 2026-07-28
  client cancels) cuts the call off, as the SDK's handler does (:mod:`.caller_gone`).

Anything it does not answer — malformed, unusual or another method — goes to the SDK untouched
(the body it read is replayed). A call that turns out to need approval from a client that can be
asked (an ``input_required`` result, whose state the SDK seals) also goes to the SDK, carrying
the outcome already reached so the call is not made twice. ``tests/test_mcp_server_fast.py``
checks that both paths give the same answers.
"""

from __future__ import annotations

import json
import logging
from typing import Any, NamedTuple

from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    decode_header_value,
    find_duplicated_routing_header,
)
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)
from mcp_types import methods as mcp_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from ...model import ApprovalStatus, CallOutcome, CallStatus
from ..caller_gone import Gone, runs_to_its_end, unless_gone
from .server import PRECOMPUTED_OUTCOME_KEY, McpSurface

__all__ = ["FastToolCalls", "ReadBody", "read_body"]

logger = logging.getLogger(__name__)

_ENVELOPE_KEYS = frozenset(
    {PROTOCOL_VERSION_META_KEY, CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY}
)
_PARAM_KEYS = frozenset({"name", "arguments", "_meta"})
_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
_JSON_HEADERS = [(b"content-type", b"application/json")]


class FastToolCalls:
    """Answers plain 2026-07-28 ``tools/call`` POSTs; returns the request to the SDK otherwise."""

    def __init__(
        self,
        surface: McpSurface,
        *,
        security: TransportSecuritySettings | None,
        max_body: int,
    ) -> None:
        self.surface = surface
        self._security = TransportSecurityMiddleware(security)
        self._max_body = max_body
        self._stamp = surface.server.server_info_stamp
        self._header_tools: dict[str, tuple[int, bool]] = {}

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        agent: str | None,
        namespaces: frozenset[str] | None = None,
    ) -> Receive | None:
        """Answer the request (for ``agent``, whose credentials allow ``namespaces``), or return
        the ``receive`` to hand it on to the SDK with."""
        headers = scope["headers"]
        version = _header(headers, MCP_PROTOCOL_VERSION_HEADER.encode())
        if scope["method"] != "POST" or version not in MODERN_PROTOCOL_VERSIONS:
            return receive
        request = Request(scope, receive)
        if await self._security.validate_request(request, is_post=True) is not None:
            return receive
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse):
            return receive
        # Read past the body: what comes next is the client's disconnect, if it goes away.
        upstream = receive
        body, receive, _ = await read_body(receive, self._max_body)
        if body is None:
            return receive
        call = self._parse(body, request, version)
        if call is None:
            return receive
        request_id, name, arguments, can_elicit = call
        if (
            self._has_header_parameters(name, agent, namespaces)
            or self.surface.gateway.disclosure is not None
        ):
            # Progressive disclosure decides per session which tools may be called: the SDK path.
            return receive
        surface = self.surface
        gateway = surface.gateway
        try:
            # A client that goes away (the 2026-07-28 way to cancel a request is to close its
            # POST) cuts its call off, as the SDK's path and the HTTP API do.
            outcome = await unless_gone(
                gateway.call(name, arguments, agent=agent, namespaces=namespaces),
                upstream,
                lambda: runs_to_its_end(gateway, name),
            )
        except Exception:
            # The gateway never raises for a call; should it, answer as the SDK does.
            logger.exception("an MCP tools/call raised")
            await _send_json(send, 200, _internal_error(request_id))
            return None
        if isinstance(outcome, Gone):
            return None  # cut off (audited ``cancelled``) or kept going: nobody to answer
        if (
            outcome.status is CallStatus.PENDING_APPROVAL
            and can_elicit
            and surface.approvals.elicitation
            and outcome.approval is not None
            and outcome.approval.status is ApprovalStatus.PENDING
        ):
            # The form goes out as a sealed input_required result: the SDK's job. It answers
            # with this outcome instead of calling again.
            scope[PRECOMPUTED_OUTCOME_KEY] = (name, arguments, outcome)
            return receive
        await self._answer(send, request_id, outcome, agent, name, namespaces)
        return None

    def _parse(
        self, body: bytes, request: Request, version: str
    ) -> tuple[int | str, str, dict[str, Any], bool] | None:
        """The call in ``body`` when it is a plain ``tools/call`` this path answers."""
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not isinstance(message, dict) or not _REQUEST_KEYS.issuperset(message):
            return None
        request_id = message.get("id")
        params = message.get("params")
        if (
            message.get("jsonrpc") != "2.0"
            or message.get("method") != "tools/call"
            or isinstance(request_id, bool)
            or not isinstance(request_id, (int, str))
            or not isinstance(params, dict)
            or not _PARAM_KEYS.issuperset(params)
        ):
            return None
        name = params.get("name")
        arguments = params.get("arguments")
        meta = params.get("_meta")
        if (
            not isinstance(name, str)
            or not isinstance(arguments, (dict, type(None)))
            or not isinstance(meta, dict)
            or not _ENVELOPE_KEYS.issuperset(meta)
            or meta.get(PROTOCOL_VERSION_META_KEY) != version
            or not isinstance(meta.get(CLIENT_CAPABILITIES_META_KEY), dict)
        ):
            return None
        headers = request.headers
        if (
            headers.get(MCP_METHOD_HEADER) != "tools/call"
            or decode_header_value(headers.get(MCP_NAME_HEADER)) != name
            or find_duplicated_routing_header(headers.items()) is not None
        ):
            return None
        try:
            mcp_methods.validate_client_request("tools/call", version, params)
        except (ValidationError, KeyError, ValueError):
            return None
        elicitation = meta[CLIENT_CAPABILITIES_META_KEY].get("elicitation")
        can_elicit = isinstance(elicitation, dict) and (
            "form" in elicitation or "url" not in elicitation
        )
        return request_id, name, arguments or {}, can_elicit

    def _has_header_parameters(
        self, name: str, agent: str | None, namespaces: frozenset[str] | None
    ) -> bool:
        """Whether the tool mirrors arguments into ``Mcp-Param-*`` headers (the SDK checks
        those). A tool hidden from the caller has none, as for the SDK's check
        (``McpSurface._input_schema``): it is answered here, as a missing tool is."""
        if not self.surface.callable_by(name, agent, namespaces):
            return False
        registry = self.surface.gateway.registry
        cached = self._header_tools.get(name)
        if cached is not None and cached[0] == registry.version:
            return cached[1]
        entry = registry.get(name)
        found = entry is not None and "x-mcp-header" in _JSON.encode(entry.tool.input_schema_dict())
        if len(self._header_tools) > 4096:
            self._header_tools.clear()
        self._header_tools[name] = (registry.version, found)
        return found

    async def _answer(
        self,
        send: Send,
        request_id: int | str,
        outcome: CallOutcome,
        agent: str | None,
        name: str,
        namespaces: frozenset[str] | None = None,
    ) -> None:
        status = 200
        try:
            result = self.surface.result(outcome, agent, name, namespaces)
        except MCPError as exc:  # an unknown tool
            reply: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": request_id,
                "error": exc.error.model_dump(mode="json", exclude_none=True),
            }
            status = ERROR_CODE_HTTP_STATUS.get(exc.code, 200)
        else:
            meta = result.get("_meta")
            result["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: self._stamp}
            reply = {"jsonrpc": "2.0", "id": request_id, "result": result}
        await _send_json(send, status, reply)


async def _send_json(send: Send, status: int, reply: dict[str, Any]) -> None:
    body = _JSON.encode(reply).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _internal_error(request_id: int | str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "error": {"code": INTERNAL_ERROR, "message": "Internal server error"},
    }


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


class ReadBody(NamedTuple):
    """A request body read whole (:func:`read_body`)."""

    body: bytes | None
    """The body; ``None`` when it is over the limit or the client went away."""
    receive: Receive
    """Replays what was read to whoever handles the request next."""
    over_limit: bool = False
    """Whether more than the limit arrived (then reading stopped there)."""


async def read_body(receive: Receive, limit: int) -> ReadBody:
    """The whole body (``None`` when over ``limit`` or cut short), and a ``receive`` that
    replays what was read to whoever handles the request next."""
    chunks: list[Message] = []
    size = 0
    body: bytes | None = b""
    over_limit = False
    while True:
        message = await receive()
        chunks.append(message)
        if message["type"] != "http.request":
            body = None
            break
        size += len(message.get("body", b""))
        if size > limit:
            body, over_limit = None, True
            break
        if not message.get("more_body", False):
            body = b"".join(m.get("body", b"") for m in chunks)
            break

    async def replay() -> Message:
        if chunks:
            return chunks.pop(0)
        return await receive()

    return ReadBody(body, replay, over_limit)
