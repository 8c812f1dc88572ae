"""Exact binomial statistics and the two threshold procedures the lane fit is built from.

- ``fit_error_threshold``: Learn-then-Test (Angelopoulos, Bates, Candès, Jordan, Lei 2021) with
  fixed-sequence testing over descending thresholds and exact binomial p-values for the
  *conditional* error among accepted decisions. With probability at least ``1 - delta`` over the
  calibration draw, the returned threshold has error rate at most ``target`` among future decisions
  whose decision probability is at or above it.
- ``fit_share_threshold``: an order-statistic bound on a share of traffic (used for the human
  review budget): with probability at least ``1 - delta``, at most ``max_share`` of future decisions
  fall below the returned threshold.

Both rest on one exact binomial test, whose power is here too (``single_test_power``,
``accepted_for_power``: the ``"robust"`` sequence start; ``planning`` builds its record counts on them).

Example:
    >>> import numpy as np
    >>> scores = np.linspace(0.5, 1.0, 2000)
    >>> correct = np.ones(2000, dtype=bool)
    >>> fit = fit_error_threshold(scores, correct, target=0.01, delta=0.1)
    >>> fit.certified, fit.threshold <= 0.55
    (True, True)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

_LOG_FACTORIALS = np.zeros(1)
LOG_FACTORIAL_TABLE_LIMIT = 1_000_000
"""Largest ``n`` whose ``log(i!)`` table is kept (8 MB); beyond it ``log(i!)`` is computed per value."""


def _log_factorials(n: int) -> np.ndarray:
    """``log(i!)`` for ``i = 0..n`` (a table grown on demand, up to ``LOG_FACTORIAL_TABLE_LIMIT``)."""
    global _LOG_FACTORIALS
    if len(_LOG_FACTORIALS) <= n:
        size = min(max(n + 1, 2 * len(_LOG_FACTORIALS)), LOG_FACTORIAL_TABLE_LIMIT + 1)
        _LOG_FACTORIALS = np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, size)))])
    return _LOG_FACTORIALS


def _log_factorial(values: np.ndarray, n: int) -> np.ndarray:
    """``log(v!)`` for integer ``values`` in ``[0, n]``: from the table while ``n`` fits it, else by ``lgamma``."""
    if n <= LOG_FACTORIAL_TABLE_LIMIT:
        return _log_factorials(n)[values]
    return np.array([math.lgamma(float(v) + 1.0) for v in np.atleast_1d(values)]).reshape(np.shape(values))


def binomial_log_pmf(k: np.ndarray, n: int, p: float) -> np.ndarray:
    """``log P(X = k)`` for ``X ~ Binomial(n, p)``, elementwise over integer ``k`` in ``[0, n]``, ``0 < p < 1``.

    Example:
        >>> round(float(np.exp(binomial_log_pmf(np.array([1]), 2, 0.5))[0]), 3)
        0.5
    """
    k = np.asarray(k)
    log_n = _log_factorial(np.asarray(n), n)
    return log_n - _log_factorial(k, n) - _log_factorial(n - k, n) + k * math.log(p) + (n - k) * math.log1p(-p)


def binomial_cdf(k: int, n: int, p: float) -> float:
    """``P(X <= k)`` for ``X ~ Binomial(n, p)``, computed exactly in log space.

    Example:
        >>> round(binomial_cdf(0, 230, 0.01), 4)
        0.0991
    """
    if k < 0:
        return 0.0
    if k >= n or p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_pmf = binomial_log_pmf(np.arange(k + 1), n, p)
    top = float(log_pmf.max())
    return float(min(1.0, math.exp(top) * float(np.exp(log_pmf - top).sum())))


def error_p_value(errors: int, accepted: int, target: float) -> float:
    """Exact binomial p-value for ``H0: error rate > target`` after ``errors`` in ``accepted``.

    Conditional on how many decisions a threshold accepts, their errors are
    ``Binomial(accepted, risk)``; small values are evidence that the risk is at most ``target``.

    Example:
        >>> error_p_value(0, 0, 0.01)
        1.0
    """
    if accepted == 0:
        return 1.0
    return binomial_cdf(errors, accepted, target)


def clopper_pearson_upper(errors: int, n: int, confidence: float) -> float:
    """One-sided Clopper–Pearson upper confidence bound on a binomial rate.

    Example:
        >>> round(clopper_pearson_upper(0, 230, 0.9), 3)
        0.01
    """
    if n == 0:
        return 1.0
    if errors >= n:
        return 1.0
    low, high = errors / n, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if binomial_cdf(errors, n, mid) > 1.0 - confidence:
            low = mid
        else:
            high = mid
    return high


def min_accepted_for(target: float, delta: float) -> int:
    """The fewest accepted decisions (all correct) that can certify ``target`` at ``delta``.

    Example:
        >>> min_accepted_for(0.01, 0.1)
        230
    """
    if not 0.0 < target < 1.0 or not 0.0 < delta < 1.0:
        raise ValueError(f"target and delta must lie strictly between 0 and 1, got {target} and {delta}")
    return int(math.ceil(math.log(delta) / math.log1p(-target)))


def critical_errors(accepted: int, target: float, delta: float) -> int:
    """Most errors among ``accepted`` decisions that still reject ``H0: error > target`` at ``delta``.

    ``-1`` when even zero errors are not enough (too few decisions).

    Example:
        >>> critical_errors(230, 0.01, 0.1), critical_errors(229, 0.01, 0.1)
        (0, -1)
    """
    check_rates(target=target, delta=delta)
    if accepted <= 0:
        return -1
    top = min(accepted, int(accepted * target + 10 * math.sqrt(accepted * target + 1) + 10))
    cdf = np.cumsum(np.exp(binomial_log_pmf(np.arange(top + 1), accepted, target)))
    passing = np.nonzero(cdf <= delta)[0]
    return int(passing[-1]) if len(passing) else -1


def single_test_power(accepted: int, error_rate: float, target: float, delta: float) -> float:
    """Chance that one exact binomial test certifies ``target`` on ``accepted`` decisions whose true
    error rate is ``error_rate``.

    Example:
        >>> round(single_test_power(1155, 0.0074, 0.01, 0.1), 2)
        0.25
        >>> round(single_test_power(8000, 0.0074, 0.01, 0.1), 2)
        0.89
    """
    check_rates(error_rate=error_rate)
    k = critical_errors(accepted, target, delta)
    return binomial_cdf(k, accepted, error_rate) if k >= 0 else 0.0


def accepted_for_power(error_rate: float, target: float, delta: float, power: float) -> int:
    """Fewest accepted decisions with which one exact test at ``delta`` certifies ``target`` with
    probability ``power`` when their true error rate is ``error_rate`` (below the target).

    Example:
        >>> accepted_for_power(0.0025, 0.01, 0.1, 0.8)  # where the robust sequence start lies at 1 %
        535
    """
    check_rates(error_rate=error_rate, power=power, target=target, delta=delta)
    if error_rate >= target:
        raise ValueError(
            f"error_rate {error_rate} must be below the target {target} for any number of decisions to certify it"
        )
    accepted = min_accepted_for(target, delta)
    while single_test_power(accepted, error_rate, target, delta) < power:
        accepted += max(1, accepted // 50)
    return accepted


def check_rates(**rates: float) -> None:
    """Refuse a rate outside ``[0, 1]``; ``target`` and ``delta`` must lie strictly inside.

    Example:
        >>> check_rates(error_rate=0.0, target=0.01)
    """
    for name, value in rates.items():
        if name in ("target", "delta") and not 0.0 < value < 1.0:
            raise ValueError(f"{name} must lie strictly between 0 and 1, got {value}")
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1], got {value}")


@dataclass
class ThresholdFit:
    """The outcome of ``fit_error_threshold``.

    ``threshold`` is the act-at value (``1.0`` and ``certified=False`` when no threshold could be
    certified); ``p_value``, ``accepted`` and ``errors`` describe the last rejected hypothesis on
    the testing part; ``tested`` lists every step of the sequence.
    """

    threshold: float
    certified: bool
    target: float
    delta: float
    n: int
    n_pilot: int
    accepted: int = 0
    errors: int = 0
    p_value: float = 1.0
    reason: str = ""
    tested: list[dict[str, float]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready dict without the per-step trail."""
        out = asdict(self)
        out.pop("tested")
        out["steps_tested"] = len(self.tested)
        return out


