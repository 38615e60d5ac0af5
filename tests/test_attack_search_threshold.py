"""Review of the retrained encoder and MIN_SIMILARITY 0.3: texts that state the ranking."""

from __future__ import annotations

import inspect

from toolgate.search import hits
from toolgate.search.fusion import LEXICAL_WEIGHT
from toolgate.serve.api.models import SearchHitView


def test_the_http_api_states_the_lexical_share_fused_search_uses() -> None:
    # The OpenAPI description of a hit's score said "0.2 * BM25" while fusion adds 0.1.
    description = SearchHitView.model_fields["score"].description or ""
    assert f"{LEXICAL_WEIGHT} * BM25" in description
    assert "0.2 * BM25" not in description or LEXICAL_WEIGHT == 0.2


def test_search_hit_documents_the_lexical_share_fused_search_uses() -> None:
    source = inspect.getsource(hits.SearchHit)
    assert f"{LEXICAL_WEIGHT} * BM25" in source
