"""Semantic and fused ranking with the bundled embedding model (the ``toolgate[search]`` extra:
all-MiniLM-L6-v2 through ONNX Runtime, no torch). The tests that need the model skip, with the
reason, without the extra; the ones with a stand-in encoder always run."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from gateway_support import gateway_with
from toolgate import Gateway, tool
from toolgate.registry import RegisteredTool
from toolgate.search import embedder
from toolgate.search.fusion import LEXICAL_WEIGHT
from toolgate.search.index import MIN_SIMILARITY
from toolgate.search.semantic import SemanticModel, semantic_available

MISSING = semantic_available()


@tool(namespace="time", effect="read_only")
def now(timezone: str) -> str:
    """Get the current time in an IANA timezone."""
    return timezone


@tool(namespace="fs", effect="read_only")
def read_file(path: str) -> str:
    """Read the complete contents of a file."""
    return path


@tool(namespace="chat", effect="communication")
def post(channel: str, text: str) -> str:
    """Post a message to a channel."""
    return text


def test_asking_for_semantic_ranking_without_it_is_refused() -> None:
    with gateway_with(semantic_search=False) as gateway:
        gateway.add(now)
        with pytest.raises(RuntimeError, match="semantic"):
            gateway.search_tools("what hour is it", mode="semantic")
        assert gateway.search_tools("time")[0].semantic_rank is None


needs_model = pytest.mark.skipif(
    MISSING is not None, reason=f"toolgate[search] is not installed: {MISSING}"
)


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    if MISSING is not None:
        pytest.skip(f"toolgate[search] is not installed: {MISSING}")
    with gateway_with(semantic_search=True) as gw:
        gw.add(now, read_file, post)
        yield gw


@needs_model
def test_semantic_search_runs_without_torch_or_a_model_hub() -> None:
    # A new process, so that nothing another test imported counts: the search answers, and
    # neither torch, sentence-transformers, transformers nor the hub client was imported.
    code = """
import json, sys
from toolgate import Gateway, GatewaySettings, SourceSettings, tool

@tool(namespace="time", effect="read_only")
def now(timezone: str) -> str:
    \"\"\"Get the current time in an IANA timezone.\"\"\"
    return timezone

with Gateway(GatewaySettings(sources=SourceSettings(semantic_search=True))) as gateway:
    gateway.add(now)
    hits = gateway.search_tools("what hour is it in Osaka", mode="semantic")
loaded = sorted({name.split(".")[0] for name in sys.modules})
print(json.dumps({"first": hits[0].tool.id, "loaded": loaded}))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["first"] == "time:now"
    assert "onnxruntime" in report["loaded"]  # the check itself works
    heavy = {"torch", "sentence_transformers", "transformers"}
    assert heavy & set(report["loaded"]) == set()


@needs_model
def test_embeddings_are_unit_length_and_do_not_depend_on_the_batch() -> None:
    model = SemanticModel.shared()
    texts = [
        "Read the complete contents of a file.",
        "x",
        "Post a message to a channel. " * 200,  # past the model's 256 tokens: truncated
        "",
        "Get the current time in an IANA timezone.",
    ]
    together = model.encode(texts)
    assert together.shape == (5, 384) and together.dtype == np.float32
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # Batched calls sort by length and pad; one at a time there is no padding at all.
    alone = np.stack([model.encode([text])[0] for text in texts])
    assert np.allclose(together, alone, atol=1e-4)
    assert model.encode([]).shape == (0, 384)


@needs_model
def test_similar_texts_are_closer_than_unrelated_ones() -> None:
    query, near, far = SemanticModel.shared().encode(
        ["what hour is it in Osaka", "Get the current time in a timezone.", "Delete a branch."]
    )
    # all-MiniLM-L6-v2 (float32 weights, sentence-transformers): 0.245 and 0.044.
    assert float(query @ near) > 0.2 > 0.1 > float(query @ far)


@needs_model
def test_a_model_file_that_is_not_the_tested_one_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedder, "MODEL_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match=r"not the search model .*; reinstall toolgate"):
        embedder.minilm()


