"""A large catalog a page at a time: MCP ``tools/list`` cursors (the official ``mcp`` client,
over streamable HTTP and in memory), ``GET /v1/tools`` and ``GET /v1/status`` with ``limit`` and
``cursor``, and the web UI's catalog pages.

The gateways hold 25 tools in namespace ``p`` (``p:tool_00`` … ``p:tool_24``) plus
``p:zz_bobs``, which only bob may call; pages are made small so that 25 tools take three.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from http_api_support import LOCAL, auth, make_app, problem
from test_mcp_server_helpers import McpHttpServer, bearer
from toolgate import AuditSettings, Gateway, GatewaySettings, tool
from toolgate.health import ToolStatus
from toolgate.serve.mcp.server import build_mcp_server
from toolgate.serve.web import build_ui
from web_support import serve

pytestmark = pytest.mark.slow

TOOL_COUNT = 25


def _numbered(index: int) -> Any:
    def handler(text: str) -> str:
        return f"{index}:{text}"

    handler.__name__ = f"tool_{index:02d}"
    handler.__doc__ = f"Tool number {index}."
    return tool(handler, namespace="p", effect="read_only")


@tool(namespace="p", effect="read_only", allowed_agents=["bob"])
def zz_bobs() -> str:
    """Only bob may call this."""
    return "bob's"


class CountingGateway(Gateway):
    """Counts the health figures computed, to show a page computes only its own."""

    computed: list[str]

    def status(self, tool_id: str) -> ToolStatus:
        self.computed.append(tool_id)
        return super().status(tool_id)


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[CountingGateway]:
    gateway = CountingGateway(GatewaySettings(audit=AuditSettings(path=tmp_path / "audit.db")))
    gateway.computed = []
    gateway.add([_numbered(index) for index in range(TOOL_COUNT)], zz_bobs)
    try:
        yield gateway
    finally:
        gateway.close()


def _names(prefix: str = "p__tool_") -> list[str]:
    return [f"{prefix}{index:02d}" for index in range(TOOL_COUNT)]


def _cursor(data: Any) -> str:
    """A cursor as a client could forge one: base64url of any JSON."""
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


async def _walk(mcp: Client) -> tuple[list[str], int]:
    """Every tool name, following ``nextCursor`` to the end, and how many pages it took."""
    names: list[str] = []
    cursor = None
    pages = 0
    while True:
        result = await mcp.list_tools(cursor=cursor)
        pages += 1
        names += [entry.name for entry in result.tools]
        cursor = result.next_cursor
        if cursor is None:
            return names, pages


# -- MCP tools/list ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_mcp_client_follows_next_cursor_to_the_end(gateway: Gateway, mode: str) -> None:
    with McpHttpServer(gateway, page_size=10) as server:
        for key, extra in (("alice-key", []), ("bob-key", ["p__zz_bobs"])):
            client = streamable_http_client(server.url, http_client=bearer(key))
            async with Client(client, mode=mode) as mcp:
                first = await mcp.list_tools()
                names, pages = await _walk(mcp)
            assert len(first.tools) == 10 and first.next_cursor is not None
            assert names == _names() + extra  # sorted by id, each once, hidden tools left out
            assert pages == 3


async def test_a_catalog_within_the_page_size_is_one_page_without_a_cursor(
    gateway: Gateway,
) -> None:
    async with Client(build_mcp_server(gateway, agent="alice").server) as mcp:
        result = await mcp.list_tools()
    assert [entry.name for entry in result.tools] == _names()
    assert result.next_cursor is None


def _deep_cursor() -> str:
    """base64url of ``[[[[…`` 1,500 deep: within the length cap, past the JSON parser's stack."""
    return base64.urlsafe_b64encode(b"[" * 1500).decode("ascii").rstrip("=")


@pytest.mark.parametrize(
    ("cursor", "says"),
    [
        ("not a cursor!", "not a cursor this gateway issued"),
        (_cursor(["p:tool_03"]), "not a cursor this gateway issued"),
        (_cursor({"k": "mcp-tools", "a": 3}), "not a cursor this gateway issued"),
        (_cursor({"k": "api-tools", "a": "p:tool_03"}), "a cursor of another list"),
        ("A" * 5000, "too long"),
        (_deep_cursor(), "not a cursor this gateway issued"),
    ],
)
async def test_a_bad_cursor_is_invalid_params_naming_it(
    gateway: Gateway, cursor: str, says: str
) -> None:
    async with Client(build_mcp_server(gateway, agent="alice", page_size=10).server) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.list_tools(cursor=cursor)
        # The session goes on: the first page still answers.
        assert len((await mcp.list_tools()).tools) == 10
    assert refused.value.error.code == INVALID_PARAMS
    assert refused.value.error.message.startswith("Invalid cursor: ")
    assert says in refused.value.error.message
    assert "list again without it" in refused.value.error.message


async def test_a_cursor_continues_after_its_tool_when_the_catalog_changed(
    gateway: Gateway,
) -> None:
    async with Client(build_mcp_server(gateway, agent="alice", page_size=10).server) as mcp:
        first = await mcp.list_tools()
        gateway.remove("p:tool_09")  # the last tool of the first page
        gateway.remove("p:tool_12")
        gateway.add(_numbered(30))
        second = await mcp.list_tools(cursor=first.next_cursor)
    names = [entry.name for entry in second.tools]
    assert names[:3] == ["p__tool_10", "p__tool_11", "p__tool_13"]
    assert len(names) == 10 and second.next_cursor is not None


# -- GET /v1/tools and GET /v1/status ------------------------------------------------------------


@pytest.fixture
def api(gateway: CountingGateway) -> Iterator[TestClient]:
    with TestClient(make_app(gateway, manage_gateway=False), client=LOCAL) as client:
        yield client


def test_api_tools_pages_follow_next_cursor(api: TestClient, gateway: CountingGateway) -> None:
    ids: list[str] = []
    cursor = None
    pages = []
    while True:
        params: dict[str, Any] = {"limit": 10} | ({} if cursor is None else {"cursor": cursor})
        gateway.computed.clear()
        response = api.get("/v1/tools", params=params, headers=auth("alice"))
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(len(body["tools"]))
        ids += [row["id"] for row in body["tools"]]
        # Health is computed for the tools of the page only.
        assert sorted(gateway.computed) == [row["id"] for row in body["tools"]]
        assert body["total"] == TOOL_COUNT
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == [10, 10, 5]
    assert ids == [f"p:tool_{index:02d}" for index in range(TOOL_COUNT)]


def test_api_tools_default_page_holds_a_small_catalog(api: TestClient) -> None:
    body = api.get("/v1/tools", headers=auth("bob")).json()
    assert len(body["tools"]) == TOOL_COUNT + 1 and body["total"] == TOOL_COUNT + 1
    assert body["next_cursor"] is None


@pytest.mark.parametrize(
    ("params", "field", "says"),
    [
        ({"limit": 0}, "limit", "limit: between 1 and 1000 entries per page, got 0"),
        ({"limit": 1001}, "limit", "limit: between 1 and 1000 entries per page, got 1001"),
        ({"cursor": "%%%"}, "cursor", "cursor: not a cursor this gateway issued"),
        ({"cursor": _cursor({"k": "mcp-tools", "a": "p:x"})}, "cursor", "another list"),
        # JSON nested past the parser's stack once answered 500 "a bug".
        ({"cursor": _deep_cursor()}, "cursor", "not a cursor this gateway issued"),
    ],
)
def test_api_bad_limit_or_cursor_is_a_422_naming_it(
    api: TestClient, params: dict[str, Any], field: str, says: str
) -> None:
    for path in ("/v1/tools", "/v1/status"):
        body = problem(api.get(path, params=params, headers=auth("alice")), 422, "invalid_request")
        assert says in body["detail"]
        assert body["field"] == field


def test_api_limit_that_is_not_a_number_is_a_422(api: TestClient) -> None:
    response = api.get("/v1/tools", params={"limit": "many"}, headers=auth("alice"))
    assert response.status_code == 422
    assert "limit" in response.text


def test_api_status_pages_and_refuses_a_cursor_of_the_tool_list(
    api: TestClient, gateway: CountingGateway
) -> None:
    first = api.get("/v1/tools", params={"limit": 10}, headers=auth("alice")).json()
    foreign = api.get("/v1/status", params={"cursor": first["next_cursor"]}, headers=auth("alice"))
    assert "a cursor of another list" in problem(foreign, 422, "invalid_request")["detail"]
    gateway.computed.clear()
    page = api.get("/v1/status", params={"limit": 20}, headers=auth("ops")).json()
    assert len(page["tools"]) == 20 and page["total"] == TOOL_COUNT + 1
    assert len(gateway.computed) == 20
    rest = api.get(
        "/v1/status", params={"limit": 20, "cursor": page["next_cursor"]}, headers=auth("ops")
    ).json()
    assert [row["tool"] for row in rest["tools"]][-1] == "p:zz_bobs"
    assert rest["next_cursor"] is None and len(rest["tools"]) == 6


# -- the web UI's catalog ------------------------------------------------------------------------


def _tiles(html: str) -> list[str]:
    return re.findall(r'<article class="tile[^"]*" data-tool="([^"]+)"', html)


def test_web_catalog_shows_a_page_with_links_and_the_total(gateway: CountingGateway) -> None:
    with (
        serve(build_ui(gateway, catalog_page_size=10)) as served,
        httpx2.Client(base_url=served.url, timeout=30) as http,
    ):
        gateway.computed.clear()
        first = http.get("/").text
        assert len(gateway.computed) == 10  # health for the tiles shown only
        last = http.get("/", params={"page": 3}).text
        beyond = http.get("/", params={"page": 99}).text
        garbled = http.get("/", params={"page": "two"}).text
        found = http.get("/", params={"q": "tool number"}).text
    assert _tiles(first) == [f"p:tool_{index:02d}" for index in range(10)]
    assert "26 tools · 1–10 on page 1 of 3" in first
    assert 'href="/?page=2" rel="next"' in first and 'rel="prev"' not in first
    assert "10 of 26 tools here" in first  # the namespace's tools beyond this page
    assert _tiles(last)[-1] == "p:zz_bobs" and len(_tiles(last)) == 6
    assert 'href="/?page=2" rel="prev"' in last and 'rel="next"' not in last
    assert _tiles(beyond) == _tiles(last)  # kept within the pages there are
    assert "page: not a page number" in garbled and _tiles(garbled) == _tiles(first)
    assert 'rel="next"' not in found and len(_tiles(found)) > 10  # search results: one list


def test_web_catalog_within_a_page_has_no_pager(gateway: CountingGateway) -> None:
    with serve(build_ui(gateway)) as served:
        html = httpx2.get(served.url + "/", timeout=30).text
    assert len(_tiles(html)) == TOOL_COUNT + 1
    assert 'class="pager"' not in html and "26 tools" in html
