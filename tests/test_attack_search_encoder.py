"""Attacks on the shipped search encoder (issue 29 review of the fine-tuned model): its files
broken or swapped, and texts that might embed differently alone and in a batch."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from toolgate import Tool
from toolgate.registry import RegisteredTool, Registry
from toolgate.search import embedder
from toolgate.search.index import ToolIndex
from toolgate.search.semantic import SemanticModel, semantic_available

MISSING = semantic_available()
needs_model = pytest.mark.skipif(
    MISSING is not None, reason=f"toolgate[search] is not installed: {MISSING}"
)


def _registry() -> Registry:
    registry = Registry()
    tool = Tool(
        id="mail:send", description="Send an email to a colleague.", input_schema={"type": "object"}
    )
    registry.add(RegisteredTool(tool=tool, binding=None))
    return registry


@pytest.fixture
def fresh_model() -> Iterator[None]:
    SemanticModel.use(None)  # the next use loads the bundled files again
    yield
    SemanticModel.use(None)


def _swapped(path: Path) -> Path:
    # A well-formed tokenizer.json that is not the model's: two words trade their ids, so
    # "email" reads as another word and every ranking is silently off.
    data = json.loads(embedder.TOKENIZER.read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    vocab["email"], vocab["banana"] = vocab["banana"], vocab["email"]
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@needs_model
@pytest.mark.parametrize("broken", ["missing", "not json", "a folder", "swapped"])
def test_a_broken_or_swapped_tokenizer_is_refused_with_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, broken: str
) -> None:
    # Attack: the model file is checked (sha256), its tokenizer beside it was not. Deleted or
    # garbled, tokenizers raised a bare Exception ("No such file or directory (os error 2)"),
    # which the index does not catch: every default search failed instead of going on by
    # words. Swapped for another well-formed one, it loaded and ranked silently wrong.
    target = {
        "missing": tmp_path / "gone.json",
        "not json": tmp_path / "bad.json",
        "a folder": tmp_path,
        "swapped": tmp_path / "swapped.json",
    }[broken]
    if broken == "not json":
        target.write_text('{"not": "a tokenizer"', encoding="utf-8")
    if broken == "swapped":
        _swapped(target)
    monkeypatch.setattr(embedder, "TOKENIZER", target)
    with pytest.raises(RuntimeError, match=r"tokenizer .*; reinstall toolgate"):
        embedder.minilm()


@needs_model
def test_default_search_goes_on_by_words_when_the_tokenizer_is_missing(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    fresh_model: None,
) -> None:
    monkeypatch.setattr(embedder, "TOKENIZER", tmp_path / "gone.json")
    index = ToolIndex(_registry())
    with caplog.at_level(logging.WARNING):
        hits = index.search("send email")
    assert [hit.tool.id for hit in hits] == ["mail:send"]
    assert hits[0].semantic_rank is None and not index.semantic
    assert "searching by words only" in caplog.text and "tokenizer" in caplog.text


@needs_model
def test_the_http_api_keeps_answering_when_the_tokenizer_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_model: None
) -> None:
    # Before: GET /v1/tools/search answered 500 (the bare Exception passed every handler).
    from fastapi.testclient import TestClient

    from http_api_support import LOCAL, auth, make_app, make_gateway, problem

    monkeypatch.setattr(embedder, "TOKENIZER", tmp_path / "gone.json")
    with (
        make_gateway(tmp_path, semantic_search=None) as gateway,
        TestClient(make_app(gateway), client=LOCAL) as client,
    ):
        found = client.get(
            "/v1/tools/search", params={"q": "add two numbers"}, headers=auth("alice")
        )
        assert found.status_code == 200, found.text
        assert found.json()["mode"] == "lexical" and found.json()["tools"][0]["id"] == "t:add"
        asked = client.get(
            "/v1/tools/search", params={"q": "add", "mode": "semantic"}, headers=auth("alice")
        )
        detail = problem(asked, 422, "invalid_arguments")["detail"]
        assert "tokenizer" in detail and "reinstall toolgate" in detail


def _tool(tool_id: str, description: str) -> RegisteredTool:
    tool = Tool(id=tool_id, description=description, input_schema={"type": "object"})
    return RegisteredTool(tool=tool, binding=None)


@needs_model
def test_a_lone_surrogate_in_a_tool_text_does_not_break_search(fresh_model: None) -> None:
    # Attack: a tool whose description holds a lone surrogate (valid in an MCP server's JSON as
    # "\ud800"): the tokenizer raised TypeError on the batch, so every default search failed
    # (a 500 over HTTP). Queries are cleaned of such characters; tool texts were not.
    registry = _registry()
    registry.add(_tool("evil:tool", "Delete \ud800 everything."))
    index = ToolIndex(registry)
    hits = index.search("send an email", mode="fused")
    assert hits[0].tool.id == "mail:send" and hits[0].semantic_rank == 1


class _FailsOnce:
    """A stand-in encoder that fails the first time it embeds a tool's text, then embeds
    every text alike."""

    dimensions = 4

    def __init__(self) -> None:
        self.failed = False

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if not self.failed and any("colleague" in text for text in texts):
            self.failed = True
            raise TypeError("the encoder failed")
        return np.tile(np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32), (len(texts), 1))


def test_a_failed_embedding_is_tried_again_not_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Attack: when embedding a batch of new tools failed, the index had already taken them in
    # (slots, words) but not their vectors, and the next search took them as indexed: every
    # tool of that batch kept no vector (similarity 0) until it changed.
    monkeypatch.setattr(embedder, "missing", lambda: [])
    model = SemanticModel(_FailsOnce())
    index = ToolIndex(_registry(), semantic=True, model=lambda: model)
    with pytest.raises(TypeError):
        index.search("send email", mode="fused")
    (hit,) = index.search("send email", mode="fused")
    assert hit.semantic_score == pytest.approx(1.0)


@needs_model
def test_hostile_texts_embed_alike_alone_and_in_a_padded_batch() -> None:
    # Scripts, emoji, control and zero-width characters, special-token names, empty and long
    # texts: finite, unit length, and the same vector alone as beside texts of other lengths.
    texts = [
        "",
        " \t\n",
        "\x00\x01\x07\x7f",
        "\u200b\u200d\ufeff\u202e",
        "🚀🔥💾 deploy the app 🎉" * 3,
        "東京の天気を教えて",
        "أرسل رسالة إلى الفريق",
        "a\u0301\u0301\u0301 combining",
        "[CLS] [SEP] [PAD] [MASK] [UNK]",
        "🇺🇳" * 500,
        "send mail " * 3000,
        "Read the complete contents of a file.",
    ]
    model = SemanticModel.shared()
    together = model.encode(texts)
    alone = np.stack([model.encode([text])[0] for text in texts])
    assert np.isfinite(together).all()
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert np.allclose(together, alone, atol=1e-4)


@needs_model
def test_the_cli_says_when_search_fell_back_to_words(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_model: None
) -> None:
    # Before: with the model or its tokenizer broken, `toolgate tools search` printed the words
    # ranking (Semantic "-") and nothing else: the warning went only to an unconfigured log.
    from typer.testing import CliRunner

    from toolgate.cli.app import app

    (tmp_path / "mytools.py").write_text(
        "from toolgate import tool\n\n"
        '@tool(namespace="mail", effect="read_only")\n'
        "def send(to: str) -> str:\n"
        '    "Send an email to a colleague."\n'
        "    return to\n",
        encoding="utf-8",
    )
    (tmp_path / "toolgate.yaml").write_text("python:\n  - module: ./mytools.py\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TOOLGATE_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(embedder, "TOKENIZER", tmp_path / "gone.json")
    result = CliRunner().invoke(app, ["tools", "search", "send email"])
    assert result.exit_code == 0, result.output
    assert "mail:send" in result.stdout
    assert "searching by words only" in result.stderr and "reinstall toolgate" in result.stderr