def test_without_the_extra_semantic_search_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(embedder, "missing", lambda: ["onnxruntime", "tokenizers"])
    reason = semantic_available()
    assert reason is not None
    assert "onnxruntime, tokenizers" in reason and "toolgate[search]" in reason
    with pytest.raises(RuntimeError, match="toolgate\\[search\\]"):
        SemanticModel()
    with pytest.raises(RuntimeError, match="onnxruntime"), gateway_with(semantic_search=True):
        pass


class _Letters:
    """A stand-in encoder: a text's vector counts its letters a-h (then unit length)."""

    dimensions = 8

    def __init__(self) -> None:
        self.calls: list[int] = []

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        rows = np.array(
            [[text.lower().count(c) + 1e-3 for c in "abcdefgh"] for text in texts],
            dtype=np.float32,
        )
        result: npt.NDArray[np.float32] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        return result


def test_the_shared_model_can_be_replaced_by_another_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Benchmarks compare encoders through SemanticModel.use; the index asks only for encode().
    monkeypatch.setattr(embedder, "missing", lambda: [])  # as if the extra were installed
    letters = _Letters()
    SemanticModel.use(SemanticModel(letters))
    try:
        with gateway_with(semantic_search=True) as gw:
            gw.add(now, read_file, post)
            hits = gw.search_tools("ggg hhh", mode="semantic")
            assert hits and all(MIN_SIMILARITY <= hit.score <= 1.0 for hit in hits)
        # The query (embedded outside the index's lock), and the catalog in one call: two
        # texts per tool (its name and description, and its whole text).
        assert letters.calls == [1, 6]
        model = SemanticModel.shared()
        assert model.dimensions == 8 and model.encode([]).shape == (0, 8)
        assert letters.calls == [1, 6]  # nothing to encode: the encoder is not called
    finally:
        SemanticModel.use(None)


@needs_model
def test_semantic_ranking_finds_a_tool_that_shares_no_word_with_the_request(
    gateway: Gateway,
) -> None:
    request = "what hour is it in Osaka"  # no word of the time tool's text
    assert gateway.search_tools(request, mode="lexical") == []
    hits = gateway.search_tools(request, mode="semantic")
    assert hits[0].tool.id == "time:now" and hits[0].semantic_rank == 1
    assert hits[0].lexical_rank is None and MIN_SIMILARITY <= hits[0].score <= 1.0


@needs_model
def test_fused_ranking_combines_both_ranks(gateway: Gateway) -> None:
    hits = gateway.search_tools("read the contents of a file", mode="fused")
    first = hits[0]
    assert first.tool.id == "fs:read_file"
    assert first.lexical_rank == 1 and first.semantic_rank == 1
    # Score fusion: similarity + LEXICAL_WEIGHT * BM25 / best BM25 (this tool has the best BM25).
    assert first.semantic_score is not None
    assert first.score == pytest.approx(first.semantic_score + LEXICAL_WEIGHT, abs=1e-5)
    assert gateway.search_tools("read the contents of a file")[0].score == first.score  # default


@needs_model
def test_a_changed_tool_is_embedded_again(gateway: Gateway) -> None:
    entry = gateway.registry.get("chat:post")
    assert entry is not None
    changed = dataclasses.replace(
        entry.tool, description="Water the plants in the greenhouse and log the humidity."
    )
    gateway.registry.replace(dataclasses.replace(entry, tool=changed))
    try:
        hits = gateway.search_tools("irrigate my garden", mode="semantic")
        assert hits[0].tool.id == "chat:post"
    finally:
        gateway.registry.replace(entry)
    after = gateway.search_tools("irrigate my garden", mode="semantic")
    assert all(not hit.tool.description.startswith("Water") for hit in after)


@needs_model
def test_access_rules_filter_semantic_results() -> None:
    @tool(namespace="ops", effect="read_only", allowed_agents=["alice"])
    def reboot(host: str) -> str:
        """Restart a server."""
        return host

    with gateway_with(semantic_search=True) as gw:
        gw.add(reboot, now)
        query = "bring the server back up after a restart"
        alice = gw.search_tools(query, agent="alice", mode="semantic")
        assert alice[0].tool.id == "ops:reboot"
        bob = gw.search_tools(query, agent="bob", mode="semantic")
        assert "ops:reboot" not in [hit.tool.id for hit in bob]