def pilot_split(n: int, pilot_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random split of ``range(n)`` into pilot and testing indices.

    Example:
        >>> [len(part) for part in pilot_split(100, 0.1, seed=0)]
        [10, 90]
    """
    if not 0.0 < pilot_fraction < 1.0:
        raise ValueError(f"pilot_fraction must be in (0, 1), got {pilot_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_pilot = min(n, max(1, int(round(pilot_fraction * n))))
    return order[:n_pilot], order[n_pilot:]


def clopper_pearson_lower(successes: int, n: int, confidence: float) -> float:
    """One-sided Clopper–Pearson lower confidence bound on a binomial rate.

    Example:
        >>> round(clopper_pearson_lower(230, 230, 0.9), 3)
        0.99
    """
    return 1.0 - clopper_pearson_upper(n - successes, n, confidence)


def threshold_sequence(
    pilot_scores: np.ndarray, n_testing: int, n_start: int, step: float = 0.005, start_confidence: float = 0.95
) -> list[float]:
    """Descending thresholds for the fixed sequence, laid out on the pilot's score quantiles.

    Step ``i`` accepts about ``i * step`` of the pilot. The sequence starts at the first step whose
    share of the pilot, taken at its lower ``start_confidence`` bound, would give the testing part
    ``n_start`` accepted decisions, so that the first test is unlikely to fail for want of data.

    Example:
        >>> threshold_sequence(np.linspace(0, 1, 101), n_testing=1000, n_start=200, step=0.25)
        [0.5, 0.25, 0.0]
    """
    ordered = np.sort(np.asarray(pilot_scores, dtype=float))[::-1]
    m = len(ordered)
    if m == 0:
        return []
    needed = _pilot_count_for(n_start / max(n_testing, 1), m, start_confidence)
    thresholds: list[float] = []
    for share in np.arange(step, 1.0 + step / 2, step):
        value = float(ordered[min(m - 1, int(math.ceil(share * m)) - 1)])
        if not thresholds and int((ordered >= value).sum()) < needed:
            continue
        if not thresholds or value < thresholds[-1]:
            thresholds.append(value)
    return thresholds


def _pilot_count_for(share: float, m: int, confidence: float) -> int:
    """Fewest pilot hits (of ``m``) whose Clopper–Pearson lower bound reaches ``share``."""
    if share >= 1.0:
        return m
    for k in range(1, m + 1):
        # lower bound >= share  <=>  P(Binomial(m, share) >= k) <= 1 - confidence
        if binomial_cdf(k - 1, m, share) >= confidence:
            return k
    return m + 1


def fit_error_threshold(
    scores: np.ndarray,
    correct: np.ndarray,
    target: float,
    delta: float,
    *,
    pilot_fraction: float = 0.1,
    start_margin: float = 1.25,
    step: float = 0.005,
    seed: int = 0,
    max_failures: int = 0,
    start: str = "first",
) -> ThresholdFit:
    """Lowest threshold whose conditional error is certified ``<= target`` at level ``delta``.

    A seeded ``pilot_fraction`` of the records only lays out the threshold sequence (where to
    start, how fine to step); the rest tests it. Hypotheses ``H0(t): P(wrong | p >= t) > target``
    are tested in descending ``t`` with the exact binomial p-value, each at level ``delta``,
    stopping at the first that cannot be rejected (fixed-sequence testing controls the
    family-wise error at ``delta`` because the order is fixed before the testing part is seen).
    With ``max_failures = k`` each test runs at ``delta / (k + 1)`` and the sequence stops only
    after ``k + 1`` non-rejections (still family-wise ``delta``: a false rejection needs one of the
    first ``k + 1`` true nulls to be rejected); the default ``k = 0`` had the best power in our
    simulations.

    ``start`` says where the sequence begins (choose it before seeing the records, never by
    trying both): ``"first"`` at the first threshold the pilot expects to accept ``start_margin``
    times the fewest error-free answers that can certify the target (288 at 1 %, δ = 0.1), so a
    single confident error there ends the sequence; ``"robust"`` where the first test passes with
    probability 0.8 if the error rate is a quarter of the target (535 answers at 1 %; at most half
    the testing records), which survives a few label-noise errors at the top but cannot certify
    shares smaller than that (``START_RULES``; measured in docs/thresholds.md).

    Example:
        >>> rng = np.random.default_rng(0)
        >>> s = rng.uniform(0.5, 1.0, 5000)
        >>> fit = fit_error_threshold(s, rng.uniform(size=5000) < s, target=0.05, delta=0.1)
        >>> fit.certified and 0.85 < fit.threshold < 1.0
        True
    """
    check_start(start)
    scores = np.asarray(scores, dtype=float)
    correct = np.asarray(correct, dtype=bool)
    if scores.shape != correct.shape:
        raise ValueError(f"scores and correct must have the same length, got {scores.shape} and {correct.shape}")
    level = delta / (max_failures + 1)
    n_needed = min_accepted_for(target, level)
    pilot, testing = pilot_split(len(scores), pilot_fraction, seed)
    fit = ThresholdFit(threshold=1.0, certified=False, target=target, delta=delta, n=len(scores), n_pilot=len(pilot))
    if len(testing) < n_needed:
        fit.reason = (
            f"{len(testing)} testing decisions cannot certify an error of {target} at confidence {1 - delta}: "
            f"at least {n_needed} accepted decisions (all correct) are needed"
        )
        return fit
    n_start = _start_size(start, target, level, n_needed, start_margin, len(testing))
    sequence = threshold_sequence(scores[pilot], len(testing), n_start, step)
    test_scores, test_wrong = scores[testing], ~correct[testing]
    failures = 0
    for t in sequence:
        accepted_mask = test_scores >= t
        accepted = int(accepted_mask.sum())
        errors = int(test_wrong[accepted_mask].sum())
        p = error_p_value(errors, accepted, target)
        fit.tested.append({"threshold": t, "accepted": accepted, "errors": errors, "p_value": p})
        if p > level:
            failures += 1
            if failures > max_failures:
                break
            continue
        fit.threshold, fit.certified = t, True
        fit.accepted, fit.errors, fit.p_value = accepted, errors, p
    if not fit.certified:
        first = fit.tested[0] if fit.tested else None
        fit.reason = (
            f"no threshold could be certified: the first step (p >= {first['threshold']:.4g}) accepted "
            f"{first['accepted']} with {first['errors']} errors, p-value {first['p_value']:.3g} > {level:.3g}"
            if first
            else f"no threshold could be certified: by the pilot, no threshold accepts the "
            f"{n_start} of {len(testing)} testing decisions a first test needs"
        )
    return fit


START_RULES = ("first", "robust")
"""Where ``fit_error_threshold``'s fixed sequence begins."""


def check_start(start: str) -> None:
    """Refuse a sequence start that is not one of ``START_RULES``."""
    if start not in START_RULES:
        raise ValueError(f"unknown sequence start {start!r}; allowed: {', '.join(START_RULES)}")


def _start_size(start: str, target: float, level: float, n_needed: int, start_margin: float, testing: int) -> int:
    """How many testing decisions the first threshold of the sequence should accept (``start`` checked)."""
    if start == "first":
        return min(int(math.ceil(start_margin * n_needed)), testing)
    return max(n_needed, min(accepted_for_power(target / 4, target, level, 0.8), testing // 2))


@dataclass
class ShareFit:
    """The outcome of ``fit_share_threshold``: ``threshold`` and the calibration share below it."""

    threshold: float
    max_share: float
    delta: float
    n: int
    below: int

    def summary(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def fit_share_threshold(scores: np.ndarray, max_share: float, delta: float) -> ShareFit:
    """Highest threshold with ``P(p < threshold) <= max_share`` with probability ``>= 1 - delta``.

    The threshold is the k-th smallest score, with k the largest for which
    ``P(Binomial(n, max_share) <= k - 1) <= delta`` (the share below the k-th order statistic is
    ``Beta(k, n - k + 1)``; ties only make it smaller). Returns ``0.0`` when even k = 1 fails.

    Example:
        >>> fit_share_threshold(np.linspace(0, 1, 1001), max_share=0.1, delta=0.1).threshold < 0.1
        True
    """
    if not 0.0 <= max_share <= 1.0:
        raise ValueError(f"max_share must be in [0, 1], got {max_share}")
    ordered = np.sort(np.asarray(scores, dtype=float))
    n = len(ordered)
    best = 0
    for k in range(1, n + 1):
        if binomial_cdf(k - 1, n, max_share) <= delta:
            best = k
        else:
            break
    threshold = float(ordered[best - 1]) if best else 0.0
    return ShareFit(threshold=threshold, max_share=max_share, delta=delta, n=n, below=int((ordered < threshold).sum()))
