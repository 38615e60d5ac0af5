"""Rich MCP content passes through toolgate as the same typed blocks (issue 27).

A real ``toolgate serve`` aggregates the real ``mcp-server-everything`` (stdio); the official MCP
Python client calls its tools through toolgate's ``/mcp`` and, for comparison, directly on a
second instance of the same server. The blocks must be equal field by field: an image keeps its
data and ``mimeType``, resource links and embedded resources stay what they are, annotations
come through. The HTTP API returns the same blocks in ``blocks``, and the audit log keeps a
summary (type, mime type, size) rather than the base64. ``toolgate mcp`` (stdio) passes the same
blocks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from base64 import b64decode
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from serve_support import TOOLGATE, serving
from toolgate.model import names as tool_names

pytestmark = pytest.mark.slow

#: The calls compared, with their arguments.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get-tiny-image", {}),
    ("get-resource-links", {"count": 3}),
    ("get-resource-reference", {}),
    ("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}),
    ("get-annotated-message", {"messageType": "error", "includeImage": True}),
    ("get-annotated-message", {"messageType": "debug"}),
]

#: The name toolgate lists a tool by over MCP: ``to_mcp_name`` where the per-surface names exist
#: (issue 27, another branch), else the one provider-safe name.
MCP_NAME = getattr(tool_names, "to_mcp_name", tool_names.to_provider_name)

#: get-resource-reference says when the server made its resource: two servers, two times.
_CLOCK = re.compile(r"\d{1,2}:\d{2}:\d{2}\s?[AP]M")


@pytest.fixture(scope="module")
def everything() -> str:
    path = shutil.which("mcp-server-everything")
    if path is None:
        pytest.fail(
            "mcp-server-everything is not on PATH: "
            "npm install -g @modelcontextprotocol/server-everything"
        )
    return path


def _project(folder: Path, everything: str) -> dict[str, str]:
    (folder / "mcp.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        "  name: everything\n"
        "spec:\n"
        f"  command: {json.dumps(everything)}\n"
        '  args: ["stdio"]\n'
        "  sideEffects:\n"
        "    level: read_only\n"
    )
    (folder / "toolgate.yaml").write_text("sources:\n  - path: ./mcp.yaml\n")
    return {**os.environ, "TOOLGATE_HOME": str(folder / "home")}


def _blocks(result: Any) -> list[dict[str, Any]]:
    """The ``content`` of a ``CallToolResult`` as JSON, the resource's clock time masked (in a
    blob too: its decoded text, masked, is compared)."""
    blocks = result.model_dump(mode="json", by_alias=True, exclude_none=True)["content"]
    for block in blocks:
        resource = block.get("resource", {})
        if "blob" in resource:
            resource["blob"] = b64decode(resource["blob"]).decode()
    return json.loads(_CLOCK.sub("<time>", json.dumps(blocks)))


async def _direct(everything: str) -> list[list[dict[str, Any]]]:
    params = StdioServerParameters(command=everything, args=["stdio"])
    async with Client(stdio_client(params)) as upstream:
        return [_blocks(await upstream.call_tool(name, args)) for name, args in CALLS]


async def _through(url: str) -> list[list[dict[str, Any]]]:
    async with Client(streamable_http_client(url + "/mcp")) as gateway:
        return await _calls(gateway)


async def _calls(gateway: Client) -> list[list[dict[str, Any]]]:
    """Every call of :data:`CALLS` through toolgate, by the name toolgate lists."""
    listed = {tool.name for tool in (await gateway.list_tools()).tools}
    names = [MCP_NAME(f"everything:{name}") for name, _ in CALLS]
    assert set(names) <= listed, sorted(listed)
    answers = []
    for name, (_, args) in zip(names, CALLS, strict=True):
        result = await gateway.call_tool(name, args)
        assert not result.is_error, result
        answers.append(_blocks(result))
    return answers


async def test_rich_blocks_come_through_as_the_upstream_sent_them(
    tmp_path: Path, everything: str
) -> None:
    direct = await _direct(everything)
    with serving(tmp_path, _project(tmp_path, everything)) as (url, _pid):
        through = await _through(url)
        with httpx.Client(base_url=url, timeout=60) as http:
            answer = http.post("/v1/tools/everything:get-tiny-image/call", json={"arguments": {}})
            assert answer.status_code == 200, answer.text
            body = answer.json()
            # The audit log is written behind the answer: on a loaded machine the record may
            # land a moment after it.
            deadline = time.monotonic() + 30
            while True:
                audit = http.get("/v1/audit", params={"tool": "everything:get-tiny-image"})
                assert audit.status_code == 200, audit.text
                records = audit.json()["records"]
                if records or time.monotonic() > deadline:
                    break
                time.sleep(0.1)

    # Field by field, every block: the same types, data, mime types, annotations and links.
    for (name, args), expected, got in zip(CALLS, direct, through, strict=True):
        assert got == expected, (name, args)

    image_call, links, text_resource, blob_resource, annotated, _debug = direct
    image = next(block for block in image_call if block["type"] == "image")
    assert image["mimeType"] == "image/png" and len(image["data"]) > 100
    assert [block["type"] for block in links] == ["text"] + ["resource_link"] * 3
    assert text_resource[1]["type"] == "resource" and "text" in text_resource[1]["resource"]
    assert blob_resource[1]["type"] == "resource" and "blob" in blob_resource[1]["resource"]
    assert annotated[0]["annotations"]["audience"] == ["user", "assistant"]
    assert any(block["type"] == "image" for block in annotated)

    # The HTTP API: the blocks in ``blocks``, a readable text in ``text`` and ``content``.
    assert body["status"] == "ok", body
    assert body["blocks"] == image_call
    assert image["data"] not in body["text"]
    assert "[image: image/png, " in body["text"] and body["content"] == body["text"]

    # The audit log: the call is there, its image as a size and type, never the base64.
    assert records, "the call was not audited"
    recorded = json.dumps(records)
    assert image["data"] not in recorded
    assert '"mimeType": "image/png"' in recorded and '"size": ' in recorded


async def test_rich_blocks_come_through_toolgate_mcp_over_stdio(
    tmp_path: Path, everything: str
) -> None:
    direct = await _direct(everything)
    env = _project(tmp_path, everything)
    params = StdioServerParameters(command=TOOLGATE, args=["mcp"], env=env, cwd=str(tmp_path))
    async with Client(stdio_client(params)) as gateway:
        through = await _calls(gateway)
    for (name, args), expected, got in zip(CALLS, direct, through, strict=True):
        assert got == expected, (name, args)
