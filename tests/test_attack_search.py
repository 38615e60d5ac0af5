"""Attacks on tool search (issue 29 review): what the caller may not see must not shape what it
is shown, a broken model file is refused clearly, and hostile tool text stays bounded."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from toolgate import Tool
from toolgate.model.tool import DisplaySpec
from toolgate.registry import RegisteredTool, Registry
from toolgate.search import embedder
from toolgate.search.fusion import LEXICAL_WEIGHT
from toolgate.search.index import MAX_EXPLAINED_EXAMPLES, ToolIndex
from toolgate.search.semantic import MAX_TEXT_CHARS, SemanticModel


class _Letters:
    """A stand-in encoder: a text's vector counts its letters a-h (then unit length)."""

    dimensions = 8

    def __init__(self) -> None:
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.texts.extend(texts)
        rows = np.array(
            [[text.lower().count(c) + 1e-3 for c in "abcdefgh"] for text in texts],
            dtype=np.float32,
        )
        result: npt.NDArray[np.float32] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return result


@pytest.fixture
def letters(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Letters]:
    monkeypatch.setattr(embedder, "missing", lambda: [])  # as if the extra were installed
    yield _Letters()


def _entry(tool_id: str, description: str, examples: Sequence[str] = ()) -> RegisteredTool:
    tool = Tool(
        id=tool_id,
        description=description,
        input_schema={"type": "object"},
        display=DisplaySpec(examples=tuple(examples)),
    )
    return RegisteredTool(tool=tool, binding=None)


def _index(registry: Registry, encoder: _Letters) -> ToolIndex:
    model = SemanticModel(encoder)
    return ToolIndex(registry, semantic=True, model=lambda: model)


def test_a_hidden_tool_does_not_change_the_fused_score_of_a_visible_one(
    letters: _Letters,
) -> None:
    # Attack: fused search normalized BM25 by the best BM25 of *every* tool, hidden ones too, so
    # a visible tool's score (shown to the caller) dropped when a tool the caller may not see
    # matched the request better: probing "payroll" told whether hidden tools mention it.
    registry = Registry()
    registry.add(_entry("open:mail", "Send payroll mail to a colleague."))
    registry.add(_entry("open:other", "Read a calendar."))
    index = _index(registry, letters)
    visible = lambda entry: entry.tool.id.startswith("open:")  # noqa: E731
    before = index.search("payroll", allowed=visible, mode="fused")
    registry.add(_entry("secret:payroll", "Payroll payroll payroll run."))
    after = index.search("payroll", allowed=visible, mode="fused")
    assert [hit.tool.id for hit in after] == [hit.tool.id for hit in before]
    mail = next(hit for hit in after if hit.tool.id == "open:mail")
    assert mail.semantic_score is not None
    # The best visible lexical match gets the whole lexical weight.
    assert mail.score == pytest.approx(mail.semantic_score + LEXICAL_WEIGHT, abs=1e-5)


def test_a_missing_model_file_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Attack: the model file deleted (or a dangling symlink in its place): minilm() raised a
    # bare FileNotFoundError, which no surface expects (the HTTP API answered 500).
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(embedder, "missing", lambda: [])
    (tmp_path / "model.onnx").symlink_to(tmp_path / "gone.onnx")
    monkeypatch.setattr(embedder, "MODEL", tmp_path / "model.onnx")
    with pytest.raises(RuntimeError, match=r"cannot read the search model .*; reinstall toolgate"):
        embedder.minilm()


def test_a_model_that_will_not_load_leaves_default_search_lexical(
    letters: _Letters, caplog: pytest.LogCaptureFixture
) -> None:
    # Attack: a modified model file. It is refused, but search on by default (semantic=None)
    # then failed for every request, and read and hashed the 23 MB file again each time.
    loads: list[int] = []

    def broken() -> SemanticModel:
        loads.append(1)
        raise RuntimeError("model.onnx is not the all-MiniLM-L6-v2 file toolgate was tested with")

    registry = Registry()
    registry.add(_entry("mail:send", "Send an email to a colleague."))
    index = ToolIndex(registry, model=broken)
    assert index.semantic
    for _ in range(3):
        assert [hit.tool.id for hit in index.search("send email")] == ["mail:send"]
    assert loads == [1] and not index.semantic
    assert "not the all-MiniLM-L6-v2 file" in caplog.text
    with pytest.raises(RuntimeError, match="not the all-MiniLM-L6-v2 file"):
        index.search("send email", mode="fused")
    explicit = ToolIndex(registry, semantic=True, model=broken)
    with pytest.raises(RuntimeError, match="not the all-MiniLM-L6-v2 file"):
        explicit.search("send email")


