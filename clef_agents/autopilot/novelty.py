"""How unlike a certified version's sample an item is: the autopilot's cue for a drift check.

A version is certified on a uniform sample of the stream. Its reference is that sample's sentence vectors, and
its cutoff the ``quantile`` of the sample's own novelty (one minus the cosine to the nearest *other* sample item),
so that on a stream that does not move about ``1 - quantile`` of new items lie beyond it. When the source changes,
most new items do.

Example:
    >>> import numpy as np
    >>> sample = np.random.default_rng(0).normal([1.0, 0.0, 0.0], 0.1, (50, 3))  # states about one thing
    >>> reference = NoveltyReference.of(sample)
    >>> reference.is_novel(np.array([1.0, 0.01, 0.0])), reference.is_novel(np.array([0.0, 0.0, 1.0]))
    (False, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NOVELTY_QUANTILE = 0.95
"""A version's cutoff: this quantile of its sample's own novelty."""
MIN_REFERENCE = 20
"""Fewer sample vectors than this give no reference (no item is called novel)."""


@dataclass(frozen=True)
class NoveltyReference:
    """The unit sentence vectors a version was certified on, and the novelty beyond which an item is unlike them."""

    vectors: np.ndarray
    cutoff: float

    @classmethod
    def of(cls, vectors: np.ndarray, quantile: float = NOVELTY_QUANTILE) -> NoveltyReference | None:
        """The reference of a sample's vectors ``[n, d]``; ``None`` with fewer than ``MIN_REFERENCE`` of them."""
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile}")
        units = _unit(np.asarray(vectors, dtype=np.float32))
        if len(units) < MIN_REFERENCE:
            return None
        sims = units @ units.T
        np.fill_diagonal(sims, -np.inf)
        own = 1.0 - sims.max(axis=1)
        return cls(units, float(np.quantile(own, quantile)))

    def novelty(self, vector: np.ndarray) -> float:
        """One minus the cosine of ``vector`` to its nearest reference vector."""
        unit = _unit(np.asarray(vector, dtype=np.float32)[None, :])[0]
        return float(1.0 - (self.vectors @ unit).max())

    def is_novel(self, vector: np.ndarray) -> bool:
        """Whether ``vector`` is further from the reference than the cutoff."""
        return self.novelty(vector) > self.cutoff


def _unit(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)
