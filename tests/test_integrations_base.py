"""``LocalGateway``: the in-process gateway as the framework adapters see it."""

from __future__ import annotations

from pathlib import Path

from integrations_support import approval_gateway
from toolgate import CallStatus
from toolgate.integrations import LocalGateway, ToolGateway


async def test_a_search_tools_call_widens_only_its_own_sessions_list(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        setup.gateway.enable_progressive_disclosure(core=["demo:lookup"])
        tools = setup.tools
        assert [t.id for t in await tools.list_tools(session_id="s1")] == [
            "demo:lookup",
            "toolgate:search_tools",
        ]
        found = await tools.call(
            "toolgate:search_tools", {"query": "send an email"}, session_id="s1"
        )
        assert found.status is CallStatus.OK
        listed = [t.id for t in await tools.list_tools(session_id="s1")]
        assert "demo:send_email" in listed
        # Another conversation, or another agent in the same session, is not widened.
        assert "demo:send_email" not in [t.id for t in await tools.list_tools(session_id="s2")]
        other = LocalGateway(setup.gateway, agent="someone-else")
        assert "demo:send_email" not in [t.id for t in await other.list_tools(session_id="s1")]


async def test_search_tools_widens_the_list_and_specs_keep_the_declared_schema(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        setup.gateway.enable_progressive_disclosure()
        tools: ToolGateway = setup.tools
        specs = await tools.search_tools("charge the card", session_id="s1")
        charge = next(spec for spec in specs if spec.id == "demo:charge")
        assert charge.name == "demo__charge"
        assert charge.side_effect == "financial"
        assert charge.parameters["properties"]["amount"]["type"] == "integer"
        assert charge.parameters["type"] == "object"
        assert "demo:charge" in [t.id for t in await tools.list_tools(session_id="s1")]
