"""Synthetic decision scores whose true error rates are known in closed form.

Each decision's chance of being wrong is ``e = max_error * U**gamma`` (``U`` uniform); its
decision probability is ``1 - e`` and it is wrong with probability ``miscalibration * e``. So the
true error among decisions with probability ``>= t`` is
``miscalibration * min(1 - t, max_error) / (1 + gamma)``, and the share accepted is
``min(1, ((1 - t) / max_error) ** (1 / gamma))``. Used to check the guarantee empirically.

Example:
    >>> gen = SyntheticScores(gamma=6.0, max_error=0.5)
    >>> round(gen.true_error(0.93), 4), round(gen.true_coverage(0.93), 3)
    (0.01, 0.721)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SyntheticScores:
    """A calibrated (``miscalibration=1``) or over-confident (``> 1``) synthetic scorer."""

    gamma: float = 6.0
    max_error: float = 0.5
    miscalibration: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 < self.max_error <= 0.5:
            raise ValueError(
                f"max_error must be in (0, 0.5] so the decided option stays the argmax, got {self.max_error}"
            )
        if self.miscalibration * self.max_error > 1.0:
            raise ValueError("miscalibration * max_error must not exceed 1")

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` decision probabilities and whether each decision was correct."""
        error_chance = self.max_error * rng.uniform(size=n) ** self.gamma
        correct = rng.uniform(size=n) >= self.miscalibration * error_chance
        return 1.0 - error_chance, correct

    def true_error(self, threshold: float) -> float:
        """Error rate among decisions with probability ``>= threshold`` (0 when none)."""
        x = min(1.0 - threshold, self.max_error)
        return self.miscalibration * x / (1.0 + self.gamma) if x > 0 else 0.0

    def true_coverage(self, threshold: float) -> float:
        """Share of decisions with probability ``>= threshold``."""
        x = 1.0 - threshold
        return float(min(1.0, max(0.0, x / self.max_error) ** (1.0 / self.gamma)))


def synthetic_records(
    n: int,
    seed: int = 0,
    *,
    routes: dict[str, SyntheticScores] | None = None,
    options: tuple[str, ...] = ("billing", "tech", "sales"),
    question_id: str = "team",
) -> list[dict[str, Any]]:
    """Labelled decision records carrying ``meta["probabilities"]`` (replayed-trace shape).

    With ``routes``, records are spread evenly over the routes (``meta["route"]``), each with its
    own scorer.

    Example:
        >>> rec = synthetic_records(1)[0]
        >>> sorted(rec["meta"]), rec["questions"]["team"]["type"]
        (['dataset', 'probabilities', 'route', 'source', 'split'], 'choice')
    """
    rng = np.random.default_rng(seed)
    routes = routes or {"main": SyntheticScores()}
    names = list(routes)
    question = {
        "type": "choice",
        "instructions": "Which team should handle this?",
        "criteria": {o: None for o in options},
    }
    records = []
    for i in range(n):
        route = names[i % len(names)]
        (score,), (correct,) = routes[route].sample(1, rng)
        decided = int(rng.integers(len(options)))
        rest = (1.0 - score) / (len(options) - 1)
        probabilities = [float(score) if j == decided else rest for j in range(len(options))]
        label = decided if correct else int(rng.choice([j for j in range(len(options)) if j != decided]))
        records.append(
            {
                "state": f"synthetic ticket {i}",
                "questions": {question_id: question},
                "labels": {question_id: options[label]},
                "meta": {
                    "dataset": "synthetic",
                    "split": "calibration",
                    "source": "synthetic",
                    "route": route,
                    "probabilities": {question_id: probabilities},
                },
            }
        )
    return records
