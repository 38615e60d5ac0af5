"""``mcp_tool`` for a tool of an upstream MCP server: what the server listed is passed on as
listed, nothing is invented, and the operator's declarations win where they say something.

Pure: the listing entries are what ``mcp-server-everything`` and other servers list.
"""

from __future__ import annotations

import copy
from typing import Any

from toolgate import Tool
from toolgate.exporters.mcp import EXAMPLES_META_KEY, mcp_tool
from toolgate.formats.mcp_server.spec import McpServerSpec
from toolgate.formats.mcp_server.tools import MAX_TITLE, merge_ref, tool_from_listing
from toolgate.model import (
    DisplaySpec,
    ImplementationKind,
    McpEntry,
    SideEffect,
    SourceFormat,
    ToolSource,
)
from toolgate.model.mcp_metadata import MAX_METADATA_CHARS

#: ``simulate-research-query`` as the reference server lists it (with a made-up icon and meta).
LISTED: dict[str, Any] = {
    "name": "simulate-research-query",
    "title": "Simulate Research Query",
    "description": "Simulates a deep research operation.",
    "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"topic": {"type": "string"}},
        "required": ["topic"],
    },
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
    "execution": {"taskSupport": "required"},
    "icons": [{"src": "https://example.com/icon.png", "mimeType": "image/png"}],
    "_meta": {"vendor.example/weight": 3},
}


def _spec(**fields: Any) -> McpServerSpec:
    return McpServerSpec(name="everything", namespace="everything", location="x.yaml", **fields)


def _tool(listed: dict[str, Any], **fields: Any) -> Tool:
    tool, problem = tool_from_listing(_spec(**fields), listed)
    assert tool is not None, problem
    return tool


def test_what_the_upstream_listed_is_passed_on_exactly() -> None:
    entry = mcp_tool(_tool(LISTED))
    expected = {**copy.deepcopy(LISTED), "name": "everything__simulate-research-query"}
    assert entry == expected


def test_nothing_is_invented_for_a_tool_that_says_little() -> None:
    bare = {"name": "get-sum", "description": "Sum", "inputSchema": {"type": "object"}}
    entry = mcp_tool(_tool(bare))
    # No title made of the name, no annotations, no execution, no _meta.
    assert entry == {
        "name": "everything__get-sum",
        "description": "Sum",
        "inputSchema": bare["inputSchema"],
    }


def test_a_title_only_in_annotations_stays_there() -> None:
    listed = {**LISTED, "annotations": {"title": "Research", "readOnlyHint": True}}
    del listed["title"]
    tool = _tool(listed)
    entry = mcp_tool(tool)
    assert "title" not in entry
    assert entry["annotations"] == {"title": "Research", "readOnlyHint": True}
    assert tool.display_title == "Research"  # still shown to people in toolgate's own pages


def test_the_operators_level_gives_the_hints_and_the_upstreams_stay_for_display_only() -> None:
    declared = _tool(LISTED, level=SideEffect.PRIVILEGED)
    hints = mcp_tool(declared)["annotations"]
    assert hints == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    # Without a declared level, the upstream's "read-only" is shown but decides nothing...
    untrusted = _tool(LISTED)
    assert mcp_tool(untrusted)["annotations"] == LISTED["annotations"]
    assert untrusted.side_effect is SideEffect.EXTERNAL_WRITE and untrusted.requires_approval
    # ... unless the operator trusts the server's annotations.
    assert _tool(LISTED, trust_annotations=True).side_effect is SideEffect.READ_ONLY


def test_a_tool_resource_wins_where_it_says_something() -> None:
    remote = _tool(LISTED)
    resource = Tool(
        id="research:deep",
        description="Our own words.",
        input_schema={"type": "object"},
        kind=ImplementationKind.MCP,
        entry=McpEntry(server="everything", remote_name="simulate-research-query"),
        title="Deep research",
        side_effect=SideEffect.READ_ONLY,
        display=DisplaySpec(examples=("research solar panels",)),
        source=ToolSource(SourceFormat.RESOURCE, "tools.yaml"),
    )
    entry = mcp_tool(merge_ref(resource, remote))
    assert entry["name"] == "research__deep"
    assert entry["title"] == "Deep research" and entry["description"] == "Our own words."
    assert entry["inputSchema"] == LISTED["inputSchema"]  # completed from the server
    # The hints are the resource's level's (it declares no hints of its own), not the server's.
    assert entry["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }
    assert entry["execution"] == LISTED["execution"] and entry["icons"] == LISTED["icons"]
    assert entry["_meta"] == {**LISTED["_meta"], EXAMPLES_META_KEY: ["research solar panels"]}


def test_oversized_or_malformed_fields_are_left_out_not_cut() -> None:
    listed = {
        **LISTED,
        "title": "t" * (MAX_TITLE + 1),
        "icons": [{"src": "data:image/png;base64," + "A" * MAX_METADATA_CHARS}],
        "execution": "required",
        "_meta": ["not", "an", "object"],
    }
    tool = _tool(listed)
    entry = mcp_tool(tool)
    for key in ("title", "icons", "execution", "_meta"):
        assert key not in entry, key
    assert entry["annotations"] == LISTED["annotations"]


def test_the_passed_on_fields_leave_the_definition_hash_alone() -> None:
    """They decide nothing, so approvals bound to the definition do not end when they change
    (the pinning review is what notices a changed listing)."""
    with_fields = _tool(LISTED)
    without = _tool({k: v for k, v in LISTED.items() if k not in ("execution", "icons", "_meta")})
    assert with_fields.definition_hash == without.definition_hash


def test_our_own_formats_have_no_invented_title() -> None:
    mine = Tool("demo:file.diff", "Diff two files.", {"type": "object"}, side_effect="read_only")
    entry = mcp_tool(mine)
    assert entry["name"] == "demo__file.diff" and "title" not in entry
    # The hints stay: they are our declaration, resolved from the level.
    assert entry["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": True,
    }
