"""Sentence vectors for the autopilot's learner: all-MiniLM-L6-v2 from its wheel, mean-pooled, unit length.

Loaded on first use (torch and transformers stay out of ``import clef_agents.autopilot``); vectors are
kept per text in a bounded cache, so a text asked about by several questions is read once.

Example:
    >>> embedder = SentenceEmbedder()
    >>> embedder.embed(["my card was stolen"]).shape  # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

EMBEDDING_DIM = 384
MAX_TOKENS = 128


class SentenceEmbedder:
    """MiniLM sentence embeddings (the sentence-transformers recipe: mean pooling, then L2 norm).

    Args:
        max_tokens: texts are cut to this many tokens (the autopilot reads the start of a state).
        cache_size: how many texts' vectors to keep (least recently used dropped).
        batch_size: texts per forward pass.
    """

    def __init__(self, max_tokens: int = MAX_TOKENS, cache_size: int = 50_000, batch_size: int = 64):
        self.max_tokens = max_tokens
        self.cache_size = cache_size
        self.batch_size = batch_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._loaded: tuple[Any, Any] | None = None

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            from transformers import AutoModel, AutoTokenizer  # noqa: PLC0415  (heavy; on first use)

            from clef_agents.model.backbones import minilm_path  # noqa: PLC0415

            path = minilm_path()
            model = AutoModel.from_pretrained(path)
            model.eval()
            self._loaded = (AutoTokenizer.from_pretrained(path), model)
        return self._loaded

    def _forward(self, texts: list[str]) -> np.ndarray:
        import torch  # noqa: PLC0415

        tokenizer, model = self._load()
        batch = tokenizer(texts, padding=True, truncation=True, max_length=self.max_tokens, return_tensors="pt")
        with torch.inference_mode():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1).numpy().astype(np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors ``[len(texts), 384]`` (float32), from the cache where a text was seen before."""
        if not texts:
            return np.zeros((0, EMBEDDING_DIM), np.float32)
        with self._lock:
            found = {t: self._cache[t] for t in texts if t in self._cache}
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            vectors = self._forward(chunk)
            found.update(zip(chunk, vectors, strict=True))
            self.remember(chunk, vectors)
        return np.stack([found[t] for t in texts])

    def remember(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Keep vectors computed elsewhere (a replay's cache) for these texts."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                self._cache[text] = np.asarray(vector, dtype=np.float32)
                self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
