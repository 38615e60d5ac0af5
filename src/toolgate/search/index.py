"""The search index over a registry's tools, kept in step with it one tool at a time.

Before each search the index compares the registry with what it holds (when the registry's
version moved) and indexes only the tools added, replaced or removed: a hot reload of one folder
or an MCP ``list_changed`` in a catalog of 10,000 tools costs that tool's terms and embedding,
not a rebuild (bench/search_bench.py measures adding one tool at 10,000). Each search filters by
the caller's ``allowed`` predicate (availability, access rules) while it walks the ranking, so
an agent never sees a tool it may not call (a semantic search checks only as much of the
ranking as the results need; lexical and fused searches need every decision, below).

BM25's statistics (how many tools, how many use each word, their average length) are counted
over the caller's own tools, so a tool it may not see changes none of its scores. That needs the
caller's decision on every tool: it is made once per ``scope`` (the gateway's: agent,
credentials' namespaces, policies) and kept, and after a change to the registry only the tools
changed are decided again (a log of the slots each change touched).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..registry import RegisteredTool, Registry
from .fusion import LEXICAL_WEIGHT, fuse_scores
from .hits import Explanation, SearchHit
from .lexical import LexicalIndex
from .query import DEFAULT_LIMIT, check_limit, clean_query
from .semantic import SemanticModel, semantic_available
from .text import document_terms, document_text, summary_text, terms

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from ..model import Tool

__all__ = ["MAX_EXPLAINED_EXAMPLES", "SearchMode", "ToolIndex"]

log = logging.getLogger("toolgate.search")

SearchMode = Literal["lexical", "semantic", "fused"]

#: Below this cosine similarity a tool is not a semantic match: semantic-only search and the
#: catalog filter (``matches_only``) leave it out; fused search ranks every visible tool. On the
#: project's evaluation set the fine-tuned encoder keeps 97.6% of right tools at 0.3 and lets 4.1%
#: of the others through, where the general-purpose one at 0.2 kept 93.5% and let 6.4% through
#: (at 0.2 the fine-tuned one lets 11.6% through: a catalog filter twice as noisy).
MIN_SIMILARITY = 0.3
#: Ranks in each ranking are counted among the caller's tools this far, then reported as None.
RANK_DEPTH = 100
#: Explain looks for the closest prompt example among a tool's first this many (a tool with
#: 3,000 examples cost 4.9 s per explain; ranking reads only the first 256 tokens of its text).
MAX_EXPLAINED_EXAMPLES = 64
#: Slots changed, remembered so that a caller's visibility is brought up to date by deciding
#: only those again; a visibility older than the log is decided anew for every tool.
CHANGE_LOG = 4096
#: Callers' visibilities kept (one per agent and credentials; bounded anyway).
MAX_SCOPES = 256

Scope = tuple[Hashable, object]
"""What a search's ``allowed`` decides: ``(key, version)``. Searches with an equal ``key`` and
the same ``version`` object (compared by identity: the access policies in force) must allow the
same tools while the registry is unchanged."""


@dataclasses.dataclass(slots=True)
class _Visibility:
    version: object
    generation: int
    mask: npt.NDArray[np.bool_]


@dataclasses.dataclass(slots=True)
class _Scored:
    entries: list[RegisteredTool | None]
    lexical: npt.NDArray[np.float32] | None
    similarity: npt.NDArray[np.float32] | None
    alive: npt.NDArray[np.bool_]
    visible: npt.NDArray[np.bool_] | None
    """The caller's tools among the slots (``None``: every tool)."""


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
        self._auto = semantic is None
        self._model_error: str | None = None
        self._registry = registry
        self._model_factory = model
        self._lock = threading.Lock()
        self._version: int | None = None
        self._slots: list[RegisteredTool | None] = []
        self._slot_of: dict[str, int] = {}
        self._free: list[int] = []
        self._lexical = LexicalIndex()
        self._vectors: Any = None  # float32 (capacity, dimensions), one row per slot
        self._alive: Any = None  # bool (capacity,)
        self._example_vectors: dict[str, tuple[Tool, Any]] = {}
        self._generation = 0  # counts the syncs that changed a slot
        self._changes: list[tuple[int, int]] = []  # (generation, slot), the latest CHANGE_LOG
        self._visibility: dict[Hashable, _Visibility] = {}

    @property
    def semantic_error(self) -> str | None:
        """Why the embedding model could not load (search goes on by words only), or ``None``."""
        return self._model_error

    def like(self, registry: Registry) -> ToolIndex:
        """A new index over ``registry`` that ranks exactly as this one (same model, same mode):
        what ``toolgate examples check`` searches with."""
        return ToolIndex(registry, semantic=self.semantic, model=self._model_factory)

    # -- following the registry -------------------------------------------------------------------

    def refresh(self) -> None:
        """Bring the index up to date with the registry now (searches do this themselves)."""
        with self._lock:
            self._sync()

    def _sync(self) -> None:
        import numpy as np

        version = self._registry.version
        if version == self._version:
            return
        entries = tuple(self._registry)
        current = {entry.tool.id: entry for entry in entries}
        touched: list[int] = []
        for tool_id in [tool_id for tool_id in self._slot_of if tool_id not in current]:
            gone = self._slot_of.pop(tool_id)
            self._drop(gone)
            touched.append(gone)
        added: list[tuple[int, RegisteredTool]] = []
        for entry in entries:
            slot = self._slot_of.get(entry.tool.id)
            if slot is not None:
                held = self._slots[slot]
                if held is entry:
                    continue
                touched.append(slot)
                if held is not None and held.tool is entry.tool:
                    self._slots[slot] = entry  # same tool, new binding or availability
                    continue
                self._drop(slot)
            slot = self._free.pop() if self._free else len(self._slots)
            if slot == len(self._slots):
                self._slots.append(entry)
            else:
                self._slots[slot] = entry
            self._slot_of[entry.tool.id] = slot
            self._lexical.add(slot, document_terms(entry.tool))
            added.append((slot, entry))
            touched.append(slot)
        if touched:
            self._generation += 1
            self._changes.extend((self._generation, slot) for slot in touched)
            del self._changes[:-CHANGE_LOG]
        capacity = len(self._slots)
        if self._alive is None or len(self._alive) < capacity:
            alive = np.zeros(max(64, 2 * capacity), dtype=bool)
            if self._alive is not None:
                alive[: len(self._alive)] = self._alive
            self._alive = alive
        for slot, _ in added:
            self._alive[slot] = True
        if self.semantic and added:
            try:
                self._embed(added)
            except BaseException:
                # Not taken in, so the next sync tries them again: taken in without vectors,
                # they would rank with similarity 0 until they changed.
                for slot, entry in added:
                    if self._slot_of.get(entry.tool.id) == slot:
                        del self._slot_of[entry.tool.id]
                        self._drop(slot)
                self._generation += 1
                self._changes.extend((self._generation, slot) for slot, _ in added)
                del self._changes[:-CHANGE_LOG]
                raise
        self._version = version

    def _drop(self, slot: int) -> None:
        self._lexical.remove(slot)
        self._slots[slot] = None
        if self._alive is not None:
            self._alive[slot] = False
        self._free.append(slot)

    def _embed(self, added: list[tuple[int, RegisteredTool]]) -> None:
        """One vector per tool: the mean of its name-and-description embedding and its
        whole-text embedding (bench/search/rankers.py: top-1 0.566 -> 0.641 on the project's
        set against the whole text alone); a dot product with it is the mean similarity."""
        import numpy as np

        model = self._model(required=False)
        if model is None:
            return
        texts = [summary_text(entry.tool) for _, entry in added]
        texts += [document_text(entry.tool) for _, entry in added]
        unique = list(dict.fromkeys(texts))
        encoded = model.encode(unique)
        row = {text: encoded[i] for i, text in enumerate(unique)}
        half = len(added)
        vectors = np.stack(
            [(row[texts[i]] + row[texts[half + i]]) / 2 for i in range(half)]
        ).astype(np.float32)
        capacity = len(self._alive)
        if self._vectors is None or self._vectors.shape[1] != vectors.shape[1]:
            self._vectors = np.zeros((capacity, vectors.shape[1]), dtype=np.float32)
        elif len(self._vectors) < capacity:
            grown = np.zeros((capacity, vectors.shape[1]), dtype=np.float32)
            grown[: len(self._vectors)] = self._vectors
            self._vectors = grown
        self._vectors[[slot for slot, _ in added]] = vectors

    # -- searching ------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        allowed: Callable[[RegisteredTool], bool] | None = None,
        limit: int = DEFAULT_LIMIT,
        mode: SearchMode | None = None,
        matches_only: bool = False,
        scope: Scope | None = None,
    ) -> list[SearchHit]:
        """The tools that best match ``query``, best first, at most ``limit``.

        ``allowed`` keeps only the tools the caller may see (the gateway passes availability and
        the agent's access rules); it may be called under the index's lock, so it must not
        search or refresh this index. ``mode``: ``lexical`` (tools sharing a term with the
        request), ``semantic`` (tools similar enough) or ``fused`` (every visible tool, so
        ``limit`` results whenever the caller may see that many); by default fused when
        semantic ranking is on, else lexical. ``matches_only``: fused search keeps only the
        tools that share a term with the request or are similar enough (as lexical and
        semantic search do), for a catalog filter rather than a ranking. ``scope``: names what
        ``allowed`` decides (:data:`Scope`), so that its decisions on every tool, which BM25's
        statistics need, are kept between searches; without it they are made for each search
        (``allowed`` given) or not needed (``None``: every tool counts). Raises
        :class:`~toolgate.errors.SearchQueryError` for an empty or over-long query or a limit
        outside 1-100.
        """
        import numpy as np

        text = clean_query(query)
        limit = check_limit(limit)
        chosen = self._mode(mode)
        keep = _memo(allowed)
        scored = self._score(text, chosen, None if allowed is None else keep, scope)
        lexical, similarity = scored.lexical, scored.similarity
        if chosen == "lexical":
            assert lexical is not None
            candidates = np.flatnonzero(lexical > 0)
            ranking = lexical
        elif chosen == "semantic":
            assert similarity is not None
            candidates = np.flatnonzero(scored.alive & (similarity >= MIN_SIMILARITY))
            ranking = similarity
        else:
            assert lexical is not None and similarity is not None
            candidates = np.flatnonzero(scored.alive)
            if matches_only:
                candidates = np.flatnonzero(
                    scored.alive & ((lexical > 0) | (similarity >= MIN_SIMILARITY))
                )
            # Normalized by the best BM25 among the caller's tools: with the best of all, a
            # hidden tool matching better lowered the visible tools' scores (and so told the
            # caller that some tool it may not see has the request's words).
            best = _best_visible(lexical, scored.entries, keep)
            ranking = fuse_scores(similarity, lexical, best=best)
        head = max(4 * limit, 64)
        chosen_slots = _take(
            _best_first(candidates, ranking, head, scored.entries), scored.entries, keep, limit
        )
        lexical_rank: dict[int, int] = {}
        similarity_rank: dict[int, int] = {}
        if lexical is not None:
            lexical_rank = _visible_ranks(
                _best_first(np.flatnonzero(lexical > 0), lexical, RANK_DEPTH, scored.entries),
                chosen_slots,
                scored.entries,
                keep,
            )
        if similarity is not None:
            similarity_rank = _visible_ranks(
                _best_first(np.flatnonzero(scored.alive), similarity, RANK_DEPTH, scored.entries),
                chosen_slots,
                scored.entries,
                keep,
            )
        shares: list[list[tuple[str, float]]] = [[] for _ in chosen_slots]
        if lexical is not None:
            # Explain's term shares, counted now over the caller's tools as the scores were.
            with self._lock:
                current = [s for s in chosen_slots if self._slots[s] is scored.entries[s]]
                found = self._lexical.shares(terms(text), current, scored.visible)
            by_slot = dict(zip(current, found, strict=True))
            shares = [by_slot.get(slot, []) for slot in chosen_slots]
        hits = []
        for slot, found_terms in zip(chosen_slots, shares, strict=True):
            entry = scored.entries[slot]
            assert entry is not None
            hits.append(
                SearchHit(
                    tool=entry.tool,
                    score=round(float(ranking[slot]), 6),
                    lexical_rank=lexical_rank.get(slot),
                    semantic_rank=similarity_rank.get(slot),
                    lexical_score=None if lexical is None else round(float(lexical[slot]), 6),
                    semantic_score=(
                        None if similarity is None else round(float(similarity[slot]), 6)
                    ),
                    terms=tuple((term, round(share, 4)) for term, share in found_terms),
                )
            )
        return hits

    def explain(
        self, query: str, hits: Sequence[SearchHit], *, mode: SearchMode | None = None
    ) -> list[Explanation]:
        """Why each of ``hits`` (a search for ``query`` in ``mode``) ranked where it did: the
        request's terms found in the tool with their share of BM25, the similarity, and the
        tool's prompt example closest to the request."""
        import numpy as np

        text = clean_query(query)
        chosen = self._mode(mode)
        query_terms = terms(text)
        vector = None
        if chosen != "lexical":
            vector = self._require_model().encode([text])[0]
        explained: list[Explanation] = []
        for hit in hits:
            if hit.terms is not None:  # counted at search time, over the caller's tools
                found = hit.terms
            else:
                with self._lock:
                    self._sync()
                    slot = self._slot_of.get(hit.tool.id)
                    found = () if slot is None else tuple(self._lexical.explain(query_terms, slot))
            example = example_similarity = None
            if vector is not None and hit.tool.display.examples:
                examples = self._examples_of(hit.tool)
                similarities = examples @ vector
                best = int(np.argmax(similarities))
                example = hit.tool.display.examples[:MAX_EXPLAINED_EXAMPLES][best]
                example_similarity = round(float(similarities[best]), 4)
            formula = {
                "lexical": "BM25: the sum of the terms' shares",
                "semantic": "similarity",
                "fused": f"similarity + {LEXICAL_WEIGHT} * BM25 / (best BM25 of your tools for "
                "this request)",
            }[chosen]
            explained.append(
                Explanation(
                    tool_id=hit.tool.id,
                    terms=tuple((term, round(share, 4)) for term, share in found),
                    lexical_score=hit.lexical_score,
                    semantic_score=hit.semantic_score,
                    example=example,
                    example_similarity=example_similarity,
                    score=hit.score,
                    formula=formula,
                )
            )
        return explained

    def _examples_of(self, tool: Tool) -> Any:
        cached = self._example_vectors.get(tool.id)
        if cached is None or cached[0] is not tool:
            if len(self._example_vectors) >= 1024:
                self._example_vectors.clear()
            examples = list(tool.display.examples[:MAX_EXPLAINED_EXAMPLES])
            cached = (tool, self._require_model().encode(examples))
            self._example_vectors[tool.id] = cached
        return cached[1]

    def _mode(self, mode: SearchMode | None) -> SearchMode:
        chosen: SearchMode = mode or ("fused" if self.semantic else "lexical")
        if chosen not in ("lexical", "semantic", "fused"):
            raise ValueError(f"mode: expected lexical, semantic or fused, not {chosen!r}")
        if chosen != "lexical" and not self.semantic:
            raise RuntimeError(
                semantic_available() or self._model_error or "semantic ranking is turned off"
            )
        if chosen != "lexical" and self._model(required=mode is not None) is None:
            return "lexical"
        return chosen

    def _model(self, *, required: bool) -> SemanticModel | None:
        """The embedding model. One that cannot load (a file missing or not the one tested) is
        not tried again; when semantic ranking was on only by default, and ``required`` is
        false, search goes on by words only, with a warning. Else ``RuntimeError`` says why."""
        if self._model_error is None:
            try:
                return self._model_factory()
            except RuntimeError as error:
                self._model_error = str(error)
                if self._auto:
                    self.semantic = False
                    log.warning("semantic search is off, searching by words only: %s", error)
        if required or not self._auto:
            raise RuntimeError(self._model_error)
        return None

    def _require_model(self) -> SemanticModel:
        model = self._model(required=True)
        assert model is not None
        return model

    def _score(
        self,
        text: str,
        chosen: SearchMode,
        keep: Callable[[RegisteredTool], bool] | None,
        scope: Scope | None,
    ) -> _Scored:
        import numpy as np

        vector = None
        if chosen != "lexical":
            vector = self._require_model().encode([text])[0]  # outside the lock: the slow part
        with self._lock:
            self._sync()
            size = len(self._slots)
            alive = np.zeros(0, dtype=bool) if self._alive is None else self._alive[:size].copy()
            visible = None
            lexical = None
            if chosen != "semantic":
                visible = None if keep is None else self._visible(keep, scope, size)
                lexical = self._lexical.scores(terms(text), size, visible)
            similarity = None
            if vector is not None:
                if self._vectors is None:
                    similarity = np.zeros(size, dtype=np.float32)
                else:
                    similarity = self._vectors[:size] @ vector
                    similarity[~alive] = -np.inf
            return _Scored(list(self._slots), lexical, similarity, alive, visible)

    def _visible(
        self, keep: Callable[[RegisteredTool], bool], scope: Scope | None, size: int
    ) -> npt.NDArray[np.bool_]:
        """The caller's tools among the first ``size`` slots (under the lock): kept per scope,
        and brought up to date by deciding again only the slots changed since."""
        import numpy as np

        slots = self._slots
        known = None if scope is None else self._visibility.get(scope[0])
        if (
            scope is not None
            and known is not None
            and known.version is scope[1]
            and len(known.mask) >= size
        ):
            # The log's oldest generation may have lost slots to the bound: only the ones after
            # it are whole.
            oldest = self._changes[0][0] if self._changes else 0
            if known.generation == self._generation or known.generation >= oldest:
                for generation, slot in reversed(self._changes):
                    if generation <= known.generation:
                        break
                    entry = slots[slot]
                    known.mask[slot] = entry is not None and keep(entry)
                known.generation = self._generation
                return known.mask[:size]
        mask = np.zeros(max(64, 2 * size), dtype=bool)
        for slot, entry in enumerate(slots):
            mask[slot] = entry is not None and keep(entry)
        if scope is not None:
            if len(self._visibility) >= MAX_SCOPES:
                self._visibility.clear()
            self._visibility[scope[0]] = _Visibility(scope[1], self._generation, mask)
        return mask[:size]


