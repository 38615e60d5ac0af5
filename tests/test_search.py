"""Tool search through ``Gateway.search_tools``: ranking, following the registry, access rules,
availability, and bad input (issue 14). Lexical ranking only; the semantic ranking has its own
tests in test_search_semantic.py."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from folder_tools import write_tool
from gateway_support import gateway_with
from toolgate import CallStatus, Gateway, SafetySpec, Tool, tool
from toolgate.errors import ErrorCode, SearchQueryError
from toolgate.model.policy import AccessPolicy, PolicyAction, PolicyRule
from toolgate.registry import RegisteredTool
from toolgate.search import index as index_module
from toolgate.search.fusion import LEXICAL_WEIGHT, fuse_scores, reciprocal_rank_fusion
from toolgate.search.lexical import LexicalIndex, LexicalRanking
from toolgate.search.query import MAX_LIMIT, MAX_QUERY_CHARS
from toolgate.search.text import terms


@tool(namespace="fs")
def read_file(path: str) -> str:
    """Read the complete contents of a file from the file system.

    Args:
        path: Path of the file to read.
    """
    return path


@tool(namespace="fs")
def list_directory(path: str) -> list[str]:
    """List the files and folders inside a directory."""
    return [path]


@tool(namespace="time")
def get_current_time(timezone: str) -> str:
    """Get the current time in an IANA timezone such as Europe/Paris."""
    return timezone


@tool(namespace="chat", examples=["ping the team about the outage"])
def post_message(channel: str, text: str) -> str:
    """Post a message to a channel."""
    return text


@tool(namespace="ops", allowed_agents=["alice"])
def restart_service(name: str) -> str:
    """Restart a running service on the production host."""
    return name


@pytest.fixture()
def gateway() -> Iterator[Gateway]:
    gw = gateway_with(semantic_search=False)
    gw.add(read_file, list_directory, get_current_time, post_message, restart_service)
    yield gw
    gw.close()


def ids(gw: Gateway, query: str, **options: object) -> list[str]:
    return [hit.tool.id for hit in gw.search_tools(query, **options)]  # type: ignore[arg-type]


def test_the_best_matching_tool_comes_first(gateway: Gateway) -> None:
    assert ids(gateway, "what time is it in Tokyo")[0] == "time:get_current_time"
    assert ids(gateway, "show me the contents of notes.txt")[0] == "fs:read_file"
    assert ids(gateway, "which files are in my folder")[0] == "fs:list_directory"
    hits = gateway.search_tools("read a file")
    assert hits[0].score > 0 and hits[0].lexical_rank == 1 and hits[0].semantic_rank is None
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_parameter_descriptions_and_prompt_examples_are_searched(gateway: Gateway) -> None:
    # "outage" is only in post_message's prompt example; "IANA" only in a parameter's text.
    assert ids(gateway, "outage") == ["chat:post_message"]
    assert ids(gateway, "timezone")[0] == "time:get_current_time"


def test_a_query_that_matches_nothing_finds_nothing(gateway: Gateway) -> None:
    assert ids(gateway, "quantum chromodynamics lattice") == []
    assert ids(gateway, "the of and") == []  # stop words only


def test_limit_caps_the_results(gateway: Gateway) -> None:
    assert len(ids(gateway, "file directory folder contents", limit=1)) == 1
    assert len(ids(gateway, "file directory folder contents", limit=2)) == 2


def test_a_tool_added_changed_or_removed_is_found_or_gone_at_once(gateway: Gateway) -> None:
    assert ids(gateway, "weather forecast") == []

    @tool(namespace="wx")
    def forecast(city: str) -> str:
        """Weather forecast for a city."""
        return city

    gateway.add(forecast)
    assert ids(gateway, "weather forecast") == ["wx:forecast"]
    entry = gateway.registry.get("wx:forecast")
    assert entry is not None
    changed = dataclasses.replace(entry.tool, description="Tide tables for a harbour.")
    gateway.registry.replace(dataclasses.replace(entry, tool=changed))
    assert ids(gateway, "weather forecast") == ["wx:forecast"]  # its name still says forecast
    assert ids(gateway, "tide tables harbour") == ["wx:forecast"]
    gateway.remove("wx:forecast")
    assert ids(gateway, "tide tables harbour") == []


def test_an_agent_never_sees_a_tool_it_may_not_call(gateway: Gateway) -> None:
    assert "ops:restart_service" in ids(gateway, "restart the service", agent="alice")
    assert "ops:restart_service" not in ids(gateway, "restart the service", agent="bob")
    assert "ops:restart_service" not in ids(gateway, "restart the service")


def test_access_policies_filter_results() -> None:
    policy = AccessPolicy(
        name="no-fs",
        rules=(PolicyRule(when={"tool.namespace": ("fs",)}, action=PolicyAction.DENY),),
    )
    with gateway_with(semantic_search=False, policies=[policy]) as gw:
        gw.add(read_file, get_current_time)
        assert ids(gw, "read the file notes.txt") == []
        assert gw.list_tools() == [gw.get_tool("time:get_current_time")]


def test_unavailable_tools_are_not_offered(gateway: Gateway) -> None:
    entry = gateway.registry.get("fs:read_file")
    assert entry is not None
    gateway.registry.replace(dataclasses.replace(entry, unavailable_reason="no runtime"))
    assert "fs:read_file" not in ids(gateway, "read the file")
    gateway.registry.replace(entry)
    assert ids(gateway, "read the file")[0] == "fs:read_file"


def test_filtering_reads_past_hidden_tools_to_fill_the_limit() -> None:
    with gateway_with(semantic_search=False) as gw:
        for i in range(30):
            gw.add(
                Tool(
                    id=f"hidden:report_{i}",
                    description="Build the sales report.",
                    input_schema={"type": "object"},
                    safety=SafetySpec(allowed_agents=("root",)),
                ),
                handler=lambda: None,
            )
        gw.add(
            Tool(id="open:report", description="Build a report.", input_schema={}),
            handler=lambda: None,
        )
        assert ids(gw, "sales report", agent="bob", limit=5) == ["open:report"]
        assert len(ids(gw, "sales report", agent="root", limit=5)) == 5


@pytest.mark.parametrize(
    ("query", "field", "words"),
    [
        ("", "query", "empty"),
        ("   \t\n ", "query", "empty"),
        ("\x00\x01\x1b\x7f\u200b", "query", "empty"),  # control and format characters
        ("x" * 100_000, "query", f"at most {MAX_QUERY_CHARS:,}"),
        (None, "query", "must be a string"),
    ],
)
def test_bad_queries_are_refused_naming_the_field(
    gateway: Gateway, query: object, field: str, words: str
) -> None:
    with pytest.raises(SearchQueryError) as raised:
        gateway.search_tools(query)  # type: ignore[arg-type]
    assert raised.value.field == field and words in str(raised.value)
    assert raised.value.code is ErrorCode.INVALID_ARGUMENTS
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize("limit", [0, -1, 10**9, MAX_LIMIT + 1, True, 2.5])
def test_bad_limits_are_refused_naming_the_field(gateway: Gateway, limit: object) -> None:
    with pytest.raises(SearchQueryError) as raised:
        gateway.search_tools("read a file", limit=limit)  # type: ignore[arg-type]
    assert raised.value.field == "limit"


def test_odd_but_valid_queries_give_sane_results(gateway: Gateway) -> None:
    assert ids(gateway, "read\x00the\x1bfile")[0] == "fs:read_file"  # control chars are spaces
    assert ids(gateway, "ファイルを読む") == []  # another script: no match, no crash
    assert ids(gateway, "прочитать файл read")[0] == "fs:read_file"
    assert ids(gateway, "x" * MAX_QUERY_CHARS) == []
    assert len(ids(gateway, " ".join(["file"] * 400), limit=MAX_LIMIT)) >= 2


def test_a_search_of_an_empty_gateway_finds_nothing() -> None:
    with gateway_with(semantic_search=False) as gw:
        assert gw.search_tools("anything") == []


def test_terms_split_identifiers_and_stem_lightly() -> None:
    assert terms("listDirectory") == ["list", "directory"]
    assert terms("create_pull_request") == ["creat", "pull", "request"]
    assert terms("Files") == terms("file") == ["fil"]
    assert terms("creating issues") == terms("create issue")


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "c", "a"]])
    assert [item for item, _ in fused] == ["b", "a", "c"]
    assert fused[0][1] == pytest.approx(1 / 62 + 1 / 61)


def test_registered_tool_entries_are_searched_as_the_registry_holds_them(gateway: Gateway) -> None:
    entry = gateway.registry.get("time:get_current_time")
    assert isinstance(entry, RegisteredTool)
    assert gateway.search_tools("timezone")[0].tool is entry.tool


def test_a_hot_reloaded_tool_folder_is_searchable_at_once(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    with gateway_with(semantic_search=False, tool_folders=[tools]) as gw:
        assert gw.search_tools("thumbnail image resize") == []
        write_tool(tools, "thumbnail", "echo '{}'", body="Resize an image into a thumbnail.")
        gw.rescan()
        assert ids(gw, "thumbnail image resize") == ["local:thumbnail"]
        shutil.rmtree(tools / "thumbnail")
        gw.rescan()
        assert gw.search_tools("thumbnail image resize") == []


async def test_a_caller_restricted_to_namespaces_finds_only_their_tools() -> None:
    """What an OAuth token's scopes allow limits the search and the search tool alike."""
    with gateway_with(semantic_search=False) as gateway:
        gateway.add(_note_tool("ops", "status", "Report the operations status"))
        gateway.add(_note_tool("t", "record", "Record a status note"))
        gateway.add_search_tool()
        every = {h.tool.id for h in gateway.search_tools("status note")}
        only_ops = frozenset({"ops"})
        ops = {h.tool.id for h in gateway.search_tools("status note", namespaces=only_ops)}
        called = await gateway.call(
            "toolgate:search_tools", {"query": "status note"}, namespaces=only_ops
        )
    assert every == {"ops:status", "t:record"}
    assert ops == {"ops:status"}
    # The search tool itself is callable whatever the scopes; its answer is filtered by them.
    assert called.status is CallStatus.OK, called.message
    assert [tool["id"] for tool in called.content["tools"]] == ["ops:status"]


