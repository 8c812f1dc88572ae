"""Fit per-question (and per-route) lane bands with a finite-sample guarantee.

The act band comes from ``stats.fit_error_threshold`` (Learn-then-Test, fixed sequence, exact
binomial p-values): with probability at least ``confidence`` over the calibration draw, the error
rate among automatically accepted answers is at most ``max_auto_error``.

The LLM / human split (``HumanRule``) is one of:

- ``none``: no human lane (``human_below = 0``): everything not automatic goes to the LLM;
- ``share``: a human review budget: with probability at least ``confidence``, at most
  ``value`` of all decisions go to a human (``stats.fit_share_threshold``);
- ``llm_error``: the small model's proposal may be wrong at most ``value`` of the time on the
  decisions that do *not* reach a human (auto + LLM lanes together), certified like the act band;
  below that threshold a human decides. If nothing can be certified, every non-automatic
  decision goes to a human.

Example:
    >>> import numpy as np
    >>> from clef_agents.thresholds.records import DecisionSample
    >>> rng = np.random.default_rng(0)
    >>> s = rng.uniform(0.5, 1.0, 4000)
    >>> sample = DecisionSample("q", s, rng.uniform(size=4000) < s, [None] * 4000)
    >>> result = fit_lanes({"q": sample}, max_auto_error=0.05, human=HumanRule("share", 0.1))
    >>> band = result.policy.band("q")
    >>> 0.5 < band.human_below < band.auto_at < 1.0
    True
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from clef_agents.policy import Band, LanePolicy, QuestionBands
from clef_agents.thresholds.planning import planning_table
from clef_agents.thresholds.records import DecisionSample
from clef_agents.thresholds.stats import (
    ThresholdFit,
    check_start,
    fit_error_threshold,
    fit_share_threshold,
    min_accepted_for,
)

METHOD = "learn-then-test/fixed-sequence/exact-binomial"
"""Name written into each question's ``fit`` metadata."""


@dataclass
class Costs:
    """User costs, in any one unit: an automatic error, an LLM call, a human review.

    ``llm_error_rate`` (default 0) charges ``auto_error`` for that share of LLM-lane decisions;
    human reviews are taken as correct.

    Example:
        >>> Costs(auto_error=10, llm_call=0.1, human_review=2).per_1000(LaneShares(0.8, 0.15, 0.05, 0.01, 100))
        195.0
    """

    auto_error: float = 5.0
    llm_call: float = 0.02
    human_review: float = 1.0
    llm_error_rate: float = 0.0

    def per_1000(self, shares: LaneShares) -> float:
        """Expected cost of 1,000 decisions split as ``shares``."""
        per_decision = (
            shares.auto * shares.auto_error * self.auto_error
            + shares.llm * (self.llm_call + self.llm_error_rate * self.auto_error)
            + shares.human * self.human_review
        )
        return round(1000.0 * per_decision, 6)


@dataclass
class LaneShares:
    """Share of decisions per lane and the error rate among automatic ones (on some data)."""

    auto: float
    llm: float
    human: float
    auto_error: float
    n: int


def lane_shares(scores: np.ndarray, correct: np.ndarray, auto_at: float, human_below: float) -> LaneShares:
    """Lane shares and automatic error rate of a band on labelled data.

    Example:
        >>> lane_shares(np.array([0.95, 0.7, 0.3]), np.array([True, False, True]), 0.9, 0.5)
        LaneShares(auto=0.333333, llm=0.333333, human=0.333333, auto_error=0.0, n=3)
    """
    n = len(scores)
    if n == 0:
        return LaneShares(0.0, 0.0, 0.0, 0.0, 0)
    auto = scores >= auto_at
    human = scores < human_below
    auto_errors = int((~correct[auto]).sum())
    return LaneShares(
        auto=round(float(auto.mean()), 6),
        llm=round(float((~auto & ~human).mean()), 6),
        human=round(float(human.mean()), 6),
        auto_error=round(auto_errors / int(auto.sum()), 6) if auto.any() else 0.0,
        n=n,
    )


@dataclass
class HumanRule:
    """How the human lane is drawn below the LLM lane: ``none``, ``share`` or ``llm_error``."""

    kind: Literal["none", "share", "llm_error"] = "none"
    value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("none", "share", "llm_error"):
            raise ValueError(f"unknown human rule {self.kind!r}; allowed: none, share, llm_error")
        if self.kind != "none" and not 0.0 < self.value < 1.0:
            raise ValueError(f"the {self.kind} value must lie strictly between 0 and 1, got {self.value}")


@dataclass
class BandFit:
    """One fitted band (for a question or a slice) with everything needed to report it."""

    band: Band
    auto: ThresholdFit
    human: dict[str, Any]
    calibration: LaneShares
    cost_per_1000: float

    def metadata(self, confidence: float) -> dict[str, Any]:
        """The JSON written into the policy's ``fit`` block."""
        return {
            "method": METHOD,
            "target": self.auto.target,
            "confidence": confidence,
            "certified": self.auto.certified,
            "n": self.auto.n,
            "n_pilot": self.auto.n_pilot,
            "p_value": round(self.auto.p_value, 6),
            "coverage": self.calibration.auto,
            "calibration_error": self.calibration.auto_error,
            "llm_share": self.calibration.llm,
            "human_share": self.calibration.human,
            "cost_per_1000": self.cost_per_1000,
            "human": self.human,
            **({"reason": self.auto.reason} if self.auto.reason else {}),
        }


