"""Attack review of issue 29's second stop (BM25 over the caller's tools, the action bonus, the
registry's lock): each test failed on the change as given."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from toolgate import Tool
from toolgate.registry import RegisteredTool, Registry
from toolgate.search import embedder
from toolgate.search.fusion import ACTION_WEIGHT, LEXICAL_WEIGHT
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
    """A stand-in encoder that embeds every text alike: every similarity is 1, so a score above
    another's is the action bonus."""

    dimensions = 4

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.full((len(texts), 4), 0.5, dtype=np.float32)


def _lifted(monkeypatch: pytest.MonkeyPatch, names: Sequence[str], request: str) -> set[str]:
    """The names a fused search for ``request`` lifts by the action bonus."""
    monkeypatch.setattr(embedder, "missing", lambda: [])  # as if the extra were installed
    registry = Registry()
    for name in names:
        registry.add(_entry(f"app:{name}", "Zzz."))
    model = SemanticModel(_Same())
    index = ToolIndex(registry, semantic=True, model=lambda: model)
    hits = index.search(request, mode="fused", limit=len(names))
    # Every similarity is equal: take out the lexical share, what is left above the rest is the
    # bonus.
    best = max(h.lexical_score or 0.0 for h in hits)
    base = {
        h.tool.name: h.score - (LEXICAL_WEIGHT * (h.lexical_score or 0.0) / best if best else 0.0)
        for h in hits
    }
    low = min(base.values())
    lifted = {name for name, value in base.items() if value > low + ACTION_WEIGHT / 2}
    why = index.explain(request, hits, mode="fused")
    assert {e.tool_id.partition(":")[2] for e in why if f"+ {ACTION_WEIGHT}" in e.formula} == lifted
    return lifted


@pytest.mark.parametrize(
    ("request_text", "lifted"),
    [
        # Noun-first names: the object comes first, its verb after. "file", "message", "email",
        # "comment" and "call" are action words in a request ("file a bug", "email bob") but
        # the thing acted on in these names; they were classed create / send / run.
        ("delete the old report", {"file_delete", "message_delete", "delete_file"}),
        ("read the report", {"file_read", "read_file", "call_log_get"}),
        ("list what I have", {"email_list"}),
        ("create a thing", {"file_issue", "create_comment"}),
        ("send it", {"message_user", "send_message"}),
        # One class per name, its first verb's: no name is lifted for every request.
        ("update the report", {"comment_update"}),
        ("find the report", set()),
    ],
)
def test_a_tool_names_action_is_its_verb_not_its_object(
    monkeypatch: pytest.MonkeyPatch, request_text: str, lifted: set[str]
) -> None:
    names = [
        "file_delete",
        "delete_file",
        "file_read",
        "read_file",
        "message_delete",
        "email_list",
        "comment_update",
        "create_comment",
        "call_log_get",
        "file_issue",
        "message_user",
        "send_message",
    ]
    assert _lifted(monkeypatch, names, request_text) == lifted


def test_a_name_of_every_action_is_lifted_for_one_class_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = ["file_get_list_create_send_delete_run_update_search", "other_tool"]
    won = [
        request
        for request in ("get it", "list them", "create it", "send it", "delete it", "run it")
        if _lifted(monkeypatch, names, request)
    ]
    assert won == ["get it"]
