"""One search result, and why it ranked where it did."""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Tool

__all__ = ["Explanation", "SearchHit"]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A tool that matches a search, with how well it matches."""

    tool: Tool
    score: float
    """The ranking score: BM25 for lexical search, the cosine similarity for semantic search,
    ``similarity + 0.1 * BM25 / best BM25 of the caller's tools for the query`` when fused."""
    lexical_rank: int | None = None
    """1-based rank among the caller's tools by BM25 (``None``: no query term in the tool, or not
    ranked: beyond the first 100, or lexical ranking not used)."""
    semantic_rank: int | None = None
    """1-based rank among the caller's tools by similarity (``None``: not used, or beyond the
    first 100)."""
    lexical_score: float | None = None
    """BM25 score (``None``: lexical ranking not used)."""
    semantic_score: float | None = None
    """Cosine similarity of the request and the tool (``None``: semantic ranking not used)."""
    terms: tuple[tuple[str, float], ...] | None = None
    """The request's search terms found in the tool, each with its share of the BM25 score,
    counted over the caller's tools as the score was (``None``: not counted); what
    :meth:`~toolgate.search.index.ToolIndex.explain` reports."""


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a tool ranked where it did (``toolgate tools search --explain``, ``explain=true``)."""

    tool_id: str
    terms: tuple[tuple[str, float], ...]
    """The request's search terms found in the tool, each with its share of the BM25 score,
    largest first (terms are stemmed: "files" is ``fil``)."""
    lexical_score: float | None
    semantic_score: float | None
    """Similarity of the request to the tool: the mean of its similarity to the tool's name and
    description and to its whole text (parameters and examples included)."""
    example: str | None
    """The tool's prompt example most similar to the request (``None``: no examples, or no
    semantic ranking)."""
    example_similarity: float | None
    score: float
    """The final score, as in the hit."""
    formula: str
    """How the score is made of the parts above."""

    def to_dict(self) -> dict[str, object]:
        """The explanation as the CLI's ``--json`` and the API's ``explain`` give it."""
        return {
            "terms": [{"term": term, "share": share} for term, share in self.terms],
            "lexical_score": self.lexical_score,
            "semantic_score": self.semantic_score,
            "example": self.example,
            "example_similarity": self.example_similarity,
            "formula": self.formula,
        }
