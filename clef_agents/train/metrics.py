"""Quality metrics over probability vectors (pure Python + numpy).

ECE uses 15 equal-width bins of the top-label confidence (for nouls, of p(yes) against the yes
rate), as DESIGN §7 fixes. Coverage at a precision target is the largest share of decisions,
taken in order of falling confidence, whose precision stays at or above the target.

Example:
    >>> m = classification_metrics([[0.9, 0.1], [0.2, 0.8]], [0, 1])
    >>> m["accuracy"]
    1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

ECE_BINS = 15


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[float], bins: int = ECE_BINS) -> float:
    """Σ_b |B_b|/N · |mean(correct in b) − mean(confidence in b)| over equal-width bins.

    Example:
        >>> round(expected_calibration_error([0.9, 0.9], [1, 1]), 3)
        0.1
    """
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(correct, dtype=float)
    if conf.size == 0:
        return float("nan")
    index = np.minimum((conf * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        mask = index == b
        if mask.any():
            total += mask.sum() / conf.size * abs(hit[mask].mean() - conf[mask].mean())
    return float(total)


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks from 1, ties sharing their average rank.

    Example:
        >>> average_ranks([10, 20, 20, 30]).tolist()
        [1.0, 2.5, 2.5, 4.0]
    """
    array = np.asarray(values, dtype=float)
    order = np.argsort(array, kind="mergesort")
    ranks = np.empty(len(array))
    sorted_values = array[order]
    start = 0
    while start < len(array):
        end = start
        while end + 1 < len(array) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def auroc(scores: Sequence[float], positive: Sequence[int]) -> float:
    """Area under the ROC curve (Mann–Whitney, ties counted half); NaN with one class only."""
    labels = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = average_ranks(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


ECE_NOISE_DRAWS = 200


def ece_under_perfect_calibration(
    confidence: Sequence[float], bins: int = ECE_BINS, draws: int = ECE_NOISE_DRAWS, seed: int = 0
) -> np.ndarray:
    """ECEs a perfectly calibrated model with these confidences would show on this many samples.

    Each draw makes every answer correct with probability equal to its confidence, so the only
    thing the ECE measures is sampling noise. On a few hundred answers that floor is often above
    0.01; an ECE inside this distribution cannot be told apart from perfect calibration.

    Example:
        >>> floor = ece_under_perfect_calibration([0.7] * 500)
        >>> 0.01 < float(floor.mean()) < 0.03
        True
    """
    conf = np.asarray(confidence, dtype=float)
    if conf.size == 0:
        return np.full(draws, float("nan"))
    index = np.minimum((conf * bins).astype(int), bins - 1)
    conf_sums = np.bincount(index, weights=conf, minlength=bins)
    hits = np.random.default_rng(seed).uniform(size=(draws, conf.size)) < conf
    hit_sums = np.stack([np.bincount(index, weights=row, minlength=bins) for row in hits.astype(float)])
    return np.abs(hit_sums - conf_sums).sum(1) / conf.size


def calibration_noise(confidence: Sequence[float], observed_ece: float, bins: int = ECE_BINS) -> dict[str, float]:
    """The ECE sampling-noise floor for these confidences and where an observed ECE falls in it.

    ``mean`` and ``p95``: the ECE a perfectly calibrated model would show (mean and 95th
    percentile over ``ECE_NOISE_DRAWS`` seeded draws); ``p_value``: the share of those draws at or
    above ``observed_ece`` (small: the miscalibration is real; large: it may be noise alone).

    Example:
        >>> noise = calibration_noise([0.9] * 200, observed_ece=0.1)
        >>> noise["p_value"]
        0.0
    """
    floor = ece_under_perfect_calibration(confidence, bins)
    return {
        "mean": float(floor.mean()),
        "p95": float(np.percentile(floor, 95)),
        "p_value": float((floor >= observed_ece - 1e-12).mean()),
    }


def reliability_bins(
    confidence: Sequence[float], correct: Sequence[float], bins: int = ECE_BINS
) -> list[dict[str, float]]:
    """Per-bin mean confidence, accuracy and count (for reliability diagrams)."""
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(correct, dtype=float)
    index = np.minimum((conf * bins).astype(int), bins - 1)
    out = []
    for b in range(bins):
        mask = index == b
        out.append(
            {
                "low": b / bins,
                "high": (b + 1) / bins,
                "count": int(mask.sum()),
                "confidence": float(conf[mask].mean()) if mask.any() else float("nan"),
                "accuracy": float(hit[mask].mean()) if mask.any() else float("nan"),
            }
        )
    return out


def coverage_at_precision(confidence: Sequence[float], correct: Sequence[float], target: float) -> dict[str, float]:
    """Largest automatic share whose precision is ≥ ``target`` when deciding the most confident first.

    Example:
        >>> coverage_at_precision([0.99, 0.9, 0.6], [1, 1, 0], 0.99)["coverage"]
        0.6666666666666666
    """
    conf = np.asarray(confidence, dtype=float)
    hit = np.asarray(correct, dtype=float)
    if conf.size == 0:
        return {"coverage": 0.0, "threshold": float("nan")}
    order = np.argsort(-conf, kind="stable")
    cumulative = np.cumsum(hit[order]) / np.arange(1, conf.size + 1)
    sorted_conf = conf[order]
    # only cut between distinct confidences: a threshold cannot split ties
    boundary = np.append(sorted_conf[1:] < sorted_conf[:-1], True)
    ok = np.where((cumulative >= target) & boundary)[0]
    if ok.size == 0:
        return {"coverage": 0.0, "threshold": float("nan")}
    last = int(ok.max())
    return {"coverage": (last + 1) / conf.size, "threshold": float(sorted_conf[last])}


def macro_f1(predicted: Sequence[int], gold: Sequence[int], n_classes: int) -> float:
    """Unweighted mean F1 over the classes that occur in gold or predictions."""
    pred = np.asarray(predicted)
    true = np.asarray(gold)
    scores = []
    for c in range(n_classes):
        tp = int(((pred == c) & (true == c)).sum())
        fp = int(((pred == c) & (true != c)).sum())
        fn = int(((pred != c) & (true == c)).sum())
        if tp + fp + fn == 0:
            continue
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else float("nan")


def classification_metrics(
    probabilities: Sequence[Sequence[float]], gold: Sequence[int], kind: str = "choice"
) -> dict[str, Any]:
    """Accuracy, macro-F1, NLL, Brier, ECE and coverage at 95 % / 99 % precision for one question type.

    ``kind="noul"`` bins ECE on p(yes) (index 0) and adds F1 of the yes class; ``kind="score"``
    adds the mean absolute level error of the mode and of the expectation.
    """
    n = len(gold)
    if n == 0:
        return {"n": 0}
    width = max(len(p) for p in probabilities)
    probs = np.array([list(p) + [0.0] * (width - len(p)) for p in probabilities], dtype=float)
    true = np.asarray(gold)
    pred = probs.argmax(1)
    top = probs.max(1)
    correct = (pred == true).astype(float)
    picked = np.clip(probs[np.arange(n), true], 1e-12, 1.0)
    one_hot = np.zeros_like(probs)
    one_hot[np.arange(n), true] = 1.0
    metrics: dict[str, Any] = {
        "n": n,
        "accuracy": float(correct.mean()),
        "macro_f1": macro_f1(pred, true, width),
        "nll": float(-np.log(picked).mean()),
        "brier": float(((probs - one_hot) ** 2).sum(1).mean()),
        "ece": expected_calibration_error(top, correct),
        "coverage_at_95": coverage_at_precision(top, correct, 0.95),
        "coverage_at_99": coverage_at_precision(top, correct, 0.99),
    }
    metrics["ece_noise"] = calibration_noise(top, metrics["ece"])
    if kind == "noul":
        yes = probs[:, 0]
        metrics["ece_p_yes"] = expected_calibration_error(yes, (true == 0).astype(float))
        tp = int(((pred == 0) & (true == 0)).sum())
        fp = int(((pred == 0) & (true != 0)).sum())
        fn = int(((pred != 0) & (true == 0)).sum())
        metrics["f1_yes"] = 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else float("nan")
    if kind == "score":
        levels = np.arange(width)
        metrics["mae_mode"] = float(np.abs(pred - true).mean())
        metrics["mae_expected"] = float(np.abs((probs * levels).sum(1) - true).mean())
    return metrics


def is_finite_number(value: Any) -> bool:
    """True for a real, finite number (used when rendering reports)."""
    return isinstance(value, (int, float)) and math.isfinite(value)
