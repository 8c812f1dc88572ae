"""Accuracy, calibration points (for ``clef_agents.train.metrics.expected_calibration_error``) and latency summaries.

Example:
    >>> percentile([1.0, 2.0, 3.0], 50)
    2.0
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from clef_agents import wire


def calibration_point(question: wire.TextQuestion, probabilities: Sequence[float], label: Any) -> tuple[float, bool]:
    """(confidence, outcome) for ECE: p(yes) and "gold is yes" for a noul, else top-label confidence
    and "top label is gold"."""
    gold = wire.label_index(question, label)
    if isinstance(question, wire.Noul):
        return float(probabilities[0]), gold == 0
    best = max(range(len(probabilities)), key=lambda i: probabilities[i])
    return float(probabilities[best]), best == gold


def is_correct(question: wire.TextQuestion, probabilities: Sequence[float], label: Any) -> bool:
    """Whether the decided label (argmax; for a noul p(yes) ≥ 0.5) equals the gold label."""
    best = max(range(len(probabilities)), key=lambda i: probabilities[i])
    return best == wire.label_index(question, label)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) with linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean in milliseconds."""
    return {
        "p50_ms": percentile(seconds, 50) * 1000,
        "p95_ms": percentile(seconds, 95) * 1000,
        "mean_ms": statistics.fmean(seconds) * 1000 if seconds else float("nan"),
        "n": len(seconds),
    }
