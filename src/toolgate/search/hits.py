"""One search result."""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Tool

__all__ = ["SearchHit"]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A tool that matches a search, with how well it matches."""

    tool: Tool
    score: float
    """The ranking score: BM25 for lexical search, reciprocal-rank-fusion score when fused."""
    lexical_rank: int | None = None
    """1-based rank in the lexical ranking (``None``: not among its matches)."""
    semantic_rank: int | None = None
    """1-based rank in the semantic ranking (``None``: not used, or not among its matches)."""
