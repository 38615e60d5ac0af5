"""Lexical ranking: BM25 over the tools' search terms, with the ``bm25s`` library.

``bm25s`` was measured against ``tantivy`` on 10,000 generated tools (bench/search_bench.py has
the real figures): both answer in well under a millisecond; tantivy builds faster but needs a
commit of ~100 ms per change and parses queries with its own syntax (quotes, ``AND``, ``field:``),
which callers' free text would have to be escaped against. ``bm25s`` takes our own term lists,
so any text is a valid query, and it depends only on NumPy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["LexicalRanking"]

#: A query's distinct terms beyond this add nothing but work.
MAX_QUERY_TERMS = 64


class LexicalRanking:
    """A BM25 index over a fixed list of documents (each a list of terms)."""

    def __init__(self, documents: Sequence[list[str]]) -> None:
        import bm25s  # imported on first search: `import toolgate` stays light

        self._size = len(documents)
        self._bm25: Any = None
        if self._size:
            # An empty document would make bm25s drop it; a placeholder term keeps positions.
            corpus = [terms or ["\0"] for terms in documents]
            self._bm25 = bm25s.BM25()
            self._bm25.index(corpus, show_progress=False)

    def scores(self, query_terms: Sequence[str]) -> npt.NDArray[np.float32]:
        """One BM25 score per document (0 where no term matches)."""
        import numpy as np

        unique = list(dict.fromkeys(query_terms))[:MAX_QUERY_TERMS]
        known = [] if self._bm25 is None else [t for t in unique if t in self._bm25.vocab_dict]
        if not known:
            return np.zeros(self._size, dtype=np.float32)
        result: npt.NDArray[np.float32] = self._bm25.get_scores(known)
        return result

    def ranked(self, query_terms: Sequence[str]) -> Iterator[tuple[int, float]]:
        """Documents with a score above 0, best first (ties keep document order), lazily."""
        import numpy as np

        scores = self.scores(query_terms)
        matched = np.flatnonzero(scores > 0)
        order = matched[np.argsort(-scores[matched], kind="stable")]
        for i in order.tolist():
            yield i, float(scores[i])