def _best_first(
    candidates: Any, scores: Any, head: int, entries: list[RegisteredTool | None]
) -> Iterator[int]:
    """``candidates`` (slots) by ``scores``, best first, ties by tool id, lazily: the best
    ``head`` (and every tool tied with the last of them) are picked by partition and sorted
    first, then the next twice as many, only as far as the walk gets (a full sort of 10,000
    scores per query was half of the ranking's time). Ties go by tool id, not slot: slots are
    reused as tools come and go, so an index changed many times ranked ties otherwise than one
    built fresh, and answered other tools at the same limit."""
    import numpy as np

    def ordered(part: Any) -> list[int]:
        slots: list[int] = part.tolist()
        values: list[float] = scores[part].tolist()
        keyed = sorted(
            zip(values, slots, strict=True),
            key=lambda pair: (-pair[0], _tool_id(entries[pair[1]])),
        )
        return [slot for _, slot in keyed]

    rest = candidates
    while len(rest) > head:
        negated = -scores[rest]
        bound = np.partition(negated, head - 1)[head - 1]
        top = negated <= bound
        yield from ordered(rest[top])
        rest = rest[~top]
        head *= 2
    yield from ordered(rest)


def _tool_id(entry: RegisteredTool | None) -> str:
    return "" if entry is None else entry.tool.id


