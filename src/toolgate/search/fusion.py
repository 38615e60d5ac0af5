"""Fusing the lexical and the semantic ranking.

Fused search adds to each tool's cosine similarity a share of its BM25 score, normalized by the
query's best BM25 score: ``similarity + LEXICAL_WEIGHT * bm25 / max(bm25)``. Semantic similarity
leads (it understands requests that share no word with the tool), and the words a request
shares with a tool's name and description decide between tools that mean about the same. Every
visible tool has a similarity, so a fused search always fills its ``limit``.

Reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009), the first release's fusion,
stays for comparison: it ignores how far apart the scores are, so a weak lexical match ranked
first lifted a tool over a far better semantic match. Measured on both evaluation sets
(bench/search/rankers.py, the fine-tuned encoder): top-1 0.675 with RRF against 0.812 with
score fusion on the project's set, 0.675 against 0.849 on the held-out set.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["LEXICAL_WEIGHT", "RRF_K", "fuse_scores", "reciprocal_rank_fusion"]

#: The share of the normalized BM25 score added to the similarity (0.02-0.5 tried,
#: bench/search/rankers_result.txt): with the fine-tuned encoder 0.1, the largest share that
#: keeps fused top-1 at or above semantic top-1 on both evaluation sets (0.15 scored 0.006 MRR
#: more on the project's set, within training noise, and fell one request below semantic on the
#: held-out set); 0.2 with the general-purpose encoder.
LEXICAL_WEIGHT = 0.1

#: The constant of the original paper; it damps the weight of the very first ranks.
RRF_K = 60

K = TypeVar("K", bound=Hashable)


def fuse_scores(
    similarity: npt.NDArray[np.float32],
    bm25: npt.NDArray[np.float32],
    *,
    weight: float = LEXICAL_WEIGHT,
    best: float | None = None,
) -> npt.NDArray[np.float32]:
    """``similarity + weight * bm25 / best`` per tool (the similarity alone when no term
    matched). ``best``: the best BM25 among the tools the caller may see (default: the best of
    ``bm25``); a tool the caller may not see must not change the others' scores."""
    if best is None:
        best = float(bm25.max()) if len(bm25) else 0.0
    fused: npt.NDArray[np.float32] = (
        similarity.copy() if best <= 0.0 else similarity + (weight / best) * bm25
    )
    return fused


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, k: int = RRF_K
) -> list[tuple[K, float]]:
    """Items of all rankings by ``sum(1 / (k + rank))``, best first; ties keep first-seen order."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda pair: -pair[1])
