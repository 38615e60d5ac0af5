"""Attack review of issue 29's second stop (BM25 over the caller's tools, the registry's lock):
each test failed on the change as given. (The action bonus it also attacked was taken out in
the third stop; a test keeps it out.)"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from gateway_support import gateway_with
from toolgate import SafetySpec, Tool
from toolgate.errors import DuplicateToolError
from toolgate.registry import RegisteredTool, Registry
from toolgate.search import embedder
from toolgate.search.fusion import LEXICAL_WEIGHT
from toolgate.search.index import ToolIndex
from toolgate.search.semantic import SemanticModel


def _entry(tool_id: str, description: str = "A tool.") -> RegisteredTool:
    return RegisteredTool(Tool(id=tool_id, description=description, input_schema={}), binding=None)


def test_suggestions_while_another_thread_adds_a_tool() -> None:
    # "Did you mean" suggestions (an unknown tool called) walked the registry's dict without the
    # lock while deciding each tool; a hot reload adding a tool from its thread meanwhile made
    # the walk fail with "dictionary changed size during iteration".
    registry = Registry()
    for i in range(20):
        registry.add(_entry(f"demo:tool_{i:02d}"))
    added = threading.Event()

    def among(tool: Tool) -> bool:
        if not added.is_set():
            added.set()
            worker = threading.Thread(target=registry.add, args=(_entry("demo:late"),))
            worker.start()
            worker.join()
        return True

    assert registry.suggestions("demo:tool_0", among=among)
    assert "demo:late" in registry


class _Same:
    """A stand-in encoder that embeds every text alike: every similarity is 1, so what a score
    holds beyond it is the lexical share."""

    dimensions = 4

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.full((len(texts), 4), 0.5, dtype=np.float32)


@pytest.mark.parametrize(
    "request_text",
    ["delete the old report", "read the report", "create a thing", "send it", "find the report"],
)
def test_a_fused_score_is_the_similarity_and_the_lexical_share_only(
    monkeypatch: pytest.MonkeyPatch, request_text: str
) -> None:
    # The second stop's action bonus (a request's verb class matching a tool name's) lowered
    # the project set's MRR at every weight with the fine-tuned encoder and was taken out: no
    # tool name may lift a score, and explain's formula names nothing else.
    monkeypatch.setattr(embedder, "missing", lambda: [])  # as if the extra were installed
    registry = Registry()
    names = ["file_delete", "delete_file", "read_file", "create_comment", "send_message", "x"]
    for name in names:
        registry.add(_entry(f"app:{name}", "Zzz."))
    model = SemanticModel(_Same())
    index = ToolIndex(registry, semantic=True, model=lambda: model)
    hits = index.search(request_text, mode="fused", limit=len(names))
    best = max(h.lexical_score or 0.0 for h in hits)
    for hit in hits:
        share = LEXICAL_WEIGHT * (hit.lexical_score or 0.0) / best if best else 0.0
        assert hit.semantic_score is not None
        assert hit.score == pytest.approx(hit.semantic_score + share, abs=1e-5), hit.tool.id
    for explanation in index.explain(request_text, hits, mode="fused"):
        assert explanation.formula == (
            f"similarity + {LEXICAL_WEIGHT} * BM25 / (best BM25 of your tools for this request)"
        )


def test_kept_decisions_follow_changes_made_from_threads_while_searching() -> None:
    # Tools added, removed and made unavailable from two threads while two agents search with
    # their kept decisions: once quiet, each agent's scores and term shares equal deciding every
    # tool afresh, and no search failed or showed a tool the agent may not call.
    words = ["send", "mail", "read", "file", "list", "folder", "play", "music", "payroll"]

    def tool(i: int, rng: random.Random) -> Tool:
        only = ("root",) if rng.random() < 0.5 else None
        return Tool(
            id=f"ns{i % 3}:tool_{i:03d}",
            description=" ".join(rng.sample(words, 3)),
            input_schema={},
            safety=SafetySpec() if only is None else SafetySpec(allowed_agents=only),
        )

    errors: list[BaseException] = []
    with gateway_with(semantic_search=False) as gw:
        seed = random.Random(1)
        for i in range(30):
            gw.add(tool(i, seed), handler=lambda: None)

        def change(n: int) -> None:
            rng = random.Random(n)
            try:
                for _ in range(150):
                    i = rng.randrange(60)
                    entry = gw.registry.get(f"ns{i % 3}:tool_{i:03d}")
                    roll = rng.random()
                    if entry is None:
                        # The other thread may add it first.
                        with contextlib.suppress(DuplicateToolError):
                            gw.add(tool(i, rng), handler=lambda: None)
                    elif roll < 0.4:
                        gw.registry.remove(entry.tool.id)
                    else:
                        reason = None if entry.unavailable_reason else "no runtime"
                        gw.registry.replace(dataclasses.replace(entry, unavailable_reason=reason))
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        def search(agent: str) -> None:
            try:
                for _ in range(60):
                    for hit in gw.search_tools("payroll mail", agent=agent, mode="lexical"):
                        assert agent == "root" or hit.tool.safety.allowed_agents is None, hit
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        for agent in ("bob", "root"):  # decisions kept before the changes begin
            gw.search_tools("payroll mail", agent=agent, mode="lexical")
        threads = [threading.Thread(target=change, args=(n,)) for n in (1, 2)]
        threads += [threading.Thread(target=search, args=(a,)) for a in ("bob", "root")]
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # threads take turns often: searches run between changes
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(switch)
        assert not errors, errors
        for agent in ("bob", "root"):

            def allowed(entry: RegisteredTool, agent: str = agent) -> bool:
                return entry.available and gw.access.decide(entry.tool, agent).allowed

            for query in ("payroll mail", "read folder", "play music"):
                kept = gw.search_tools(query, agent=agent, mode="lexical", limit=50)
                fresh = gw.search_index.search(query, allowed=allowed, mode="lexical", limit=50)
                assert [(h.tool.id, h.score, h.terms) for h in kept] == [
                    (h.tool.id, h.score, h.terms) for h in fresh
                ]
