"""The search index over a registry's tools, kept in step with it.

The registry tells the index of every add, replace and remove; the next search rebuilds what
changed before it ranks, so a tool loaded by a hot reload or an MCP ``list_changed`` is found at
once and a removed one is gone at once. Each search filters by the caller's ``allowed`` predicate
(availability, access rules) while it walks the ranking, so an agent never sees a tool it may not
call, and only as much of the ranking is checked as the results need.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..model import Tool
from ..registry import RegisteredTool, Registry
from .fusion import reciprocal_rank_fusion
from .hits import SearchHit
from .lexical import LexicalRanking
from .query import DEFAULT_LIMIT, check_limit, clean_query
from .semantic import SemanticModel, semantic_available
from .text import document_terms, document_text, terms

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["SearchMode", "ToolIndex"]

SearchMode = Literal["lexical", "semantic", "fused"]

#: How deep each ranking is read before fusing (fusion needs more than the results shown).
FUSION_DEPTH = 50
#: Below this cosine similarity a tool is not a semantic match (unrelated text scores ~0-0.15).
MIN_SIMILARITY = 0.2


@dataclass(frozen=True, slots=True)
class _Snapshot:
    version: int
    entries: tuple[RegisteredTool, ...]
    lexical: LexicalRanking
    vectors: npt.NDArray[np.float32] | None


class ToolIndex:
    """Ranks a registry's tools for a query; see :meth:`search`."""

    def __init__(
        self,
        registry: Registry,
        *,
        semantic: bool | None = None,
        model: Callable[[], SemanticModel] = SemanticModel.shared,
    ) -> None:
        """
        Args:
            registry: The tools to search; followed as it changes.
            semantic: Rank by embeddings too and fuse. ``None``: when ``toolgate[search]`` is
                installed. ``True`` without the extra raises ``RuntimeError`` saying so.
            model: Where the embedding model comes from (loaded on first use).
        """
        reason = semantic_available()
        if semantic and reason is not None:
            raise RuntimeError(reason)
        self.semantic = reason is None if semantic is None else semantic
        """Whether searches rank by embeddings too (and fuse)."""
        self._registry = registry
        self._model_factory = model
        self._lock = threading.Lock()
        self._snapshot: _Snapshot | None = None
        self._terms: dict[str, tuple[Tool, list[str]]] = {}
        self._vectors: dict[str, Any] = {}

    # -- building -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the index up to date with the registry now (searches do this themselves)."""
        self._current()

    def _current(self) -> _Snapshot:
        snapshot = self._snapshot
        if snapshot is not None and snapshot.version == self._registry.version:
            return snapshot
        with self._lock:
            snapshot = self._snapshot
            version = self._registry.version
            if snapshot is None or snapshot.version != version:
                snapshot = self._build(version, tuple(self._registry))
                self._snapshot = snapshot
            return snapshot

    def _build(self, version: int, entries: tuple[RegisteredTool, ...]) -> _Snapshot:
        documents: list[list[str]] = []
        kept: dict[str, tuple[Tool, list[str]]] = {}
        for entry in entries:
            cached = self._terms.get(entry.tool.id)
            if cached is None or cached[0] is not entry.tool:
                cached = (entry.tool, document_terms(entry.tool))
            kept[entry.tool.id] = cached
            documents.append(cached[1])
        self._terms = kept
        vectors = self._embed(entries) if self.semantic else None
        return _Snapshot(version, entries, LexicalRanking(documents), vectors)

    def _embed(self, entries: tuple[RegisteredTool, ...]) -> npt.NDArray[np.float32]:
        import numpy as np

        texts = [document_text(entry.tool) for entry in entries]
        missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
        if missing:
            for text, vector in zip(missing, self._model_factory().encode(missing), strict=True):
                self._vectors[text] = vector
        self._vectors = {text: self._vectors[text] for text in texts}
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return np.stack([self._vectors[text] for text in texts])

    # -- searching ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        allowed: Callable[[RegisteredTool], bool] | None = None,
        limit: int = DEFAULT_LIMIT,
        mode: SearchMode | None = None,
    ) -> list[SearchHit]:
        """The tools that best match ``query``, best first, at most ``limit``.

        ``allowed`` keeps only the tools the caller may see (the gateway passes availability and
        the agent's access rules). ``mode``: ``lexical``, ``semantic`` or ``fused``; by default
        fused when semantic ranking is on, else lexical. Raises
        :class:`~toolgate.errors.SearchQueryError` for an empty or over-long query or a limit
        outside 1-100.
        """
        text = clean_query(query)
        limit = check_limit(limit)
        chosen: SearchMode = mode or ("fused" if self.semantic else "lexical")
        if chosen != "lexical" and not self.semantic:
            raise RuntimeError(semantic_available() or "semantic ranking is turned off")
        snapshot = self._current()
        keep = _memo(allowed)
        depth = limit if chosen != "fused" else max(limit, FUSION_DEPTH)
        lexical: list[tuple[int, float]] = []
        semantic: list[tuple[int, float]] = []
        if chosen != "semantic":
            ranked = snapshot.lexical.ranked(terms(text))
            lexical = _take(ranked, snapshot.entries, keep, depth)
        if chosen != "lexical":
            semantic = _take(self._similar(snapshot, text), snapshot.entries, keep, depth)
        if chosen == "lexical":
            return [_hit(snapshot, i, score, lexical_rank=r) for r, (i, score) in _ranks(lexical)]
        if chosen == "semantic":
            return [_hit(snapshot, i, score, semantic_rank=r) for r, (i, score) in _ranks(semantic)]
        lexical_rank = {i: rank for rank, (i, _) in _ranks(lexical)}
        semantic_rank = {i: rank for rank, (i, _) in _ranks(semantic)}
        fused = reciprocal_rank_fusion([[i for i, _ in lexical], [i for i, _ in semantic]])
        return [
            _hit(
                snapshot,
                i,
                score,
                lexical_rank=lexical_rank.get(i),
                semantic_rank=semantic_rank.get(i),
            )
            for i, score in fused[:limit]
        ]

    def _similar(self, snapshot: _Snapshot, text: str) -> Iterator[tuple[int, float]]:
        import numpy as np

        if snapshot.vectors is None or not len(snapshot.entries):
            return
        query = self._model_factory().encode([text])[0]
        similarity = snapshot.vectors @ query
        order = np.argsort(-similarity, kind="stable")
        for i in order:
            score = float(similarity[i])
            if score < MIN_SIMILARITY:
                return
            yield int(i), score


