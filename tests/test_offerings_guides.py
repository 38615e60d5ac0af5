"""toolgate's own prompts: a capability's guide served as ``<namespace>__guide``, through the
official MCP client connected in process to the real MCP surface; a caller that may not see the
capability's tools sees no guide."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from toolgate import Gateway
from toolgate.model.policy import AccessPolicy, PolicyAction, PolicyRule
from toolgate.secrets import MemorySecretStore
from toolgate.serve.mcp.server import build_mcp_server

GITHUB = Path(__file__).parent / "fixtures" / "capabilities" / "github" / "manifest.json"
GUIDE = "Use GitHub tools for issues and repositories."


async def test_a_capability_guide_is_a_prompt_of_its_namespace() -> None:
    deny = AccessPolicy(
        name="no-github",
        agents=("intern",),
        rules=(PolicyRule(when={"tool.namespace": ("github",)}, action=PolicyAction.DENY),),
    )
    with Gateway(secret_store=MemorySecretStore({("github", "token"): "t"})) as gateway:
        gateway.add_source(GITHUB)
        gateway.access.policies = (deny,)
        async with Client(build_mcp_server(gateway, agent="assistant").server) as client:
            assert client.server_capabilities.prompts is not None
            listed = (await client.list_prompts()).prompts
            assert [p.name for p in listed] == ["github__guide"]
            got = await client.get_prompt("github__guide", {})
            assert [m.content.text for m in got.messages] == [GUIDE]  # type: ignore[union-attr]
            assert (await client.list_resources()).resources == []
        async with Client(build_mcp_server(gateway, agent="intern").server) as client:
            assert (await client.list_prompts()).prompts == []
            with pytest.raises(MCPError, match="no prompt named 'github__guide'"):
                await client.get_prompt("github__guide", {})