def _note_tool(namespace: str, name: str, description: str) -> Any:
    def handler(note: str = "") -> str:
        return note

    handler.__name__ = name
    handler.__doc__ = description
    return tool(namespace=namespace)(handler)


def test_score_fusion_lets_a_strong_semantic_match_beat_a_weak_lexical_one() -> None:
    # Issue 29: with reciprocal rank fusion a tool ranked first by a weak lexical match (one
    # shared word) and last by similarity tied a tool ranked first by similarity.
    similarity = np.array([0.31, 0.78, 0.10], dtype=np.float32)
    bm25 = np.array([2.5, 0.0, 0.4], dtype=np.float32)
    fused = fuse_scores(similarity, bm25)
    assert list(np.argsort(-fused)) == [1, 0, 2]
    assert fused[0] == pytest.approx(0.31 + LEXICAL_WEIGHT)
    # Without a lexical match the similarity alone ranks.
    assert list(fuse_scores(similarity, np.zeros(3, dtype=np.float32))) == list(similarity)


def test_the_incremental_lexical_index_scores_as_a_fresh_build() -> None:
    documents = [terms(text) for text in CORPUS]
    grown = LexicalIndex()
    for slot, document in enumerate(documents):
        grown.add(slot, document)
    grown.add(len(documents), terms("a tool that will be removed again: files files files"))
    grown.remove(len(documents))
    grown.remove(1)
    grown.add(1, documents[1])
    fresh = LexicalRanking(documents)
    for query in ("read a file", "list the folders", "post message channel", "nothing here"):
        assert np.allclose(grown.scores(terms(query), len(documents)), fresh.scores(terms(query)))
    bm25s = pytest.importorskip("bm25s")  # the library release 1 indexed with: same formula
    reference = bm25s.BM25()
    reference.index(documents, show_progress=False)
    query = [t for t in terms("read the file in a folder") if t in reference.vocab_dict]
    assert np.allclose(reference.get_scores(query), fresh.scores(query), atol=1e-5)
    explained = dict(grown.explain(terms("read the file"), 0))
    assert set(explained) == {"read", "fil"}
    assert sum(explained.values()) == pytest.approx(float(grown.scores(terms("read file"))[0]))