def _best_visible(
    scores: Any, entries: list[RegisteredTool | None], keep: Callable[[RegisteredTool], bool]
) -> float:
    """The best of ``scores`` among the slots the caller may see (0 when none scores)."""
    import numpy as np

    for slot in _best_first(np.flatnonzero(scores > 0), scores, 64, entries):
        entry = entries[slot]
        if entry is not None and keep(entry):
            return float(scores[slot])
    return 0.0


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
    order: Iterable[int],
    entries: list[RegisteredTool | None],
    keep: Callable[[RegisteredTool], bool],
    limit: int,
) -> list[int]:
    taken: list[int] = []
    for slot in order:
        entry = entries[slot]
        if entry is not None and keep(entry):
            taken.append(slot)
            if len(taken) == limit:
                break
    return taken


def _visible_ranks(
    order: Iterator[int],
    wanted: list[int],
    entries: list[RegisteredTool | None],
    keep: Callable[[RegisteredTool], bool],
) -> dict[int, int]:
    """The 1-based rank of each ``wanted`` slot in ``order`` counting only the caller's tools,
    for the first :data:`RANK_DEPTH` of them."""
    missing = set(wanted)
    ranks: dict[int, int] = {}
    rank = 0
    for slot in itertools.islice(order, RANK_DEPTH * 4):
        entry = entries[slot]
        if entry is None or not keep(entry):
            continue
        rank += 1
        if slot in missing:
            ranks[slot] = rank
            missing.discard(slot)
            if not missing:
                break
        if rank >= RANK_DEPTH:
            break
    return ranks
