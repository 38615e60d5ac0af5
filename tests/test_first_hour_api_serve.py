"""The first hour against the real ``toolgate serve``: the README's call works as written, the
index at ``/v1`` leads to the rest (MCP and the web UI included), and a 5 MB request — a call
over the HTTP API, a tool call over MCP with the official client — is answered with its size,
the limit and the setting that raises it."""

from __future__ import annotations

import shlex
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from doc_blocks import doc_block
from test_serve_command import serve_env, serving  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

#: Where the README's example is addressed (the default port).
README_BASE = "http://127.0.0.1:8470"
LIMIT = "this server's limit of 1,048,576 bytes (set by serve.max_body_bytes in toolgate.yaml)"


def _curl(command: str, base: str) -> httpx.Response:
    """Send what a ``curl -H … -d … URL`` command sends, to ``base`` instead of its host."""
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "curl", command
    headers: dict[str, str] = {}
    data: str | None = None
    url = None
    rest = iter(words[1:])
    for word in rest:
        if word == "-H":
            name, _, value = next(rest).partition(":")
            headers[name.strip()] = value.strip()
        elif word == "-d":
            data = next(rest)
        else:
            assert word.startswith("http"), f"an option the test does not know: {word}"
            url = word
    assert url is not None and data is not None, command
    path = "/" + url.split("://", 1)[1].split("/", 1)[1]
    return httpx.post(base + path, content=data.encode(), headers=headers, timeout=30)


async def test_the_readme_call_the_index_and_the_size_limit(
    project: Path,
    serve_env: dict[str, str],  # noqa: F811
) -> None:
    with serving(cwd=project, env=serve_env) as served:  # the demo tools, no keys
        readme = doc_block("http-api:call")
        assert README_BASE in readme
        answer = _curl(readme, served.url)
        assert answer.status_code == 200, answer.text
        outcome = answer.json()
        assert (outcome["status"], outcome["tool"], outcome["content"], outcome["text"]) == (
            "ok",
            "demo:add",
            42,
            "42",
        )

        with httpx.Client(base_url=served.url, timeout=30) as http:
            index = http.get("/v1").json()
            assert index["links"]["mcp"] == "/mcp" and index["links"]["ui"] == "/"
            assert http.get(index["links"]["ui"]).status_code == 200
            assert _curl(index["call"]["example"], served.url).json()["content"] == 42

            bare = http.post("/v1/tools/demo:add/call", json={"a": 2, "b": 40})
            assert bare.status_code == 422
            assert bare.json()["detail"].startswith(
                '"a" and "b" are arguments of demo:add, not fields of a call body: put them '
                'under "arguments"'
            )

            big = {"arguments": {"a": "x" * 5_000_000}}
            refused = http.post("/v1/tools/demo:add/call", json=big)
            assert refused.status_code == 413
            assert refused.json()["detail"].startswith("the request body is 5,000,0")
            assert refused.json()["detail"].endswith(f" bytes, over {LIMIT}")

        async with Client(streamable_http_client(f"{served.url}/mcp")) as mcp:
            with pytest.raises(MCPError) as too_big:
                await mcp.call_tool("demo__add", {"a": "x" * 5_000_000, "b": 1})
            message = too_big.value.message
            assert message.startswith("Request body too large: 5,000,")
            assert message.endswith(f" bytes, over {LIMIT}")
        assert served.stop()[0] == 0
