"""An upstream MCP server's resources, resource templates and prompts: listing, reading, getting.

:class:`~toolgate.backends.mcp_connection.Connection` lists these beside the tools when the
server's capabilities say it has them, and again when the server announces a change; the
gateway serves them under the server's namespace (:mod:`toolgate.offerings`).

The upstream is untrusted, as for its tools (:mod:`toolgate.formats.mcp_server.tools`): the walk
over pages is bounded (pages, entries), every entry is checked for its required field and
dropped when it lacks it, names, titles and descriptions are cut at fixed lengths, and an entry
is otherwise passed through as the server wrote it (``annotations``, ``icons``, ``_meta``,
``size``…) — the gateway adds nothing. Reads and gets are bounded like tool calls: the
request's own timeout, the connection's message-size limit (a larger answer fails with that
reason), a server that is down or drops the connection is a clear error naming it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ToolError
from .base import BackendUnavailableError, ToolTimeoutError

if TYPE_CHECKING:
    from mcp import Client

__all__ = [
    "MAX_DESCRIPTION",
    "MAX_ENTRIES",
    "MAX_NAME",
    "MAX_PAGES",
    "MAX_URI",
    "OfferingRefused",
    "Offerings",
    "list_offerings",
    "request",
]

log = logging.getLogger("toolgate.mcp")

#: Pages of one listing walk and entries kept of each kind (a paginator that never ends cannot
#: hang it; a server listing a million resources cannot fill the gateway's memory).
MAX_PAGES = 100
MAX_ENTRIES = 1_000
#: Characters of a prompt or resource name, of a URI or URI template, of a title and of a
#: description (cut, not refused: a long description is still useful).
MAX_NAME = 128
MAX_URI = 2_048
MAX_TITLE = 200
MAX_DESCRIPTION = 8_000
#: Arguments of one prompt.
MAX_PROMPT_ARGUMENTS = 64

#: What MCP allows in a prompt's name (letters, digits, ``_``, ``-``, ``.``; the gateway
#: namespaces it as it does tools, so a ``:`` or a space would not survive that).
_PROMPT_NAME = re.compile(r"^[A-Za-z0-9_.\-/]{1,128}$")


@dataclass(frozen=True)
class Offerings:
    """What one server offers besides tools, as JSON objects (its wire form, bounded)."""

    resources: tuple[Mapping[str, Any], ...] = ()
    templates: tuple[Mapping[str, Any], ...] = ()
    prompts: tuple[Mapping[str, Any], ...] = ()
    subscribe: bool = False
    """The server accepts ``resources/subscribe`` (its capabilities say so, on a
    handshake-era connection)."""
    listen_only: bool = False
    """The server offers subscriptions, but on a 2026-07-28 connection: its resource updates
    come on ``subscriptions/listen``, which toolgate does not follow for resources, so
    subscriptions to it are refused (``subscribe`` is false)."""


class OfferingRefused(ToolError):
    """The upstream server answered a read or get with an MCP error (``code`` is its code:
    ``-32002`` resource not found, ``-32602`` invalid params…) in ``mcp_code``."""

    def __init__(self, message: str, mcp_code: int) -> None:
        super().__init__(message)
        self.mcp_code = mcp_code


def _cut(value: Any, limit: int) -> str | None:
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[: limit - 1] + "…"


def _bounded(
    entry: Mapping[str, Any], key: str, limit: int, pattern: re.Pattern[str] | None
) -> dict[str, Any] | None:
    """``entry`` with its texts cut, or ``None`` when its required ``key`` is missing or bad."""
    value = entry.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        return None
    if pattern is not None and not pattern.match(value):
        return None
    kept = dict(entry)
    for text, most in (("name", MAX_NAME), ("title", MAX_TITLE), ("description", MAX_DESCRIPTION)):
        if text in kept and text != key:
            cut = _cut(kept[text], most)
            if cut is None:
                kept.pop(text)
            else:
                kept[text] = cut
    return kept


def _resource(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kept = _bounded(entry, "uri", MAX_URI, None)
    if kept is None or not isinstance(kept.get("name"), str):
        return None
    return kept


def _template(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kept = _bounded(entry, "uriTemplate", MAX_URI, None)
    if kept is None or not isinstance(kept.get("name"), str):
        return None
    return kept


def _prompt(entry: Mapping[str, Any]) -> Mapping[str, Any] | None:
    kept = _bounded(entry, "name", MAX_NAME, _PROMPT_NAME)
    if kept is None:
        return None
    arguments = kept.get("arguments")
    if arguments is not None:
        if not isinstance(arguments, list) or len(arguments) > MAX_PROMPT_ARGUMENTS:
            return None
        checked = [_bounded(a, "name", MAX_NAME, None) for a in arguments if isinstance(a, dict)]
        if len(checked) != len(arguments) or any(a is None for a in checked):
            return None
        kept["arguments"] = checked
    return kept


async def _walk(
    fetch: Callable[[str | None], Awaitable[Any]],
    field: str,
    check: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
) -> tuple[Mapping[str, Any], ...]:
    """Every page of one listing, bounded; a cursor seen before ends it (a server paging in a
    loop). A repeated key (URI, template, name) is kept once: the first listing wins.

    A server that answers one listing with an MCP error (many declare ``resources`` and answer
    ``resources/templates/list`` with ``-32601``) offers none of that kind: its tools and other
    lists still count. A lost connection or a timeout still fails the listing (and with it the
    connection's check)."""
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    try:
        return await _pages(fetch, field, check)
    except MCPError as exc:
        if exc.code in (CONNECTION_CLOSED, REQUEST_TIMEOUT):
            raise
        log.info("an MCP server answered its %s listing with an error: %s", field, exc.message)
        return ()


async def _pages(
    fetch: Callable[[str | None], Awaitable[Any]],
    field: str,
    check: Callable[[Mapping[str, Any]], Mapping[str, Any] | None],
) -> tuple[Mapping[str, Any], ...]:
    found: list[Mapping[str, Any]] = []
    keys: set[str] = set()
    cursor: str | None = None
    seen: set[str] = set()
    for _page in range(MAX_PAGES):
        page = await fetch(cursor)
        for item in getattr(page, field):
            entry = check(item.model_dump(mode="json", by_alias=True, exclude_none=True))
            if entry is None:
                continue
            key = str(entry.get("uri") or entry.get("uriTemplate") or entry.get("name"))
            if key not in keys:
                keys.add(key)
                found.append(entry)
        cursor = page.next_cursor
        if not cursor or cursor in seen or len(found) >= MAX_ENTRIES:
            break
        seen.add(cursor)
    return tuple(found[:MAX_ENTRIES])


async def list_offerings(client: Client) -> Offerings:
    """The server's resources, templates and prompts — each only when its capabilities declare
    it (a server without ``resources`` is never asked, so it cannot answer ``-32601``)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    capabilities = client.server_capabilities
    resources: tuple[Mapping[str, Any], ...] = ()
    templates: tuple[Mapping[str, Any], ...] = ()
    prompts: tuple[Mapping[str, Any], ...] = ()
    subscribe = listen_only = False
    if capabilities.resources is not None:
        subscribe = bool(capabilities.resources.subscribe)
        if subscribe and client.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # That protocol has no resources/subscribe: updates come on a listen stream.
            subscribe, listen_only = False, True
        resources = await _walk(
            lambda cursor: client.list_resources(cursor=cursor), "resources", _resource
        )
        templates = await _walk(
            lambda cursor: client.list_resource_templates(cursor=cursor),
            "resource_templates",
            _template,
        )
    if capabilities.prompts is not None:
        prompts = await _walk(lambda cursor: client.list_prompts(cursor=cursor), "prompts", _prompt)
    return Offerings(resources, templates, prompts, subscribe, listen_only)


async def request(
    server: str,
    what: str,
    send: Callable[[], Awaitable[Any]],
    lost: Callable[[str], None],
) -> dict[str, Any]:
    """Run one request (``send``) and return its result as JSON, its failures worded for
    toolgate: the connection closing (``lost`` is told, so the supervisor reconnects) is
    :class:`BackendUnavailableError`, a timeout :class:`ToolTimeoutError`, an MCP error from
    the server :class:`OfferingRefused` with the server's code."""
    import anyio
    from mcp import MCPError
    from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

    gone = (
        f"the connection to the MCP server {server} was lost during {what}; "
        "toolgate is reconnecting"
    )
    try:
        result = await send()
    except MCPError as exc:
        if exc.code == CONNECTION_CLOSED:
            lost("the connection closed")
            raise BackendUnavailableError(gone) from None
        if exc.code == REQUEST_TIMEOUT:
            raise ToolTimeoutError(
                f"the MCP server {server} did not answer {what} in time"
            ) from None
        raise OfferingRefused(
            f"The MCP server {server} refused {what}: {exc.message} (MCP error {exc.code})",
            exc.code,
        ) from None
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        lost(type(exc).__name__)
        raise BackendUnavailableError(gone) from None
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped
