"""The ranker study: every ranking variant tried for issue 29, on both evaluation sets.

    python bench/search/rankers.py           # the table (needs toolgate[search])
    python bench/search/rankers.py --json

Scores are computed once per set (BM25 of every tool for every request with each field
weighting; cosine similarity of every request to each tool's text, to its description alone and
to each of its prompt examples) and every variant ranks from them, so the table is cheap to
recompute. Tuned (fusion weight, field weights) on the project's set only; the held-out set's
figures are read, never tuned on.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).parent))

from dataset import HERE, HOLDOUT, Request, load_requests, load_tools

from toolgate import Tool
from toolgate.search import lexical as lexical_module
from toolgate.search.fusion import LEXICAL_WEIGHT as KEPT
from toolgate.search.lexical import LexicalRanking
from toolgate.search.semantic import SemanticModel
from toolgate.search.text import _CAMEL, _STOPWORDS, _WORD, _parameters, document_text, terms

Matrix = npt.NDArray[np.float32]


#: What a request or a tool name asks to do, by its first action word: the second stop's fused
#: search added a small bonus when a request's class was the tool name's ("file a GitHub issue"
#: and create_issue, not get_issue; "open" is a *get*). Kept here, where it is still measured;
#: toolgate dropped it with the fine-tuned encoder (every weight lowered the project set's MRR).
ACTIONS: dict[str, tuple[str, ...]] = {
    "create": (
        "create",
        "add",
        "new",
        "make",
        "insert",
        "generate",
        "draw",
        "start",
        "file",
        "write",
        "post",
    ),
    "get": (
        "get",
        "show",
        "read",
        "fetch",
        "view",
        "display",
        "retrieve",
        "print",
        "load",
        "describe",
        "open",
    ),
    "list": ("list", "which", "enumerate"),
    "search": ("search", "find", "query", "lookup", "look"),
    "update": (
        "update",
        "edit",
        "change",
        "set",
        "modify",
        "rename",
        "move",
        "patch",
        "replace",
        "mark",
        "close",
    ),
    "delete": ("delete", "remove", "drop", "forget", "clear", "erase", "destroy", "unstage"),
    "send": ("send", "reply", "comment", "message", "notify", "email"),
    "run": ("run", "execute", "evaluate", "call", "trigger"),
}
#: A request's or name's action word is looked for in its first this many characters.
MAX_ACTION_CHARS = 2_000
_ACTION_OF = {word: kind for kind, words in ACTIONS.items() for word in words}
_LETTERS = re.compile(r"[A-Za-z]+")


#: Action words that are also what a tool acts on: in a request they lead ("file a bug", "email
#: bob"), in a name they often come first as the object ("file_delete", "message_delete",
#: "email_list", "call_log_get"). In a name a later action word, the verb, wins over them.
NAME_OBJECTS = frozenset({"file", "message", "email", "comment", "call"})


def action(text: str, *, name: bool = False) -> str | None:
    """The class (a key of :data:`ACTIONS`) of the first action word of ``text``, a request or
    (``name``) a tool name ("creates", "created" count as "create"); ``None`` when it has none.
    In a name, a word of :data:`NAME_OBJECTS` counts only when no other action word follows.
    Either way one class, the first verb's: a name of every action word is lifted for one."""
    fallback = None
    for word in _LETTERS.findall(_CAMEL.sub(" ", text[:MAX_ACTION_CHARS])):
        lowered = word.lower()
        stem = lowered[:-2] if lowered.endswith("ed") else lowered.rstrip("s")
        kind = _ACTION_OF.get(lowered) or _ACTION_OF.get(stem)
        if kind is None:
            continue
        if name and (lowered in NAME_OBJECTS or stem in NAME_OBJECTS):
            fallback = fallback or kind
            continue
        return kind
    return fallback


#: Field weights tried: (name, namespace, title, description, parameters, examples).
WEIGHTS: dict[str, tuple[int, int, int, int, int, int]] = {
    "flat 1/1/1/1/1/1": (1, 1, 1, 1, 1, 1),
    "current 3/1/2/1/1/2": (3, 1, 2, 1, 1, 2),
    "name 2, params 1": (2, 1, 2, 1, 1, 2),
    "name 3, ns 2": (3, 2, 2, 1, 1, 2),
    "desc 2": (3, 1, 2, 2, 1, 2),
    "no params": (3, 1, 2, 1, 0, 2),
}


#: BM25's saturation and length normalization tried (k1, b); bm25s's default 1.5 / 0.75 is kept.
BM25_PARAMETERS = ((1.2, 0.75), (2.0, 0.75), (1.2, 0.5), (0.9, 0.4), (1.5, 0.3))


def name_text(tool: Tool) -> str:
    """The tool's id as words (its third vector in the second stop's study)."""
    return tool.id.replace(":", " ").replace("_", " ").replace("-", " ")


def without_stop_words(text: str) -> str:
    """A request without its stop words ("please", "can you"), for embedding."""
    return " ".join(w for w in _WORD.findall(text) if w.lower() not in _STOPWORDS)


def weighted_terms(tool: Tool, w: tuple[int, int, int, int, int, int]) -> list[str]:
    name, namespace, title, description, params, examples = w
    found = terms(tool.name) * name + terms(tool.namespace) * namespace
    if tool.title:
        found += terms(tool.title) * title
    found += terms(tool.description) * description
    for part in _parameters(tool.input_schema):
        found += terms(part) * params
    for example in tool.display.examples:
        found += terms(example) * examples
    return found


def bare_text(tool: Tool) -> str:
    """The tool's text for embedding without its examples."""
    return document_text(_without_examples(tool))


def _without_examples(tool: Tool) -> Tool:
    import dataclasses

    return dataclasses.replace(tool, display=dataclasses.replace(tool.display, examples=()))


def short_text(tool: Tool) -> str:
    """Name and description only (semantic field weighting: parameters left out)."""
    return f"{tool.id.replace(':', ' ').replace('_', ' ')}\n{tool.description}"


def short_params_text(tool: Tool) -> str:
    """Name, description and parameter names (their descriptions left out)."""
    names = [str(n) for n in tool.input_schema.get("properties", {})]
    return short_text(tool) + ("\n" + ", ".join(names) if names else "")


class CachedModel:
    """The model with an on-disk cache of embeddings (``--cache FILE``), for quick reruns."""

    def __init__(self, model: SemanticModel, path: Path | None) -> None:
        self.model, self.path = model, path
        self.cache: dict[str, Matrix] = {}
        if path is not None and path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.cache = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))

    def encode(self, texts: Sequence[str]) -> Matrix:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            self.cache.update(zip(missing, self.model.encode(missing), strict=True))
            if self.path is not None:
                np.savez(
                    self.path,
                    texts=np.array(list(self.cache)),
                    vectors=np.stack(list(self.cache.values())),
                )
        return np.stack([self.cache[t] for t in texts])


@dataclass
class Scores:
    name: str
    requests: list[Request]
    ids: list[str]
    lexical: dict[str, Matrix]
    semantic: dict[str, Matrix]
    action_match: Matrix | None = None
    """1 where the request's action word and the tool name's are of one class."""


def compute(name: str, folder: Path, model: CachedModel) -> Scores:
    tools = load_tools(folder)
    requests = load_requests({t.id for t in tools}, folder)
    queries = [r.text for r in requests]
    lexical: dict[str, Matrix] = {}
    for label, w in WEIGHTS.items():
        index = LexicalRanking([weighted_terms(t, w) for t in tools])
        lexical[label] = np.stack([index.scores(terms(q)) for q in queries])
    current = WEIGHTS["current 3/1/2/1/1/2"]
    for k1, b in BM25_PARAMETERS:
        lexical_module.K1, lexical_module.B = k1, b
        try:
            index = LexicalRanking([weighted_terms(t, current) for t in tools])
            lexical[f"k1={k1} b={b}"] = np.stack([index.scores(terms(q)) for q in queries])
        finally:
            lexical_module.K1, lexical_module.B = 1.5, 0.75
    q = model.encode(queries)
    full = model.encode([document_text(t) for t in tools])
    bare = model.encode([bare_text(t) for t in tools])
    short = model.encode([short_text(t) for t in tools])
    short_params = model.encode([short_params_text(t) for t in tools])
    examples = [(i, e) for i, t in enumerate(tools) for e in t.display.examples]
    names = model.encode([name_text(t) for t in tools])
    q_bare = model.encode([without_stop_words(text) for text in queries])
    mean = (short + full) / 2
    semantic = {
        "0.3 name + description + 0.7 text": q @ (0.3 * short + 0.7 * full).T,
        "0.7 name + description + 0.3 text": q @ (0.7 * short + 0.3 * full).T,
        "mean + 0.2 x similarity to the name alone": q @ mean.T + 0.2 * (q @ names.T),
        "mean, request without stop words": q_bare @ mean.T,
        "one vector (text + examples)": q @ full.T,
        "description only": q @ bare.T,
        "name + description": q @ short.T,
        "name + description + parameter names": q @ short_params.T,
        "mean(name + description, text)": (q @ short.T + q @ full.T) / 2,
    }
    if examples:
        ex = model.encode([e for _, e in examples]) @ q.T  # (examples, queries)
        owner = np.array([i for i, _ in examples])
        best = np.full((len(queries), len(tools)), -1.0, dtype=np.float32)
        np.maximum.at(best.T, owner, ex)
        semantic["max(description, examples)"] = np.maximum(q @ bare.T, best)
        semantic["max(text, examples)"] = np.maximum(q @ full.T, best)
        semantic["max(name + description, examples)"] = np.maximum(q @ short.T, best)
        semantic["max(mean(name + description, text), examples)"] = np.maximum(
            semantic["mean(name + description, text)"], best
        )
    else:  # no tool declares examples: the max over none is the tool's own vector
        semantic["max(description, examples)"] = semantic["description only"]
        semantic["max(text, examples)"] = semantic["one vector (text + examples)"]
        semantic["max(name + description, examples)"] = semantic["name + description"]
        semantic["max(mean(name + description, text), examples)"] = semantic[
            "mean(name + description, text)"
        ]
    tool_actions = [action(t.name, name=True) for t in tools]
    request_actions = [action(text) for text in queries]
    action_match = np.array(
        [[float(a is not None and a == b) for b in tool_actions] for a in request_actions],
        dtype=np.float32,
    )
    return Scores(name, requests, [t.id for t in tools], lexical, semantic, action_match)


def evaluate(scores: Scores, rank: Callable[[int], Sequence[int]]) -> dict[str, float]:
    top1 = top3 = 0
    mrr = 0.0
    for qi, request in enumerate(scores.requests):
        order = rank(qi)[:10]
        pos = next((p for p, i in enumerate(order, 1) if scores.ids[i] in request.labels), None)
        top1 += pos == 1
        top3 += pos is not None and pos <= 3
        mrr += 0.0 if pos is None else 1.0 / pos
    n = len(scores.requests)
    return {"top1": top1 / n, "top3": top3 / n, "mrr": mrr / n}


def by_score(row: Matrix, depth: int = 10) -> list[int]:
    return [int(i) for i in np.argsort(-row, kind="stable")[:depth]]


def lexical_order(row: Matrix) -> list[int]:
    return [i for i in by_score(row) if row[i] > 0]


def rrf(lex: Matrix, sem: Matrix, k: int = 60, w_sem: float = 1.0, floor: float = 0.2) -> Any:
    def rank(qi: int) -> list[int]:
        scores: dict[int, float] = {}
        for r, i in enumerate(lexical_order_deep(lex[qi]), 1):
            scores[i] = scores.get(i, 0.0) + 1.0 / (k + r)
        for r, i in enumerate(by_score(sem[qi], 50), 1):
            if sem[qi][i] < floor:
                break
            scores[i] = scores.get(i, 0.0) + w_sem / (k + r)
        return sorted(scores, key=lambda i: -scores[i])

    return rank


def lexical_order_deep(row: Matrix) -> list[int]:
    return [i for i in by_score(row, 50) if row[i] > 0]


def score_fusion(lex: Matrix, sem: Matrix, alpha: float) -> Any:
    """Semantic similarity plus ``alpha`` times BM25 normalized by the query's best BM25."""

    def rank(qi: int) -> list[int]:
        row = lex[qi]
        top = float(row.max())
        norm = row / top if top > 0 else row
        return by_score(sem[qi] + alpha * norm)

    return rank


def minmax_fusion(lex: Matrix, sem: Matrix, alpha: float) -> Any:
    """Both scores min-max normalized over the query's scores, then mixed."""

    def rank(qi: int) -> list[int]:
        def mm(x: Matrix) -> Matrix:
            lo, hi = float(x.min()), float(x.max())
            return (x - lo) / (hi - lo) if hi > lo else x * 0

        return by_score((1 - alpha) * mm(sem[qi]) + alpha * mm(lex[qi]))

    return rank


#: The semantic scores each fusion is tried over.
FUSED_OVER = (
    "one vector (text + examples)",
    "max(text, examples)",
    "name + description",
    "mean(name + description, text)",
    "max(mean(name + description, text), examples)",
)
ALPHAS = (0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5)


def action_fusion(scores: Scores, beta: float) -> Any:
    """The kept fusion plus ``beta`` where the request's action class matches the tool's."""
    lexical = scores.lexical["current 3/1/2/1/1/2"]
    similarity = scores.semantic["mean(name + description, text)"]
    assert scores.action_match is not None

    def ranked(qi: int) -> list[int]:
        row = lexical[qi]
        top = float(row.max())
        norm = row / top if top > 0 else row
        return by_score(similarity[qi] + KEPT * norm + beta * scores.action_match[qi])

    return ranked


def study(sets: list[Scores]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(kind: str, variant: str, make: Callable[[Scores], Any]) -> None:
        rows.append(
            {"kind": kind, "variant": variant, **{s.name: evaluate(s, make(s)) for s in sets}}
        )

    for label in WEIGHTS:
        add("lexical", label, lambda s, label=label: lambda qi: lexical_order(s.lexical[label][qi]))
    for label in sets[0].semantic:
        if all(label in s.semantic for s in sets):
            add(
                "semantic", label, lambda s, label=label: lambda qi: by_score(s.semantic[label][qi])
            )
    lex_w = "current 3/1/2/1/1/2"
    for sem_label in FUSED_OVER:
        if not all(sem_label in s.semantic for s in sets):
            continue

        def pair(s: Scores, sem_label: str = sem_label) -> tuple[Matrix, Matrix]:
            return s.lexical[lex_w], s.semantic[sem_label]

        add("fused", f"RRF k=60 [{sem_label}]", lambda s, p=pair: rrf(*p(s)))
        add("fused", f"RRF k=60, semantic x2 [{sem_label}]", lambda s, p=pair: rrf(*p(s), w_sem=2))
        for alpha in ALPHAS:
            add(
                "fused",
                f"score: sim + {alpha} * bm25/max [{sem_label}]",
                lambda s, p=pair, a=alpha: score_fusion(*p(s), a),
            )
        for alpha in (0.1, 0.2, 0.3, 0.5):
            add(
                "fused",
                f"min-max: {1 - alpha:.1f} sim + {alpha} bm25 [{sem_label}]",
                lambda s, p=pair, a=alpha: minmax_fusion(*p(s), a),
            )
        add(
            "fused",
            f"semantic first, lexical tie-break [{sem_label}]",
            lambda s, p=pair: score_fusion(*p(s), 1e-4),
        )
    chosen = "mean(name + description, text)"
    # The second stop's variants, each against the kept fusion (similarity + KEPT * BM25/max).
    for label in (
        "0.3 name + description + 0.7 text",
        "0.7 name + description + 0.3 text",
        "mean + 0.2 x similarity to the name alone",
        "mean, request without stop words",
    ):
        add(
            "fused",
            f"score: sim + {KEPT} * bm25/max [{label}]",
            lambda s, label=label: score_fusion(s.lexical[lex_w], s.semantic[label], KEPT),
        )
    for k1, b in BM25_PARAMETERS:
        add(
            "fused",
            f"score: sim + {KEPT} * bm25/max [{chosen}; BM25 k1={k1} b={b}]",
            lambda s, k1=k1, b=b: score_fusion(
                s.lexical[f"k1={k1} b={b}"], s.semantic[chosen], KEPT
            ),
        )
    for beta in (0.02, 0.05, 0.08, 0.12):
        add(
            "fused",
            f"kept fusion + {beta} x action match (request verb class = tool name's)",
            lambda s, beta=beta: action_fusion(s, beta),
        )
    for label in WEIGHTS:
        for alpha in sorted({0.1, 0.2, KEPT}):
            add(
                "fused",
                f"score: sim + {alpha} * bm25/max [{chosen}; lexical {label}]",
                lambda s, label=label, a=alpha: score_fusion(
                    s.lexical[label], s.semantic[chosen], a
                ),
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cache", type=Path, help="Keep embeddings in this .npz file.")
    args = parser.parse_args(argv)
    model = CachedModel(SemanticModel.shared(), args.cache)
    sets = [compute("project", HERE, model), compute("holdout", HOLDOUT, model)]
    rows = study(sets)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'kind':<9} {'variant':<75} {'project t1/t3/mrr':>20} {'holdout t1/t3/mrr':>20}")
    for row in rows:
        figures = [
            f"{row[s.name]['top1']:.3f}/{row[s.name]['top3']:.3f}/{row[s.name]['mrr']:.3f}"
            for s in sets
        ]
        print(f"{row['kind']:<9} {row['variant']:<75} {figures[0]:>20} {figures[1]:>20}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
