"""BM25 counted over the caller's own tools (issue 29): a tool an agent may not see changes none
of its scores nor explain's term shares; the caller's decisions are kept per scope and only the
tools changed are decided again; and one tool's text is indexed to a bound."""

from __future__ import annotations

import dataclasses
import random

from gateway_support import gateway_with
from toolgate import SafetySpec, Tool
from toolgate.registry import RegisteredTool, Registry
from toolgate.search.index import ToolIndex
from toolgate.search.text import MAX_DOCUMENT_TERMS, document_terms


def _tool(tool_id: str, description: str, *, only: tuple[str, ...] | None = None) -> Tool:
    safety = SafetySpec() if only is None else SafetySpec(allowed_agents=only)
    return Tool(id=tool_id, description=description, input_schema={}, safety=safety)


def _shares(gw: object, query: str, agent: str) -> tuple[list[float], list[object]]:
    hits = gw.search_tools(query, agent=agent, mode="lexical")  # type: ignore[attr-defined]
    explained = gw.search_index.explain(query, hits, mode="lexical")  # type: ignore[attr-defined]
    return [h.score for h in hits], [e.terms for e in explained]


def test_tools_an_agent_may_not_see_change_none_of_its_scores_or_term_shares() -> None:
    with gateway_with(semantic_search=False) as gw:
        gw.add(_tool("open:mail", "Send payroll mail to a colleague."), handler=lambda: None)
        gw.add(_tool("open:other", "Read a calendar."), handler=lambda: None)
        before = _shares(gw, "payroll mail", "bob")
        root_before = _shares(gw, "payroll mail", "root")
        for i in range(5):
            gw.add(
                _tool(f"secret:payroll_{i}", "Run the payroll.", only=("root",)),
                handler=lambda: None,
            )
        assert _shares(gw, "payroll mail", "bob") == before
        # root sees them: its statistics (and so its scores) change, the proof they are counted.
        assert _shares(gw, "payroll mail", "root")[0] != root_before[0]
        # A tool bob may see changes bob's statistics at once (the cached decisions follow).
        gw.add(_tool("open:payroll", "Payroll export."), handler=lambda: None)
        assert _shares(gw, "payroll mail", "bob")[0] != before[0]


def test_a_tool_that_becomes_unavailable_leaves_the_statistics() -> None:
    with gateway_with(semantic_search=False) as gw:
        gw.add(_tool("open:mail", "Send payroll mail."), handler=lambda: None)
        gw.add(_tool("open:payroll", "Payroll export."), handler=lambda: None)
        gw.add(_tool("open:other", "Read a calendar."), handler=lambda: None)

        def mail_score() -> float:
            hits = gw.search_tools("payroll", agent="bob", mode="lexical")
            return next(h.score for h in hits if h.tool.id == "open:mail")

        both = mail_score()
        entry = gw.registry.get("open:payroll")
        assert entry is not None
        gw.registry.replace(dataclasses.replace(entry, unavailable_reason="no runtime"))
        alone = gw.search_tools("payroll", agent="bob", mode="lexical")
        assert [h.tool.id for h in alone] == ["open:mail"]
        # One of two tools uses "payroll" now, against two of three: a rarer word, more weight.
        assert alone[0].score > both
        gw.registry.replace(entry)
        assert mail_score() == both


def test_kept_decisions_rank_as_decisions_made_afresh_after_many_changes() -> None:
    # The visibility kept per scope is brought up to date from the log of changed slots; after
    # random adds, replacements (visibility flips) and removals it must equal deciding anew.
    words = ["send", "mail", "read", "file", "list", "folder", "play", "music", "stop"]
    rng = random.Random(7)
    registry = Registry()

    def entry(i: int) -> RegisteredTool:
        hidden = rng.random() < 0.4
        return RegisteredTool(
            Tool(
                id=f"{'secret' if hidden else 'open'}{i % 3}:tool_{i:03d}",
                description=" ".join(rng.sample(words, 3)),
                input_schema={},
            ),
            binding=None,
        )

    def visible(e: RegisteredTool) -> bool:
        return e.tool.id.startswith("open")

    ids: dict[int, str] = {}
    for i in range(40):
        registry.add(e := entry(i))
        ids[i] = e.tool.id
    index = ToolIndex(registry, semantic=False)
    scope = ("bob", object())
    for step in range(200):
        i = rng.randrange(50)
        if i in ids and rng.random() < 0.4:
            registry.remove(ids.pop(i))
        else:
            if i in ids:
                registry.remove(ids.pop(i))
            registry.add(e := entry(i))
            ids[i] = e.tool.id
        if step % 5 == 0:
            for query in ("send mail", "read file", "play music"):
                kept = index.search(query, allowed=visible, scope=scope, limit=20)
                fresh = index.search(query, allowed=visible, limit=20)
                assert [(h.tool.id, h.score, h.terms) for h in kept] == [
                    (h.tool.id, h.score, h.terms) for h in fresh
                ]


def test_a_new_version_of_the_policies_decides_every_tool_again() -> None:
    registry = Registry()
    registry.add(RegisteredTool(_tool("a:mail", "payroll mail"), binding=None))
    registry.add(RegisteredTool(_tool("b:mail", "payroll mail"), binding=None))
    registry.add(RegisteredTool(_tool("b:other", "calendar"), binding=None))
    index = ToolIndex(registry, semantic=False)
    only_a = index.search(
        "payroll", allowed=lambda e: e.tool.namespace == "a", scope=("bob", v1 := object())
    )
    # Same key, same version object: the kept decisions stand (even were allowed to differ).
    same = index.search("payroll", allowed=lambda e: True, scope=("bob", v1))
    assert [h.score for h in same] == [h.score for h in only_a]
    # A new version (the policies changed): decided again, b's tools now count.
    everything = index.search("payroll", allowed=lambda e: True, scope=("bob", object()))
    assert len(everything) == 2
    assert everything[0].score != only_a[0].score


def test_a_huge_description_is_indexed_to_a_bound_and_the_name_still_counts() -> None:
    description = " ".join(f"word{i}" for i in range(400_000))  # ~4 MB
    tool = Tool(id="big:needle_finder", description=description, input_schema={})
    found = document_terms(tool)
    assert len(found) <= MAX_DOCUMENT_TERMS
    assert found[:6] == ["needl", "finder"] * 3  # the name first, by its weight
    with gateway_with(semantic_search=False) as gw:
        gw.add(tool, handler=lambda: None)
        gw.add(_tool("small:other", "word399999 appears here"), handler=lambda: None)
        assert [h.tool.id for h in gw.search_tools("needle finder")] == ["big:needle_finder"]
        # A word far past the bound is not indexed for the huge tool.
        assert [h.tool.id for h in gw.search_tools("word399999")] == ["small:other"]
