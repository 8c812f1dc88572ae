"""Metrics of the untaught-question benchmark: per variant, per task, and coherence between variants.

Per variant: accuracy, NLL, ECE (15 bins; of p(yes) for yes/no, of the top option otherwise) and its
small-sample floor (the ECE the same answers would score if they were perfectly calibrated), AUROC of
p(yes) (yes/no), Spearman of the expected level with the gold level (score).
Per task: the mean, minimum and spread (max − min) of the headline metric over the five wordings.
Coherence: the negation complement gap |P(yes | Q) + P(yes | not Q) − 1|, agreement of a yes/no
question with the same question as a yes/no choice, and the score complement gap
|E(Q) + E(reversed Q) − (n − 1)| / (n − 1).
Lanes: where the graph layer's default lane policy would send each answer (automatic at a decision
probability ≥ 0.9, a human below 0.5, an LLM between), how often the automatic ones are wrong, and whether
the decision probability tells right answers from wrong ones at all (its AUROC).

Example:
    >>> auroc([0.9, 0.8, 0.3, 0.1], [1, 1, 0, 0])
    1.0
    >>> round(spearman([1, 2, 3, 4], [1, 3, 2, 4]), 2)
    0.8
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from clef_agents.policy import Band, LanePolicy
from clef_agents.train.metrics import (
    auroc,
    average_ranks,
    ece_under_perfect_calibration,
    expected_calibration_error,
    is_finite_number,
)

GAP_LIMIT = 0.15
"""Coherence gaps at or under this count as coherent (the issue's negation target)."""

HEADLINE = {"noul": "auroc", "choice": "accuracy", "score": "spearman"}

DEFAULT_BAND = LanePolicy().default
"""The band every question gets from the graph layer when no policy file is given."""


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson on average ranks); NaN when either side is constant."""
    ra, rb = average_ranks(a), average_ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def variant_metrics(kind: str, probabilities: Sequence[Sequence[float]], gold: Sequence[int]) -> dict[str, Any]:
    """Metrics of one question form over its items; ``kind`` is the variant's question type, and a
    yes/no answer's vector is ``[p(yes), p(no)]``."""
    probs = np.asarray(probabilities, dtype=float)
    true = np.asarray(gold)
    n = len(true)
    pred = probs.argmax(1)
    picked = np.clip(probs[np.arange(n), true], 1e-12, 1.0)
    out: dict[str, Any] = {
        "n": n,
        "accuracy": float((pred == true).mean()),
        "nll": float(-np.log(picked).mean()),
    }
    if kind == "noul":
        is_yes = (true == 0).astype(float)
        out["auroc"] = auroc(probs[:, 0], is_yes)
        out["ece"] = expected_calibration_error(probs[:, 0], is_yes)
        out["ece_floor"] = ece_floor(probs[:, 0])
        out["mean_p_yes"] = float(probs[:, 0].mean())
    else:
        out["ece"] = expected_calibration_error(probs.max(1), (pred == true).astype(float))
        out["ece_floor"] = ece_floor(probs.max(1))
    if kind == "score":
        expected = expected_levels(probs)
        out["spearman"] = spearman(expected, true)
        out["mae_expected"] = float(np.abs(expected - true).mean())
    out["lanes"] = lane_counts(probs, true)
    return out


def lane_counts(
    probabilities: Sequence[Sequence[float]], gold: Sequence[int], band: Band = DEFAULT_BAND
) -> dict[str, Any]:
    """Where ``band`` sends each answer, and how many of the automatic ones are wrong. An answer's decision
    probability is its top probability (``wire.decision_probability``: max(p, 1 − p) for a yes/no), its label the
    top option. ``confidence_auroc`` is the AUROC of that probability for telling right answers from wrong ones
    (0.5: confidence says nothing; NaN when all are right or all wrong).

    Example:
        >>> lane_counts([[0.95, 0.05], [0.3, 0.7], [0.6, 0.4], [0.08, 0.92]], [0, 1, 1, 0])
        {'n': 4, 'auto': 2, 'auto_wrong': 1, 'llm': 2, 'human': 0, 'confidence_auroc': 0.75}
    """
    probs = np.asarray(probabilities, dtype=float)
    true = np.asarray(gold)
    confidence = probs.max(1)
    right = (probs.argmax(1) == true).astype(float)
    lanes = [band.lane(float(c)) for c in confidence]
    auto = np.array([lane == "auto" for lane in lanes])
    return {
        "n": len(true),
        "auto": int(auto.sum()),
        "auto_wrong": int((auto & (right == 0)).sum()),
        "llm": lanes.count("llm"),
        "human": lanes.count("human"),
        "confidence_auroc": auroc(confidence, right),
    }


