"""The normalized model: ids, immutability, levels and their mapping, definition hashes."""

from __future__ import annotations

import dataclasses

import pytest

from toolgate import ApprovalSpec, SideEffect, Tool, ToolHints
from toolgate.model import (
    level_from_access,
    level_from_annotations,
    level_from_dangerous,
    requires_approval_by_default,
    split_tool_id,
)

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def make(**overrides: object) -> Tool:
    fields: dict[str, object] = {
        "id": "ns:search",
        "description": "Search.",
        "input_schema": SCHEMA,
    }
    fields.update(overrides)
    return Tool(**fields)  # type: ignore[arg-type]


def test_id_splits_at_the_last_colon_so_pandora_ids_work() -> None:
    assert split_tool_id("@pandorakit/weather:weather") == ("@pandorakit/weather", "weather")
    tool = make(id="@scope/x:y")
    assert (tool.namespace, tool.name) == ("@scope/x", "y")


@pytest.mark.parametrize("bad", ["noseparator", ":name", "ns:", "ns: x", "a b:c"])
def test_malformed_ids_are_rejected_with_the_id_in_the_message(bad: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        make(id=bad)


def test_input_schema_must_be_an_object_schema() -> None:
    with pytest.raises(ValueError, match="type 'object'"):
        make(input_schema={"type": "string"})


def test_tool_is_deeply_immutable_and_schema_copies_are_independent() -> None:
    source = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = make(input_schema=source)
    source["properties"]["q"]["type"] = "integer"  # the caller's dict is not shared
    assert tool.input_schema["properties"]["q"]["type"] == "string"
    with pytest.raises(dataclasses.FrozenInstanceError):
        tool.description = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        tool.input_schema["properties"]["x"] = {}  # type: ignore[index]
    copy = tool.input_schema_dict()
    copy["properties"]["x"] = {}
    assert "x" not in tool.input_schema["properties"]


def test_approval_defaults_follow_the_level_and_the_declaration_wins() -> None:
    assert requires_approval_by_default(SideEffect.READ_ONLY) is False
    assert requires_approval_by_default(SideEffect.LOCAL_WRITE) is False
    for level in (
        SideEffect.EXTERNAL_WRITE,
        SideEffect.FINANCIAL,
        SideEffect.COMMUNICATION,
        SideEffect.CODE_EXECUTION,
        SideEffect.PRIVILEGED,
    ):
        assert requires_approval_by_default(level) is True
        assert make(side_effect=level).requires_approval is True
        assert (
            make(side_effect=level, approval=ApprovalSpec(required=False)).requires_approval
            is False
        )
    assert make(side_effect="read_only", approval=ApprovalSpec(required=True)).requires_approval


def test_capability_access_mapping() -> None:
    assert level_from_access("read") is SideEffect.READ_ONLY
    assert level_from_access("write") is SideEffect.EXTERNAL_WRITE
    assert level_from_access("external") is SideEffect.EXTERNAL_WRITE
    with pytest.raises(ValueError, match="read, write"):
        level_from_access("delete")


def test_mcp_annotation_mapping() -> None:
    assert level_from_annotations(read_only=True) is SideEffect.READ_ONLY
    assert level_from_annotations(read_only=False, open_world=False) is SideEffect.LOCAL_WRITE
    assert level_from_annotations(read_only=False) is SideEffect.EXTERNAL_WRITE
    assert level_from_annotations(read_only=None, open_world=True) is SideEffect.EXTERNAL_WRITE


def test_jean2_dangerous_mapping() -> None:
    assert level_from_dangerous(True) is SideEffect.CODE_EXECUTION
    assert level_from_dangerous(False) is SideEffect.LOCAL_WRITE


def test_hints_are_derived_from_the_level_unless_declared() -> None:
    read = make(side_effect="read_only").resolved_hints
    assert (read.read_only, read.destructive, read.idempotent, read.open_world) == (
        True,
        False,
        True,
        True,
    )
    local = make(side_effect="local_write").resolved_hints
    assert (local.read_only, local.destructive, local.open_world) == (False, True, False)
    declared = make(side_effect="external_write", hints=ToolHints(destructive=False))
    assert declared.resolved_hints.destructive is False


def test_definition_hash_changes_with_what_the_tool_does_not_with_where_it_lives() -> None:
    base = make()
    assert base.definition_hash == make().definition_hash
    assert base.definition_hash != make(description="Search harder.").definition_hash
    assert base.definition_hash != make(side_effect="privileged").definition_hash
    moved = dataclasses.replace(base, source=dataclasses.replace(base.source, location="/x.py"))
    assert moved.definition_hash == base.definition_hash


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="timeout"):
        make(timeout=0)
