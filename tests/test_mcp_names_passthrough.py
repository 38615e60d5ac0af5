"""Through ``toolgate serve``'s ``/mcp``, the reference MCP server's ``tools/list`` is what the
server itself lists, field by field, but for the ``everything__`` namespace prefix.

Real parts: ``mcp-server-everything stdio`` (npm ``@modelcontextprotocol/server-everything``) as
the upstream, ``toolgate serve`` as a user runs it, and the official MCP Python client both
directly against the upstream and through toolgate.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from test_serve_command import serve_env, serving  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


def _everything() -> str:
    path = shutil.which("mcp-server-everything")
    if path is None:
        pytest.fail(
            "mcp-server-everything is not on PATH: "
            "npm install -g @modelcontextprotocol/server-everything"
        )
    return path


def _listed(tools: Any) -> dict[str, dict[str, Any]]:
    return {
        tool.name: tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools
    }


async def test_tools_list_through_toolgate_equals_the_upstreams_but_for_the_prefix(
    project: Path,
    serve_env: dict[str, str],  # noqa: F811
) -> None:
    everything = _everything()
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        "  name: everything\n"
        "spec:\n"
        f"  command: {json.dumps(everything)}\n"
        "  args: [stdio]\n"
        # get-sum says it is read-only and closed-world: trusted, it needs no approval here.
        "  trustAnnotations: true\n"
    )
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )
    async with Client(
        stdio_client(StdioServerParameters(command=everything, args=["stdio"]))
    ) as direct:
        upstream = _listed((await direct.list_tools()).tools)
        version = direct.protocol_version
    assert len(upstream) >= 13 and "get-sum" in upstream
    # What the issue found dropped or invented, now present as the upstream says it:
    assert any("execution" in tool for tool in upstream.values())
    assert any(
        tool.get("execution", {}).get("taskSupport") == "required" for tool in upstream.values()
    )

    with serving(cwd=project, env=serve_env) as served:
        # The upstream speaks 2025-11-25 (the initialize handshake); the client is asked for the
        # same version through toolgate, since 2026-07-28 has no ``execution`` in tools/list.
        async with Client(streamable_http_client(f"{served.url}/mcp"), mode="legacy") as through:
            assert through.protocol_version == version
            result = await through.list_tools()
            listed = list(result.tools)
            cursor = result.next_cursor
            while cursor:
                result = await through.list_tools(cursor=cursor)
                listed.extend(result.tools)
                cursor = result.next_cursor
            gateway = _listed(listed)
            total = await through.call_tool("everything__get-sum", {"a": 2, "b": 3})
            old_spelling = await through.call_tool("everything__get-2dsum", {"a": 2, "b": 3})
        served.stop()

    prefixed = {name for name in gateway if name.startswith("everything__")}
    assert prefixed == {f"everything__{name}" for name in upstream}  # names kept as written
    for name, direct_entry in upstream.items():
        entry = dict(gateway[f"everything__{name}"])
        assert entry.pop("name") == f"everything__{name}"
        # Nothing differs but the name: ``execution`` (taskSupport) is the upstream's too. No
        # level is declared for the server, so even the behaviour hints are the upstream's
        # (``trustAnnotations`` changes toolgate's decisions, never what it shows).
        expected = {key: value for key, value in direct_entry.items() if key != "name"}
        assert entry == expected, name
    # The name resolves, and so does the spelling before names kept "-".
    assert not total.is_error and not old_spelling.is_error
    assert total.content[0].text == old_spelling.content[0].text  # type: ignore[union-attr]
