"""Tool search over the HTTP API: ``GET /v1/tools/search`` and the ``search_tools`` tool called
with ``POST /v1/tools/toolgate:search_tools/call`` (issue 14)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from http_api_support import LOCAL, auth, call, make_app, make_gateway, problem
from toolgate import Gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    with make_gateway(tmp_path, semantic_search=False) as gw:
        gw.add_search_tool()
        yield gw


@pytest.fixture
def client(gateway: Gateway) -> Iterator[TestClient]:
    with TestClient(make_app(gateway), client=LOCAL) as test_client:
        yield test_client


def search(client: TestClient, agent: str, **params: Any) -> Any:
    return client.get("/v1/tools/search", params=params, headers=auth(agent))


def test_search_returns_ranked_definitions(client: TestClient) -> None:
    response = search(client, "alice", q="add two numbers", limit=3)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["query"] == "add two numbers" and body["mode"] == "lexical"
    first = body["tools"][0]
    assert first["id"] == "t:add" and first["rank"] == 1 and first["provider_name"] == "t__add"
    assert first["input_schema"]["required"] == ["a", "b"]
    assert first["score"] > 0 and first["lexical_rank"] == 1 and first["semantic_rank"] is None
    assert len(body["tools"]) <= 3


def test_prompt_examples_are_searched(client: TestClient) -> None:
    # "tell Ada hi" is t:send's prompt example, in no other field.
    body = search(client, "bob", q="tell Ada hi").json()
    assert body["tools"][0]["id"] == "t:send"


def test_an_agent_never_finds_a_tool_it_may_not_call(client: TestClient) -> None:
    alice = [t["id"] for t in search(client, "alice", q="payroll").json()["tools"]]
    bob = [t["id"] for t in search(client, "bob", q="payroll").json()["tools"]]
    assert alice == ["t:payroll"] and bob == []


def test_unavailable_tools_are_left_out(client: TestClient) -> None:
    # The GitHub capability is not connected: its tools are unavailable.
    listed = client.get("/v1/tools", headers=auth("ops")).json()["tools"]
    unavailable = [t for t in listed if not t["available"]]
    assert unavailable
    found = search(client, "ops", q=unavailable[0]["title"], limit=100).json()["tools"]
    assert unavailable[0]["id"] not in {t["id"] for t in found}


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"q": ""}, "q", "is empty"),
        ({"q": "\x00\x07 \u200b"}, "q", "is empty"),
        # The test client refuses URLs over 64 KiB; a 100 KB query goes in a POST below.
        ({"q": "x" * 60_000}, "q", "at most 2,000"),
        ({"q": "add", "limit": 0}, "limit", "between 1 and 100"),
        ({"q": "add", "limit": 10**9}, "limit", "between 1 and 100"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(
    client: TestClient, params: dict[str, Any], field: str, words: str
) -> None:
    body = problem(search(client, "alice", **params), 422, "invalid_arguments")
    assert body["field"] == field and words in body["detail"]


def test_a_missing_q_or_a_bad_mode_is_a_422(client: TestClient) -> None:
    response = client.get("/v1/tools/search", headers=auth("alice"))
    missing = problem(response, 422, "invalid_request")
    assert missing["errors"][0]["pointer"] == "/q"
    mode = problem(search(client, "alice", q="add", mode="psychic"), 422, "invalid_request")
    assert mode["errors"][0]["pointer"] == "/mode"


def test_another_script_gives_a_sane_empty_result(client: TestClient) -> None:
    response = search(client, "alice", q="足し算をする")
    assert response.status_code == 200 and response.json()["tools"] == []


def test_the_search_tool_is_callable_over_http(client: TestClient) -> None:
    response = call(client, "alice", "toolgate:search_tools", query="add two numbers", limit=2)
    assert response.status_code == 200, response.text
    outcome = response.json()
    assert outcome["status"] == "ok", outcome
    found = outcome["content"]["tools"]
    assert found[0]["name"] == "t__add" and found[0]["input_schema"]["required"] == ["a", "b"]
    assert all(tool["id"] != "toolgate:search_tools" for tool in found)
    hidden = call(client, "bob", "toolgate:search_tools", query="payroll").json()
    assert hidden["content"]["tools"] == []
    bad = call(client, "bob", "toolgate:search_tools", query="   ").json()
    assert bad["status"] == "error" and "query: is empty" in bad["message"]
    huge = call(client, "bob", "toolgate:search_tools", query="y" * 100_000).json()
    assert huge["status"] == "error" and huge["code"] == "invalid_arguments"
    assert "query" in huge["message"]
    many = call(client, "bob", "toolgate:search_tools", query="add", limit=10**9).json()
    assert many["code"] == "invalid_arguments" and "limit" in many["message"]


def test_explain_says_why_each_tool_ranked(client: TestClient) -> None:
    body = search(client, "alice", q="add two numbers", limit=2, explain="true").json()
    first = body["tools"][0]
    assert first["id"] == "t:add"
    why = first["explain"]
    assert {share["term"] for share in why["terms"]} >= {"add"}
    assert why["lexical_score"] == pytest.approx(first["score"])
    assert why["semantic_score"] is None and why["example"] is None
    assert sum(share["share"] for share in why["terms"]) == pytest.approx(first["score"], abs=1e-3)
    assert "BM25" in why["formula"]
    plain = search(client, "alice", q="add two numbers", limit=2).json()
    assert "explain" not in plain["tools"][0] or plain["tools"][0]["explain"] is None