def pooled_lanes(counts: Iterable[dict[str, Any]]) -> dict[str, float]:
    """``lane_counts`` of many question forms pooled: the shares of all answers that each lane gets, the share that
    are automatic *and* wrong (the gate acting wrongly on its own), the accuracy of the automatic ones, and the mean
    confidence AUROC.

    Example:
        >>> pooled_lanes([{"n": 4, "auto": 2, "auto_wrong": 1, "llm": 2, "human": 0, "confidence_auroc": 0.5}])["auto_accuracy"]
        0.5
    """
    counts = list(counts)
    total = sum(c["n"] for c in counts)
    if not total:
        return {
            key: float("nan")
            for key in (
                "auto_share",
                "auto_accuracy",
                "auto_wrong_share",
                "llm_share",
                "human_share",
                "confidence_auroc",
            )
        }
    auto = sum(c["auto"] for c in counts)
    wrong = sum(c["auto_wrong"] for c in counts)
    return {
        "auto_share": auto / total,
        "auto_accuracy": (auto - wrong) / auto if auto else float("nan"),
        "auto_wrong_share": wrong / total,
        "llm_share": sum(c["llm"] for c in counts) / total,
        "human_share": sum(c["human"] for c in counts) / total,
        "confidence_auroc": finite_mean(c["confidence_auroc"] for c in counts),
    }


def ece_floor(confidence: Sequence[float]) -> float:
    """The mean ECE these answers would score if they were perfectly calibrated
    (``ece_under_perfect_calibration``). Binned ECE is biased upward on few items (about 0.09 for 20 answers of 0.5),
    so an ECE is only as good as its distance above this floor.

    Example:
        >>> round(ece_floor([1.0, 0.0, 1.0]), 3)
        0.0
        >>> 0.05 < ece_floor([0.5] * 20) < 0.13
        True
    """
    return float(ece_under_perfect_calibration(confidence).mean())


def expected_levels(probabilities: Sequence[Sequence[float]]) -> np.ndarray:
    """Σ i·p_i per row: the expected level of each score answer.

    Example:
        >>> expected_levels([[0.5, 0.0, 0.5], [0.0, 0.0, 1.0]]).tolist()
        [1.0, 2.0]
    """
    probs = np.asarray(probabilities, dtype=float)
    return probs @ np.arange(probs.shape[1])


def negation_gaps(p_yes: Sequence[float], p_yes_negated: Sequence[float]) -> np.ndarray:
    """|P(yes | Q) + P(yes | not Q) − 1| per item."""
    return np.abs(np.asarray(p_yes) + np.asarray(p_yes_negated) - 1.0)


def score_complement_gaps(expected: Sequence[float], expected_reversed: Sequence[float], levels: int) -> np.ndarray:
    """|E(Q) + E(reversed Q) − (n − 1)| / (n − 1) per item (0 when the two agree exactly)."""
    return np.abs(np.asarray(expected) + np.asarray(expected_reversed) - (levels - 1)) / (levels - 1)


def gap_summary(gaps: np.ndarray) -> dict[str, float]:
    """Mean gap and the share of items at or under ``GAP_LIMIT``."""
    return {"mean_gap": float(gaps.mean()), "share_within": float((gaps <= GAP_LIMIT).mean()), "limit": GAP_LIMIT}


def agreement(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> float:
    """Share of items whose two probability vectors pick the same index."""
    return float((np.asarray(a).argmax(1) == np.asarray(b).argmax(1)).mean())


def finite(values: Iterable[Any]) -> list[float]:
    """The finite numbers among ``values`` (NaN metrics, e.g. AUROC with one class, left out)."""
    return [float(v) for v in values if is_finite_number(v)]


def finite_mean(values: Iterable[Any]) -> float:
    """Mean of the finite values; NaN when there are none."""
    kept = finite(values)
    return sum(kept) / len(kept) if kept else float("nan")


def finite_min(values: Iterable[Any]) -> float:
    """Smallest finite value; NaN when there are none."""
    kept = finite(values)
    return min(kept) if kept else float("nan")


def over_wordings(per_variant: dict[str, dict[str, Any]], keys: Sequence[str], metric: str) -> dict[str, float]:
    """Mean, min, max and spread of ``metric`` over the variants ``keys`` (NaNs left out)."""
    values = finite(per_variant[k].get(metric) for k in keys if k in per_variant)
    if not values:
        return {"mean": float("nan"), "min": float("nan"), "max": float("nan"), "spread": float("nan")}
    return {"mean": float(np.mean(values)), "min": min(values), "max": max(values), "spread": max(values) - min(values)}
