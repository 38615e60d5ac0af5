"""Lexical ranking: BM25 over the tools' search terms, kept as an inverted index that takes one
document at a time.

Release 1 indexed with the ``bm25s`` library, which precomputes every (term, document) score
into a sparse matrix: fast to query, but the whole matrix is rebuilt for any change (1.7 s at
10,000 tools), and its scores depend on every document (IDF, average length), so a new tool
cannot be patched in. Here each term keeps its postings (document, term frequency) and BM25 is
computed for the query's terms only, at query time, with the current document count and average
length: adding or removing a tool touches only its own terms' postings (well under a
millisecond), and a query still reads only the postings of its terms (bench/search_bench.py
measures both at 10,000 tools). The formula is bm25s's default (Lucene's: ``idf = ln(1 + (N -
df + 0.5) / (df + 0.5))``, ``tf / (tf + k1 * (1 - b + b * length / average))``, k1 = 1.5,
b = 0.75), so rankings are unchanged; a test checks the scores against bm25s.

The statistics (document count, each term's document frequency, average length) may be counted
over a subset of the documents, ``visible``: the tools one caller may see. Counted over every
tool, a visible tool's score told the caller how many tools it may not see use a word (the IDF of
"payroll" falls as hidden payroll tools are added). The subset costs one count over the query
terms' postings, not a pass over the documents.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["K1", "MAX_QUERY_TERMS", "B", "LexicalIndex"]

#: A query's distinct terms beyond this add nothing but work.
MAX_QUERY_TERMS = 64
#: BM25's term-frequency saturation and length normalization (bm25s's and Lucene's defaults).
K1 = 1.5
B = 0.75


class LexicalIndex:
    """BM25 over documents (lists of terms) in numbered slots; slots are added and removed one at
    a time. Not thread-safe: the owner serializes changes and queries."""

    def __init__(self) -> None:
        import numpy as np

        self._postings: dict[str, dict[int, int]] = {}
        """term -> {slot: term frequency}"""
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]] = {}
        """term -> its postings as arrays, built on first query after a change"""
        self._documents: dict[int, dict[str, int]] = {}
        self._lengths = np.zeros(64, dtype=np.float32)
        self._total = 0
        self._size = 0

    @property
    def size(self) -> int:
        """One past the highest slot ever used."""
        return self._size

    def add(self, slot: int, document: Sequence[str]) -> None:
        """Index ``document`` in the free ``slot``."""
        import numpy as np

        if slot in self._documents:
            raise ValueError(f"slot {slot} is taken")
        counts: dict[str, int] = {}
        for term in document:
            counts[term] = counts.get(term, 0) + 1
        self._documents[slot] = counts
        if slot >= len(self._lengths):
            grown = np.zeros(max(slot + 1, 2 * len(self._lengths)), dtype=np.float32)
            grown[: len(self._lengths)] = self._lengths
            self._lengths = grown
        self._lengths[slot] = len(document)
        self._size = max(self._size, slot + 1)
        self._total += len(document)
        for term, count in counts.items():
            self._postings.setdefault(term, {})[slot] = count
            self._arrays.pop(term, None)

    def remove(self, slot: int) -> None:
        """Forget the document in ``slot`` (the slot may be reused)."""
        counts = self._documents.pop(slot)
        self._total -= int(self._lengths[slot])
        self._lengths[slot] = 0
        for term in counts:
            postings = self._postings[term]
            del postings[slot]
            if not postings:
                del self._postings[term]
            self._arrays.pop(term, None)

    def terms_of(self, slot: int) -> dict[str, int]:
        """The document's terms with their frequencies."""
        return self._documents[slot]

    def _postings_of(
        self, term: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]] | None:
        import numpy as np

        cached = self._arrays.get(term)
        if cached is None:
            postings = self._postings.get(term)
            if postings is None:
                return None
            slots = np.fromiter(postings.keys(), dtype=np.int64, count=len(postings))
            counts = np.fromiter(postings.values(), dtype=np.float32, count=len(postings))
            cached = self._arrays[term] = (slots, counts)
        return cached

    def _statistics(self, visible: npt.NDArray[np.bool_] | None) -> tuple[int, float]:
        """The document count and average length, over ``visible`` slots (``None``: all)."""
        import numpy as np

        if visible is None:
            documents = len(self._documents)
            return documents, (self._total / documents if documents else 0.0) or 1.0
        width = min(len(visible), len(self._lengths))
        shown = visible[:width]
        documents = int(np.count_nonzero(shown))
        total = float(self._lengths[:width][shown].sum())
        return documents, (total / documents if documents else 0.0) or 1.0

    def _frequency(
        self, slots: npt.NDArray[np.int64], visible: npt.NDArray[np.bool_] | None
    ) -> int:
        """How many of ``slots`` (a term's postings) count: all, or the ``visible`` ones."""
        import numpy as np

        if visible is None:
            return len(slots)
        inside = slots[slots < len(visible)]
        return int(np.count_nonzero(visible[inside]))

    def explain(
        self,
        query_terms: Sequence[str],
        slot: int,
        visible: npt.NDArray[np.bool_] | None = None,
    ) -> list[tuple[str, float]]:
        """The query terms found in the document in ``slot``, each with its BM25 contribution
        (statistics over the ``visible`` slots, as :meth:`scores`), largest first."""
        return self.shares(query_terms, [slot], visible)[0]

    def shares(
        self,
        query_terms: Sequence[str],
        slots: Sequence[int],
        visible: npt.NDArray[np.bool_] | None = None,
    ) -> list[list[tuple[str, float]]]:
        """:meth:`explain` for each of ``slots``, the statistics counted once."""
        import math

        documents, average = self._statistics(visible)
        idf: dict[str, float] = {}
        found: list[list[tuple[str, float]]] = []
        for slot in slots:
            counts = self._documents.get(slot)
            if not documents or counts is None:
                found.append([])
                continue
            norm = K1 * (1.0 - B + B * float(self._lengths[slot]) / average)
            mine: list[tuple[str, float]] = []
            for term in list(dict.fromkeys(query_terms))[:MAX_QUERY_TERMS]:
                count = counts.get(term)
                if count is None:
                    continue
                if term not in idf:
                    postings = self._postings_of(term)
                    assert postings is not None
                    df = self._frequency(postings[0], visible)
                    idf[term] = math.log(1.0 + (documents - df + 0.5) / (df + 0.5))
                mine.append((term, idf[term] * count / (count + norm)))
            found.append(sorted(mine, key=lambda pair: -pair[1]))
        return found

    def scores(
        self,
        query_terms: Sequence[str],
        size: int | None = None,
        visible: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.float32]:
        """One BM25 score per slot (0 where no term matches, and for empty slots).

        ``visible``: a mask over the slots; the statistics are counted over those documents only
        and the others score 0, so a document outside it cannot change a score inside it.
        """
        import numpy as np

        size = self.size if size is None else size
        total = np.zeros(size, dtype=np.float32)
        documents, average = self._statistics(visible)
        if not documents:
            return total
        for term in list(dict.fromkeys(query_terms))[:MAX_QUERY_TERMS]:
            postings = self._postings_of(term)
            if postings is None:
                continue
            slots, counts = postings
            df = self._frequency(slots, visible)
            if not df:
                continue
            idf = np.log(1.0 + (documents - df + 0.5) / (df + 0.5))
            norm = K1 * (1.0 - B + B * self._lengths[slots] / average)
            inside = slots < size
            total[slots[inside]] += (idf * counts / (counts + norm)).astype(np.float32)[inside]
        if visible is not None:
            width = min(size, len(visible))
            total[:width][~visible[:width]] = 0.0
            total[width:] = 0.0
        return total


class LexicalRanking:
    """A BM25 index over a fixed list of documents (each a list of terms), in their order."""

    def __init__(self, documents: Sequence[list[str]]) -> None:
        self._index = LexicalIndex()
        for slot, document in enumerate(documents):
            self._index.add(slot, document)
        self._size = len(documents)

    def scores(self, query_terms: Sequence[str]) -> npt.NDArray[np.float32]:
        """One BM25 score per document (0 where no term matches)."""
        return self._index.scores(query_terms, self._size)

    def ranked(self, query_terms: Sequence[str]) -> Iterator[tuple[int, float]]:
        """Documents with a score above 0, best first (ties keep document order), lazily."""
        import numpy as np

        scores = self.scores(query_terms)
        matched = np.flatnonzero(scores > 0)
        order = matched[np.argsort(-scores[matched], kind="stable")]
        for i in order.tolist():
            yield i, float(scores[i])