CORPUS = [
    "fs:read_file Read the complete contents of a file from the file system.",
    "fs:list_directory List the files and folders inside a directory.",
    "chat:post_message Post a message to a channel.",
    "time:now Get the current time in a timezone.",
]


def test_one_tool_added_or_removed_is_indexed_alone(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 29: a change of one tool re-indexed every tool (1.7 s at 10,000 tools).
    gateway.search_index.refresh()
    indexed: list[str] = []
    real = index_module.document_terms

    def spy(tool_value: Tool) -> list[str]:
        indexed.append(tool_value.id)
        return real(tool_value)

    monkeypatch.setattr(index_module, "document_terms", spy)

    @tool(namespace="wx")
    def tide_tables(harbour: str) -> str:
        """Tide tables for a harbour."""
        return harbour

    gateway.add(tide_tables)
    assert ids(gateway, "tide tables harbour")[0] == "wx:tide_tables"
    assert indexed == ["wx:tide_tables"]
    gateway.registry.remove("wx:tide_tables")
    assert ids(gateway, "tide tables harbour") == []
    assert ids(gateway, "read a file")[0] == "fs:read_file"
    assert indexed == ["wx:tide_tables"]


def test_explain_names_the_matched_terms(gateway: Gateway) -> None:
    hits = gateway.search_tools("read a file")
    (first, *_) = gateway.search_index.explain("read a file", hits)
    assert first.tool_id == "fs:read_file" and first.semantic_score is None
    assert {term for term, _ in first.terms} == {"read", "fil"}
    assert sum(share for _, share in first.terms) == pytest.approx(first.score, abs=1e-3)
    assert first.lexical_score == hits[0].lexical_score == hits[0].score