@tool(namespace="s3", effect="read_only")
def put_object(bucket: str, key: str, body: str) -> str:
    """Upload an object to a bucket under a key."""
    return key


@tool(namespace="spotify", effect="read_only", examples=["play my discover weekly playlist"])
def start_playback(device_id: str, context_uri: str) -> str:
    """Start or resume playing music on the user's active device."""
    return device_id


def _filler(index: int) -> Any:
    @tool(id=f"misc:tool_{index}", effect="read_only")
    def filler(value: str) -> str:
        """Convert a temperature between Celsius and Fahrenheit."""
        return value

    return filler


@needs_model
def test_fused_search_fills_the_limit_beyond_the_lexical_matches() -> None:
    # Issue 29: "put on some jazz" returned only s3:put_object (the one lexical match).
    with gateway_with(semantic_search=True) as gw:
        gw.add(put_object, start_playback, now, read_file, post)
        gw.add(*[_filler(i) for i in range(8)])
        hits = gw.search_tools("put on some jazz", limit=10)
        assert len(hits) == 10
        assert "spotify:start_playback" in [hit.tool.id for hit in hits]
        assert len(gw.search_tools("put on some jazz", limit=13)) == 13
        assert len(gw.search_tools("put on some jazz", limit=100)) == 13  # all there are
        # Only the tools the caller may see count.
        hidden = gw.search_tools("put on some jazz", agent="nobody", limit=100)
        assert len(hidden) == len([t for t in gw.list_tools(agent="nobody")])
        # A catalog filter asks for matches only.
        matches = gw.search_index.search("put on some jazz", limit=100, matches_only=True)
        assert 0 < len(matches) < 13


@needs_model
def test_explain_shows_the_similarity_and_the_closest_example() -> None:
    with gateway_with(semantic_search=True) as gw:
        gw.add(put_object, start_playback, now)
        hits = gw.search_tools("play some jazz")
        (first, *_) = gw.search_index.explain("play some jazz", hits)
        assert first.tool_id == "spotify:start_playback"
        assert first.example == "play my discover weekly playlist"
        assert first.example_similarity is not None and 0 < first.example_similarity <= 1
        assert first.semantic_score == hits[0].semantic_score
        assert "similarity" in first.formula
        assert [term for term, _ in first.terms] == ["play"]
        hits = gw.search_tools("put on some jazz")
        s3 = next(e for e in gw.search_index.explain("put on some jazz", hits) if "s3" in e.tool_id)
        assert [term for term, _ in s3.terms] == ["put"] and s3.example is None


@needs_model
@pytest.mark.slow
@pytest.mark.parametrize("folder", ["search", "search/holdout"])
def test_fusion_never_makes_top1_worse_than_its_inputs_on_the_evaluation_sets(
    folder: str,
) -> None:
    # Issue 29: reciprocal rank fusion made fused top-1 (0.512) worse than semantic (0.587).
    import sys

    bench = Path(__file__).parent.parent / "bench"
    sys.path.insert(0, str(bench / "search"))
    try:
        from dataset import load_requests, load_tools
    finally:
        sys.path.remove(str(bench / "search"))
    tools = load_tools(bench / folder)
    requests = load_requests({t.id for t in tools}, bench / folder)
    with gateway_with(semantic_search=True) as gw:
        for tool_value in tools:
            gw.registry.add(RegisteredTool(tool_value, binding=None))
        top1 = {
            mode: sum(
                gw.search_tools(r.text, limit=1, mode=mode)[0].tool.id in r.labels
                if gw.search_tools(r.text, limit=1, mode=mode)
                else False
                for r in requests
            )
            for mode in ("lexical", "semantic", "fused")
        }
    assert top1["fused"] >= max(top1["lexical"], top1["semantic"]), top1
