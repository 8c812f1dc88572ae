"""Lane thresholds with a finite-sample guarantee (Learn-then-Test), per question and per route.

Needs numpy (and matplotlib for the PNG curves); ``import clef_agents`` does not import this.

Example:
    >>> from clef_agents.thresholds import fit_lanes, decision_samples, synthetic_records
    >>> samples = decision_samples(synthetic_records(3000, seed=0))
    >>> policy = fit_lanes(samples, max_auto_error=0.02).policy
    >>> policy.questions["team"].fit["certified"]
    True
"""

from clef_agents.thresholds.fit import METHOD, BandFit, Costs, HumanRule, LaneFit, LaneShares, fit_band, fit_lanes, lane_shares
from clef_agents.thresholds.records import (
    PROBABILITIES_KEY,
    ROUTE_KEY,
    DecisionSample,
    decision_samples,
    load_decision_records,
    predict_probabilities,
    with_probabilities,
)
from clef_agents.thresholds.stats import (
    ShareFit,
    ThresholdFit,
    binomial_cdf,
    clopper_pearson_upper,
    error_p_value,
    fit_error_threshold,
    fit_share_threshold,
    min_accepted_for,
)
from clef_agents.thresholds.synthetic import SyntheticScores, synthetic_records

__all__ = [
    "METHOD", "PROBABILITIES_KEY", "ROUTE_KEY", "BandFit", "Costs", "DecisionSample", "HumanRule", "LaneFit",
    "LaneShares", "ShareFit", "SyntheticScores", "ThresholdFit", "binomial_cdf", "clopper_pearson_upper",
    "decision_samples", "error_p_value", "fit_band", "fit_error_threshold", "fit_lanes", "fit_share_threshold",
    "lane_shares", "load_decision_records", "min_accepted_for", "predict_probabilities", "synthetic_records",
    "with_probabilities",
]
