"""Fused search's action bonus (issue 29): a request that asks to create, get, list, search,
update, delete, send or run something lifts the tools whose names ask the same, by
ACTION_WEIGHT, and explain says so."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from toolgate import Tool
from toolgate.registry import RegisteredTool, Registry
from toolgate.search import embedder
from toolgate.search.fusion import ACTION_WEIGHT
from toolgate.search.index import ToolIndex
from toolgate.search.semantic import SemanticModel
from toolgate.search.text import action


class _Same:
    """A stand-in encoder that embeds every text alike: every similarity is 1."""

    dimensions = 4

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.full((len(texts), 4), 0.5, dtype=np.float32)


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> ToolIndex:
    monkeypatch.setattr(embedder, "missing", lambda: [])  # as if the extra were installed
    registry = Registry()
    for name in ("get_issue", "create_issue", "delete_issue"):
        tool = Tool(id=f"tracker:{name}", description="An issue in the tracker.", input_schema={})
        registry.add(RegisteredTool(tool, binding=None))
    model = SemanticModel(_Same())
    return ToolIndex(registry, semantic=True, model=lambda: model)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("open a GitHub issue", "get"),
        ("file a bug about the login page", "create"),
        ("please remove the draft", "delete"),
        ("createIssue", "create"),
        ("what time is it", None),
    ],
)
def test_the_action_of_a_request_or_a_name(text: str, kind: str | None) -> None:
    assert action(text) == kind


def test_a_tool_whose_name_asks_what_the_request_asks_is_lifted(index: ToolIndex) -> None:
    hits = index.search("add a ticket for the broken login", mode="fused")  # no shared word
    assert hits[0].tool.id == "tracker:create_issue"
    by_id = {h.tool.id: h.score for h in hits}
    assert by_id["tracker:create_issue"] == pytest.approx(
        by_id["tracker:get_issue"] + ACTION_WEIGHT
    )
    why = index.explain("add a ticket for the broken login", hits, mode="fused")
    assert f"+ {ACTION_WEIGHT} (the request and the tool's name both create)" in why[0].formula
    assert "+ 0.08" not in why[1].formula


def test_no_action_word_no_bonus_and_other_modes_never(index: ToolIndex) -> None:
    scores = {h.score for h in index.search("a ticket for the broken login", mode="fused")}
    assert len(scores) == 1
    semantic = index.search("add a ticket for the broken login", mode="semantic")
    assert len({h.score for h in semantic}) == 1
