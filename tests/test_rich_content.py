"""Typed content blocks (issue 27): the model, the MCP result mapping, the pipeline's shaping
(masking, text overflow, binary spill, the audit form) and every surface's form of them.

The pipeline is a real :class:`~toolgate.Gateway` running a Python tool that answers with
content blocks, as an MCP upstream's result reaches the pipeline; the provider forms are
checked against the SDKs' own types.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic.types as anthropic_types
import google.genai.types as gemini_types
import mcp.types as mcp_types
import pytest
from openai.types.responses.response_input_item_param import FunctionCallOutput

from gateway_support import gateway_with
from test_exporters import typed_dict
from test_web_ui import Console
from toolgate import CallOutcome, CallStatus, ToolCall, ToolContext, ToolError, tool
from toolgate.backends.mcp_results import result_value
from toolgate.exporters import (
    anthropic_tool_result,
    gemini_function_response,
    mcp_call_tool_result,
    openai_responses_tool_result,
    openai_tool_message,
    tool_result,
)
from toolgate.model import content as content_module
from toolgate.model.content import (
    ContentError,
    ContentResult,
    ImageContent,
    TextContent,
    content_fields,
    content_from_fields,
)
from toolgate.pipeline.content_shaping import spill_blocks
from toolgate.pipeline.idempotency import outcome_from_record, outcome_to_record
from toolgate.pipeline.overflow import OverflowSpiller
from toolgate.serve.web import build_ui
from web_support import make_gateway, serve

SECRET = "sk-live-0123456789abcdef"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(40))).decode()

#: One block of every type MCP defines, with annotations, ``_meta`` and a key of a later version.
BLOCKS: list[dict[str, Any]] = [
    {"type": "text", "text": "Here you are:", "annotations": {"audience": ["user"], "priority": 1}},
    {"type": "image", "data": PNG, "mimeType": "image/png", "_meta": {"acme/id": 7}},
    {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
    {
        "type": "resource_link",
        "uri": "demo://resource/1",
        "name": "Resource 1",
        "description": "a plaintext resource",
        "mimeType": "text/plain",
        "icons": [{"src": "https://example.org/i.png"}],
    },
    {"type": "resource", "resource": {"uri": "demo://t/1", "mimeType": "text/plain", "text": "hi"}},
    {"type": "resource", "resource": {"uri": "demo://b/1", "blob": "AAEC"}},
    {"type": "hologram", "frames": 3},
]


def _ok(content: Any, tool_id: str = "everything:picture") -> CallOutcome:
    return CallOutcome(status=CallStatus.OK, tool_id=tool_id, call_id="c1", content=content)


# -- the model -------------------------------------------------------------------------------------


def test_every_block_type_round_trips_exactly() -> None:
    result = ContentResult.from_mcp(BLOCKS)
    assert [block.type for block in result.blocks] == [
        "text",
        "image",
        "audio",
        "resource_link",
        "resource",
        "resource",
        "hologram",
    ]
    assert result.to_mcp() == BLOCKS
    assert ContentResult.from_json(result.to_json()) == result


def test_the_text_is_the_texts_and_a_note_per_other_block_never_base64() -> None:
    text = ContentResult.from_mcp(BLOCKS).text
    assert PNG not in text and "UklGRg==" not in text and "AAEC" not in text
    assert "Here you are:" in text
    assert "[image: image/png, 48 bytes]" in text
    assert "[audio: audio/wav, 4 bytes]" in text
    assert "[resource link: Resource 1 <demo://resource/1> (text/plain): a plaintext resource]" in (
        text
    )
    assert "[resource <demo://t/1> (text/plain)]\nhi" in text
    assert "[resource <demo://b/1>: 3 bytes of binary data]" in text
    assert "[hologram content, not shown as text]" in text


def test_the_record_form_keeps_sizes_not_base64() -> None:
    record = json.dumps(ContentResult.from_mcp(BLOCKS).record())
    assert PNG not in record and "AAEC" not in record
    image = ContentResult.from_mcp(BLOCKS).record()["content"][1]
    assert image == {"type": "image", "mimeType": "image/png", "_meta": {"acme/id": 7}, "size": 48}


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ({"type": "image", "mimeType": "image/png"}, "content[1] (image): 'data' must be a string"),
        ({"type": "text", "text": 3}, "content[1] (text): 'text' must be a string"),
        ({"type": "resource_link", "uri": "x"}, "content[1] (resource_link): 'name' must be"),
        ({"type": "resource", "resource": []}, "content[1] (resource): 'resource' must be"),
        ({"type": "text", "text": "x", "annotations": 1}, "'annotations' must be an object"),
        ("text", "content[1] must be an object, got str"),
    ],
)
def test_a_malformed_block_is_named(block: Any, message: str) -> None:
    with pytest.raises(ContentError, match=re.escape(message)):
        ContentResult.from_mcp([{"type": "text", "text": "ok"}, block])


def test_a_block_over_the_size_bound_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(content_module, "MAX_BLOCK_DATA", 10)
    with pytest.raises(ContentError, match=r"content\[0\] \(image\): 'data' holds 64 characters"):
        ContentResult.from_mcp([{"type": "image", "data": PNG, "mimeType": "image/png"}])


def test_stored_fields_give_the_blocks_back() -> None:
    result = ContentResult.from_mcp(BLOCKS, {"n": 1})
    fields = content_fields(result)
    assert fields["content"] == {"n": 1} and fields["blocks"] == BLOCKS
    assert content_from_fields(json.loads(json.dumps(fields))) == result
    assert content_from_fields({"content": "plain"}) == "plain"


# -- an MCP result -----------------------------------------------------------------------------


def test_plain_text_stays_a_string_and_rich_content_stays_typed() -> None:
    plain = {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert result_value(plain, server="s", tool="t") == "a\n\nb"
    structured = {**plain, "structuredContent": {"x": 1}}
    # The upstream's own text blocks are kept beside its structuredContent (issue 27).
    both = result_value(structured, server="s", tool="t")
    assert isinstance(both, ContentResult) and both.structured == {"x": 1}
    assert both.to_mcp() == plain["content"]
    alone = {"content": [], "structuredContent": {"x": 1}}
    assert result_value(alone, server="s", tool="t") == {"x": 1}
    annotated = {"content": [{"type": "text", "text": "a", "annotations": {"priority": 0.5}}]}
    value = result_value(annotated, server="s", tool="t")
    assert isinstance(value, ContentResult) and value.to_mcp() == annotated["content"]
    rich = result_value({"content": BLOCKS, "structuredContent": {"x": 1}}, server="s", tool="t")
    assert isinstance(rich, ContentResult) and rich.structured == {"x": 1}


def test_a_malformed_upstream_block_is_a_tool_error_naming_it() -> None:
    bad = {"content": [{"type": "image", "data": 5, "mimeType": "image/png"}]}
    with pytest.raises(ToolError, match=r"server s .* tool t .*content\[0\] \(image\)"):
        result_value(bad, server="s", tool="t")


# -- the pipeline ------------------------------------------------------------------------------


def _answering(blocks: list[dict[str, Any]]) -> Any:
    @tool(namespace="everything", effect="read_only", secrets=["TOKEN"])
    def picture(ctx: ToolContext) -> Any:
        """Answer with content blocks, as an MCP upstream does."""
        return ContentResult.from_mcp(blocks)

    return picture


def test_secrets_are_masked_inside_blocks_and_base64_is_left_alone(tmp_path: Path) -> None:
    blocks = [
        {"type": "text", "text": f"token {SECRET}", "annotations": {"audience": ["user"]}},
        {"type": "resource", "resource": {"uri": "demo://t/1", "text": f"key={SECRET}"}},
        {"type": "resource_link", "uri": f"https://x.example/?k={SECRET}", "name": "r"},
        {"type": "image", "data": PNG, "mimeType": "image/png"},
    ]
    with gateway_with(secrets={"TOKEN": SECRET}, audit_path=tmp_path / "audit.db") as gateway:
        gateway.add(_answering(blocks))
        outcome = gateway.call_sync("everything:picture", {})
        assert gateway.audit is not None and gateway.audit.flush(10)
        (record,) = gateway.audit.query(limit=None)
    assert outcome.ok, outcome.message
    assert isinstance(outcome.content, ContentResult)
    sent = json.dumps(outcome.content.to_mcp())
    assert SECRET not in sent and sent.count("[REDACTED]") == 3
    assert outcome.content.blocks[0].annotations == {"audience": ("user",)}
    image = outcome.content.blocks[3]
    assert isinstance(image, ImageContent) and image.data == PNG
    assert SECRET not in json.dumps(record.result) and PNG not in json.dumps(record.result)
    assert record.result["content"][3] == {"type": "image", "mimeType": "image/png", "size": 48}


def test_a_huge_text_block_is_spilled_with_a_preview(tmp_path: Path) -> None:
    huge = "line of text\n" * 10_000  # 130,000 characters
    blocks = [{"type": "text", "text": "small"}, {"type": "text", "text": huge}]
    with gateway_with(secrets={"TOKEN": SECRET}, spill_dir=tmp_path / "spill") as gateway:
        gateway.add(_answering(blocks))
        outcome = gateway.call_sync("everything:picture", {}, session_id="s1")
    assert outcome.ok and isinstance(outcome.content, ContentResult)
    # The overflow rule applies to the result as a whole: its whole text goes to the call's
    # file and the model gets the first 10,000 characters and the note.
    (spilled,) = outcome.content.blocks
    whole = "small\n\n" + huge
    assert isinstance(spilled, TextContent) and spilled.text.startswith(whole[:10_000])
    assert outcome.overflow is not None and outcome.overflow.original_size == len(whole)
    assert outcome.overflow.path in spilled.text
    assert Path(outcome.overflow.path).read_text() == whole
    assert Path(outcome.overflow.path).name == f"{outcome.call_id}.txt"


def test_a_huge_image_is_spilled_as_bytes_and_replaced_by_a_note(tmp_path: Path) -> None:
    raw = bytes(range(256)) * 20_000  # 5,120,000 bytes: over 4 MiB of base64
    data = base64.b64encode(raw).decode()
    blocks = [{"type": "image", "data": data, "mimeType": "image/png"}]
    with gateway_with(
        secrets={"TOKEN": SECRET},
        spill_dir=tmp_path / "spill",
        audit_path=tmp_path / "audit.db",
    ) as gateway:
        gateway.add(_answering(blocks))
        outcome = gateway.call_sync("everything:picture", {})
        assert gateway.audit is not None and gateway.audit.flush(10)
        (record,) = gateway.audit.query(limit=None)
    assert outcome.ok and isinstance(outcome.content, ContentResult)
    (note,) = outcome.content.blocks
    assert isinstance(note, TextContent) and data[:100] not in note.text
    assert "[image: image/png, 5,120,000 bytes" in note.text
    assert outcome.overflow is not None and outcome.overflow.path in note.text
    assert Path(outcome.overflow.path).read_bytes() == raw
    assert Path(outcome.overflow.path).suffix == ".png"
    assert data[:100] not in json.dumps(record.result)


def test_binary_data_that_is_not_base64_is_refused_when_spilled(tmp_path: Path) -> None:
    spiller = OverflowSpiller(root=tmp_path / "spill", binary_limit=4)
    bad = ContentResult.from_mcp(
        [{"type": "audio", "data": "not base64!", "mimeType": "audio/wav"}]
    )
    with pytest.raises(ContentError, match=r"content\[0\] \(audio\).*not base64"):
        spill_blocks(bad, spiller, session_id=None, call_id="c")
    small = ContentResult.from_mcp([{"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}])
    kept = spill_blocks(
        small, OverflowSpiller(root=tmp_path / "spill"), session_id=None, call_id="d"
    )
    assert kept.result == small and kept.overflow is None


def test_a_visualization_in_the_structured_content_is_kept_from_the_model(tmp_path: Path) -> None:
    structured = {"n": 1, "_visualization": {"type": "markdown", "content": "# hi"}}

    @tool(namespace="everything", effect="read_only")
    def chart() -> Any:
        """Answer with blocks and a visualization."""
        return ContentResult.from_mcp(BLOCKS[:2], structured)

    with gateway_with() as gateway:
        gateway.add(chart)
        outcome = gateway.call_sync("everything:chart", {})
    assert outcome.ok and isinstance(outcome.content, ContentResult)
    assert outcome.content.structured == {"n": 1}
    assert outcome.visualization is not None and outcome.visualization["type"] == "markdown"
    assert "_visualization" not in json.dumps(mcp_call_tool_result(outcome))


# -- the surfaces --------------------------------------------------------------------------------


def test_mcp_sends_the_same_blocks() -> None:
    result = mcp_call_tool_result(_ok(ContentResult.from_mcp(BLOCKS[:6], {"x": 1})))
    assert result == {"content": BLOCKS[:6], "structuredContent": {"x": 1}, "isError": False}
    parsed = mcp_types.CallToolResult.model_validate(result)
    assert [block.type for block in parsed.content] == [b["type"] for b in BLOCKS[:6]]
    assert tool_result(_ok(ContentResult.from_mcp(BLOCKS)), "mcp")["content"] == BLOCKS


def test_anthropic_gets_image_blocks_and_text() -> None:
    block = anthropic_tool_result(_ok(ContentResult.from_mcp(BLOCKS)), ToolCall("x", {}, "tu1"))
    typed_dict(anthropic_types.ToolResultBlockParam)(block)
    content = block["content"]
    assert content[1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
    }
    assert [part["type"] for part in content] == ["text", "image"] + ["text"] * 5
    assert all(PNG not in part.get("text", "") for part in content)


def test_openai_responses_gets_input_image_parts() -> None:
    item = openai_responses_tool_result(_ok(ContentResult.from_mcp(BLOCKS)), ToolCall("x", {}, "c"))
    typed_dict(FunctionCallOutput)(item)
    output = item["output"]
    assert output[1] == {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
    assert [part["type"] for part in output] == ["input_text", "input_image"] + ["input_text"] * 5


def test_openai_chat_gets_text_with_a_note_per_image() -> None:
    message = openai_tool_message(_ok(ContentResult.from_mcp(BLOCKS)), ToolCall("x", {}, "c"))
    assert isinstance(message["content"], str) and PNG not in message["content"]
    assert "[image: image/png, 48 bytes]" in message["content"]
    assert "demo://resource/1" in message["content"]


def test_gemini_gets_inline_data_parts() -> None:
    part = gemini_function_response(_ok(ContentResult.from_mcp(BLOCKS)), ToolCall("x", {}, "g1"))
    response = part["functionResponse"]
    gemini_types.FunctionResponse.model_validate(response)
    assert response["parts"] == [
        {"inlineData": {"mimeType": "image/png", "data": PNG, "displayName": "image-1"}}
    ]
    text = response["response"]["output"]
    assert "(attached as image-1)" in text and PNG not in text


def test_the_outcome_dict_has_the_blocks_and_a_readable_content() -> None:
    outcome = _ok(ContentResult.from_mcp(BLOCKS))
    data = outcome.to_dict()
    assert data["blocks"] == BLOCKS and data["content"] == outcome.text
    assert PNG not in outcome.text
    structured = _ok(ContentResult.from_mcp(BLOCKS, {"x": 1})).to_dict()
    assert structured["content"] == {"x": 1}
    assert "blocks" not in _ok("plain").to_dict()


def test_an_idempotent_replay_gives_the_same_blocks() -> None:
    outcome = _ok(ContentResult.from_mcp(BLOCKS, {"x": 1}))
    stored = json.loads(json.dumps(outcome_to_record(outcome)))
    replayed = outcome_from_record(stored, tool_id=outcome.tool_id, call_id="c2", metadata={})
    assert replayed.content == outcome.content


def test_toolgate_call_prints_a_note_per_image_not_base64(
    run_cli: Callable[..., subprocess.CompletedProcess[str]], project: Path
) -> None:
    (project / "tools.py").write_text(
        "from toolgate import tool\n"
        "from toolgate.model.content import ContentResult\n\n"
        "@tool(namespace='pics', effect='read_only')\n"
        "def tiny() -> object:\n"
        '    """A picture."""\n'
        f"    return ContentResult.from_mcp({BLOCKS[:2]!r})\n",
        encoding="utf-8",
    )
    (project / "toolgate.yaml").write_text("python:\n  - ./tools.py\n", encoding="utf-8")
    shown = run_cli("call", "pics:tiny")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == "Here you are:\n\n[image: image/png, 48 bytes]\n"
    as_json = run_cli("call", "pics:tiny", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["blocks"] == BLOCKS[:2]


def test_the_web_ui_shows_notes_for_blocks_in_a_call_and_its_audit_page(tmp_path: Path) -> None:
    @tool(namespace="pics", effect="read_only")
    def tiny() -> Any:
        """A picture."""
        return ContentResult.from_mcp(BLOCKS[:2])

    gateway = make_gateway(tmp_path)
    try:
        gateway.add(tiny)
        with serve(build_ui(gateway)) as served:
            console = Console(gateway, served)
            try:
                page = console.post("/tools/pics:tiny", {"arguments": "{}"})
                assert page.status_code == 200, page.text
                assert 'data-status="ok"' in page.text and PNG not in page.text
                assert "[image: image/png, 48 bytes]" in page.text
                assert gateway.audit is not None and gateway.audit.flush(10)
                (record,) = gateway.audit.query(tool_id="pics:tiny", limit=None)
                call_page = console.get(
                    f"/audit/calls/{record.call_id}", params={"at": str(record.time)}
                )
                assert call_page.status_code == 200, call_page.text
                assert PNG not in call_page.text and "image/png" in call_page.text
            finally:
                console.client.close()
    finally:
        gateway.close()