def fit_band(
    sample: DecisionSample,
    max_auto_error: float,
    delta: float,
    *,
    human: HumanRule | None = None,
    costs: Costs | None = None,
    seed: int = 0,
    pilot_fraction: float = 0.1,
    start: str = "first",
) -> BandFit:
    """Fit the act threshold and the human threshold of one sample.

    Example:
        >>> s = np.linspace(0.5, 1, 1000)
        >>> fit_band(DecisionSample("q", s, s > 0.55, [None] * 1000), 0.05, 0.1).band.human_below
        0.0
    """
    human = human or HumanRule()
    costs = costs or Costs()
    auto = fit_error_threshold(
        sample.scores, sample.correct, max_auto_error, delta, pilot_fraction=pilot_fraction, seed=seed, start=start
    )
    human_below, human_meta = _human_threshold(sample, auto.threshold, delta, human, seed, pilot_fraction, start)
    band = Band(auto_at=auto.threshold, human_below=human_below)
    shares = lane_shares(sample.scores, sample.correct, band.auto_at, band.human_below)
    return BandFit(band=band, auto=auto, human=human_meta, calibration=shares, cost_per_1000=costs.per_1000(shares))


def _human_threshold(
    sample: DecisionSample, auto_at: float, delta: float, rule: HumanRule, seed: int, pilot_fraction: float, start: str
) -> tuple[float, dict[str, Any]]:
    if rule.kind == "none":
        return 0.0, {"rule": "none"}
    if rule.kind == "share":
        share = fit_share_threshold(sample.scores, rule.value, delta)
        return min(share.threshold, auto_at), {"rule": "share", "max_share": rule.value, "threshold": share.threshold}
    llm = fit_error_threshold(
        sample.scores, sample.correct, rule.value, delta, pilot_fraction=pilot_fraction, seed=seed, start=start
    )
    threshold = llm.threshold if llm.certified else auto_at
    meta = {"rule": "llm_error", "max_llm_error": rule.value, "certified": llm.certified, "threshold": threshold}
    if llm.reason:
        meta["reason"] = llm.reason
    return min(threshold, auto_at), meta


@dataclass
class LaneFit:
    """A fitted policy plus the report of how each question (and slice) was fitted."""

    policy: LanePolicy
    report: dict[str, Any]
    fits: dict[str, BandFit] = field(default_factory=dict)


def fit_lanes(
    samples: dict[str, DecisionSample],
    *,
    max_auto_error: float,
    confidence: float = 0.9,
    human: HumanRule | None = None,
    costs: Costs | None = None,
    min_slice: int = 200,
    seed: int = 0,
    pilot_fraction: float = 0.1,
    base: LanePolicy | None = None,
    start: str = "first",
) -> LaneFit:
    """Fit a lane policy: one band per question, plus one per route slice with ``min_slice``
    records or more (smaller slices fall back to the question's pooled band).

    ``base`` (optional) supplies the default band and keeps questions this data does not cover.
    ``start`` is where each fixed sequence begins (``stats.START_RULES``; see ``fit_error_threshold``).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")
    check_start(start)
    delta = 1.0 - confidence
    human = human or HumanRule()
    costs = costs or Costs()
    policy = base.model_copy(deep=True) if base else LanePolicy()
    report: dict[str, Any] = {
        "method": METHOD,
        "max_auto_error": max_auto_error,
        "confidence": confidence,
        "min_accepted_to_certify": min_accepted_for(max_auto_error, delta),
        "human_rule": asdict(human),
        "costs": asdict(costs),
        "min_slice": min_slice,
        "sequence_start": start,
        "questions": {},
    }
    fits: dict[str, BandFit] = {}
    options = {"human": human, "costs": costs, "seed": seed, "pilot_fraction": pilot_fraction, "start": start}
    for qid, sample in samples.items():
        pooled = fit_band(sample, max_auto_error, delta, **options)
        fits[qid] = pooled
        slice_bands, slice_meta = _fit_slices(sample, max_auto_error, delta, min_slice, options, confidence)
        meta = pooled.metadata(confidence)
        if slice_meta:
            meta["slices"] = slice_meta
        policy.questions[qid] = QuestionBands(
            auto_at=pooled.band.auto_at, human_below=pooled.band.human_below, slices=slice_bands, fit=meta
        )
        report["questions"][qid] = {
            "auto_at": pooled.band.auto_at,
            "human_below": pooled.band.human_below,
            **meta,
            "planning": planning_table(
                sample.scores, sample.correct, max_auto_error, delta, pilot_fraction=pilot_fraction
            ),
        }
    policy.meta.update(
        {
            "fitted_by": "clef_agents.thresholds",
            "method": METHOD,
            "max_auto_error": max_auto_error,
            "confidence": confidence,
            "costs": asdict(costs),
            "human_rule": asdict(human),
            "sequence_start": start,
        }
    )
    return LaneFit(policy=policy, report=report, fits=fits)


def _fit_slices(
    sample: DecisionSample,
    max_auto_error: float,
    delta: float,
    min_slice: int,
    options: dict[str, Any],
    confidence: float,
) -> tuple[dict[str, Band], dict[str, Any]]:
    names = sorted({s for s in sample.slices if s is not None})
    bands: dict[str, Band] = {}
    meta: dict[str, Any] = {}
    for name in names:
        mask = np.array([s == name for s in sample.slices])
        count = int(mask.sum())
        if count < min_slice:
            meta[name] = {"n": count, "fallback": "pooled", "reason": f"{count} records < min_slice {min_slice}"}
            continue
        fitted = fit_band(sample.subset(mask), max_auto_error, delta, **options)
        bands[name] = fitted.band
        meta[name] = {
            "auto_at": fitted.band.auto_at,
            "human_below": fitted.band.human_below,
            **fitted.metadata(confidence),
        }
    return bands, meta