def _memo(allowed: Callable[[RegisteredTool], bool] | None) -> Callable[[RegisteredTool], bool]:
    if allowed is None:
        return lambda entry: True
    seen: dict[str, bool] = {}

    def keep(entry: RegisteredTool) -> bool:
        decision = seen.get(entry.tool.id)
        if decision is None:
            decision = seen[entry.tool.id] = allowed(entry)
        return decision

    return keep


def _take(
    ranked: Iterable[tuple[int, float]],
    entries: tuple[RegisteredTool, ...],
    keep: Callable[[RegisteredTool], bool],
    depth: int,
) -> list[tuple[int, float]]:
    taken: list[tuple[int, float]] = []
    for i, score in ranked:
        if keep(entries[i]):
            taken.append((i, score))
            if len(taken) == depth:
                break
    return taken


def _ranks(ranking: list[tuple[int, float]]) -> Iterator[tuple[int, tuple[int, float]]]:
    return enumerate(ranking, start=1)


def _hit(
    snapshot: _Snapshot,
    i: int,
    score: float,
    *,
    lexical_rank: int | None = None,
    semantic_rank: int | None = None,
) -> SearchHit:
    return SearchHit(
        tool=snapshot.entries[i].tool,
        score=round(score, 6),
        lexical_rank=lexical_rank,
        semantic_rank=semantic_rank,
    )
