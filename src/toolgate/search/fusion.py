"""Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["RRF_K", "reciprocal_rank_fusion"]

#: The constant of the original paper; it damps the weight of the very first ranks.
RRF_K = 60

K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, k: int = RRF_K
) -> list[tuple[K, float]]:
    """Items of all rankings by ``sum(1 / (k + rank))``, best first; ties keep first-seen order."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])
