"""The seed's TypeScript ``resolveTools`` example through the HTTP API, MCP and the web UI: its
tool is listed and called, and its alert reaches the operators' ``/v1/alerts`` and the web UI's
settings page."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gateway_support import gateway_with
from http_api_support import LOCAL, auth, make_app, make_identity
from js_support import FIXTURES, js_runtime
from test_mcp_server_helpers import McpHttpServer, bearer
from toolgate import Gateway
from toolgate.serve.web import build_ui
from web_support import serve

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]
SEARCH = "@pandorakit/search:search"


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with gateway_with(environ={"BRAVE_API_KEY": "b"}, audit_path=tmp_path / "a.db") as gateway:
        loaded = gateway.add_source(
            FIXTURES / "search", options={"config": {"searchBackend": "brave"}}
        )
        assert loaded.diagnostics == []
        yield gateway


def test_the_http_api_calls_the_typescript_tool_and_shows_its_alert(gateway: Gateway) -> None:
    with TestClient(make_app(gateway, make_identity()), client=LOCAL) as client:
        response = client.post(
            f"/v1/tools/{quote(SEARCH, safe='')}/call",
            json={"arguments": {"query": "toolgate"}},
            headers=auth("alice"),
        )
        assert response.status_code == 200, response.text
        assert response.json()["content"] == {"backend": "brave", "query": "toolgate"}
        alerts = client.get("/v1/alerts", headers=auth("ops")).json()["alerts"]
    assert [(a["source"], a["level"], a["message"]) for a in alerts] == [
        ("@pandorakit/search", "info", "Using brave")
    ]


async def test_mcp_lists_and_calls_the_typescript_tool(gateway: Gateway) -> None:
    with McpHttpServer(gateway) as server:
        async with Client(
            streamable_http_client(server.url, http_client=bearer("alice-key"))
        ) as mcp:
            listed = await mcp.list_tools()
            [name] = [tool.name for tool in listed.tools if "search" in tool.name]
            result: Any = await mcp.call_tool(name, {"query": "mcp"})
    assert not result.is_error, result
    # No output schema, so the result is its JSON text.
    [block] = result.content
    assert json.loads(block.text) == {"backend": "brave", "query": "mcp"}


def test_the_web_ui_shows_the_typescript_plugin_alert(gateway: Gateway) -> None:
    with serve(build_ui(gateway)) as served, httpx2.Client(base_url=served.url, timeout=30) as web:
        page = web.get("/settings", follow_redirects=True)
    assert page.status_code == 200
    assert "<code>@pandorakit/search</code>: Using brave" in page.text