def test_a_huge_tool_text_is_embedded_only_as_far_as_the_model_reads(letters: _Letters) -> None:
    # Attack: a tool (say from an MCP server) with a 2 MB description: the whole text went to
    # the tokenizer, under the index's lock (2.3 s with the bundled model, every search
    # waiting), though the model reads only its first 256 tokens.
    registry = Registry()
    registry.add(_entry("big:tool", "lorem ipsum dolor sit amet " * 80_000))
    index = _index(registry, letters)
    index.refresh()
    assert letters.texts and max(len(text) for text in letters.texts) <= MAX_TEXT_CHARS


def test_explain_reads_a_bounded_number_of_examples(letters: _Letters) -> None:
    # Attack: a tool with thousands of prompt examples: every explain of a search that found it
    # embedded them all (3,000 examples: 4.9 s with the bundled model), and kept them cached.
    registry = Registry()
    examples = [f"example {i} of sending mail" for i in range(3000)]
    registry.add(_entry("mail:send", "Send mail.", examples))
    index = _index(registry, letters)
    hits = index.search("send mail")
    before = len(letters.texts)
    (why,) = index.explain("send mail", hits)
    assert why.example in examples
    assert len(letters.texts) - before <= 1 + MAX_EXPLAINED_EXAMPLES


def test_after_many_changes_the_index_ranks_as_a_fresh_one(letters: _Letters) -> None:
    # Attack: adds, replacements and removals in a random order, then the same searches on the
    # index and on one built fresh from the same registry. The scores were equal but ties went
    # in slot order, and a freed slot is reused: with limit 5 the two answered different tools.
    words = [
        "send",
        "mail",
        "read",
        "file",
        "list",
        "folder",
        "create",
        "issue",
        "play",
        "music",
        "stop",
        "start",
    ]
    rng = random.Random(1)
    registry = Registry()

    def entry(i: int) -> RegisteredTool:
        return _entry(f"t:tool_{i:03d}", " ".join(rng.sample(words, 3)))

    for i in range(60):
        registry.add(entry(i))
    index = _index(registry, letters)
    index.refresh()
    for step in range(300):
        i = rng.randrange(80)
        if f"t:tool_{i:03d}" in registry and rng.random() < 0.5:
            registry.remove(f"t:tool_{i:03d}")
        else:
            registry.replace(entry(i))
        if step % 7 == 0:
            index.refresh()
    fresh = _index(registry, letters)
    for query in ["send mail", "read file", "play", "stop music", "create"]:
        for mode in ("lexical", "fused"):
            got = index.search(query, limit=5, mode=mode)
            want = fresh.search(query, limit=5, mode=mode)
            assert [(h.tool.id, h.score) for h in got] == [(h.tool.id, h.score) for h in want]


def test_a_hidden_tool_does_not_change_the_bm25_of_a_visible_one() -> None:
    # Attack: the lexical score (and explain's term shares) of a tool the caller sees carries
    # the IDF of the request's words over every tool: from "payroll"'s share in a visible tool
    # the caller can tell how many tools it may not see mention payroll.
    registry = Registry()
    registry.add(_entry("open:mail", "Send payroll mail to a colleague."))
    registry.add(_entry("open:other", "Read a calendar."))
    index = ToolIndex(registry, semantic=False)
    visible = lambda entry: entry.tool.id.startswith("open:")  # noqa: E731
    before = index.search("payroll", allowed=visible)[0].score
    for i in range(5):
        registry.add(_entry(f"secret:payroll_{i}", "Run the payroll."))
    assert index.search("payroll", allowed=visible)[0].score == before
