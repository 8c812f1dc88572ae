"""How the autopilot certifies a version and notices drift: the tests, apart from the bookkeeping around them.

A version is certified on the question's certification sample (a uniform draw of the stream that never trains):
the lowest threshold at which its answers agree with the teacher's labels at least at ``target``, with
``confidence``, by Learn-then-Test (``thresholds.fit_error_threshold``). Every version is tested on the same
growing sample, so the k-th test spends ``attempt_share(k)`` of the error budget. Drift is a binomial tail on
the newest audits of automatic answers.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> probs = rng.dirichlet([0.3, 0.3], 3000)
    >>> labels = np.where(rng.uniform(size=3000) < probs.max(axis=1), probs.argmax(axis=1), 1 - probs.argmax(axis=1))
    >>> result = certify_answers(probs, labels, target=0.95, confidence=0.9)
    >>> result["certified"], 1 - result["disagreements"] / result["accepted"] >= 0.95
    (True, True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from clef_agents.thresholds.stats import binomial_cdf, fit_error_threshold


def attempt_share(attempt: int) -> float:
    """The share of the error budget the ``attempt``-th certification test of a sample spends: 6 / (pi k)^2, so
    that the shares of all attempts sum to 1 (Bonferroni over a sequence of unknown length).

    Example:
        >>> round(attempt_share(1), 3), round(sum(attempt_share(k) for k in range(1, 100_000)), 4)
        (0.608, 1.0)
    """
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    return 6.0 / (math.pi * attempt) ** 2


def certify_answers(
    probs: np.ndarray,
    labels: np.ndarray,
    *,
    target: float,
    confidence: float,
    attempt: int = 1,
    min_minority: int = 5,
    sequence_start: str = "robust",
) -> dict[str, Any]:
    """Certify a version's answers (``probs``: one row of option probabilities per sampled item) against the
    teacher's ``labels`` of the same items; ``threshold`` is None when nothing certifies, and ``spent`` says
    whether a test ran (only those count as attempts).

    A sample where the teacher gave one answer to nearly everything (fewer than two answers given
    ``min_minority`` times each) certifies nothing: a teacher that says "yes" to all never hands the gate over.
    """
    probs, labels = np.asarray(probs, dtype=float), np.asarray(labels, dtype=int)
    if probs.shape[0] != len(labels):
        raise ValueError(f"{probs.shape[0]} rows of probabilities for {len(labels)} labels")
    refused = sample_refusal(labels, probs.shape[1], min_minority)
    if refused is not None:
        return refused
    delta = (1.0 - confidence) * attempt_share(attempt)
    fit = fit_error_threshold(
        probs.max(axis=1),
        probs.argmax(axis=1) == labels,
        target=1.0 - target,
        delta=delta,
        seed=len(labels),
        start=sequence_start,
    )
    return {
        "certified": bool(fit.certified),
        "threshold": float(fit.threshold) if fit.certified else None,
        "accepted": int(fit.accepted),
        "disagreements": int(fit.errors),
        "sample": len(labels),
        "reason": fit.reason,
        "attempt": attempt,
        "delta": delta,
        "spent": bool(fit.tested),
        "target": target,
        "confidence": confidence,
    }


def sample_refusal(labels: np.ndarray, n_options: int, min_minority: int = 5) -> dict[str, Any] | None:
    """The uncertified result for a sample that cannot certify whatever the version answers (no labels yet, or
    one answer to nearly everything), or None; check it before computing a version's answers on the sample.

    Example:
        >>> sample_refusal(np.array([1] * 40 + [0] * 3), 2)["reason"][:48]
        'the teacher gave one answer to nearly everything'
    """
    labels = np.asarray(labels, dtype=int)
    if len(labels) == 0:
        return {"certified": False, "threshold": None, "reason": "no sampled labels yet", "sample": 0}
    counts = np.bincount(labels, minlength=n_options)
    if np.sort(counts)[-2] >= min_minority:
        return None
    return {
        "certified": False,
        "threshold": None,
        "sample": len(labels),
        "reason": f"the teacher gave one answer to nearly everything in the sample ({counts.tolist()}); at least two "
        f"answers given {min_minority} times each are needed",
    }


def drift_p_value(errors: int, n: int, target: float) -> float:
    """P(at least ``errors`` disagreements in ``n`` audits) if agreement were exactly ``target``.

    Example:
        >>> round(drift_p_value(4, 15, 0.95), 4)
        0.0055
    """
    return 1.0 - binomial_cdf(errors - 1, n, 1.0 - target) if errors > 0 else 1.0
