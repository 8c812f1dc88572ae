"""Lane thresholds with a finite-sample guarantee (Learn-then-Test), per question and per route.

Needs numpy (and matplotlib for the PNG curves). Names load lazily, so importing
``clef_agents.thresholds.cli`` (for the ``calibrate`` flags) pulls in neither.

Example:
    >>> from clef_agents.thresholds import fit_lanes, decision_samples, synthetic_records
    >>> samples = decision_samples(synthetic_records(3000, seed=0))
    >>> policy = fit_lanes(samples, max_auto_error=0.02).policy
    >>> policy.questions["team"].fit["certified"]
    True
"""

from __future__ import annotations

from clef_agents.lazy import lazy_attributes

_EXPORTS = {
    "fit": ("METHOD", "BandFit", "Costs", "HumanRule", "LaneFit", "LaneShares", "fit_band", "fit_lanes", "lane_shares"),
    "planning": ("planning_table", "records_needed"),
    "records": (
        "PROBABILITIES_KEY",
        "ROUTE_KEY",
        "DecisionSample",
        "decision_samples",
        "load_decision_records",
        "predict_probabilities",
        "probability_vector",
        "with_probabilities",
    ),
    "stats": (
        "ShareFit",
        "ThresholdFit",
        "binomial_cdf",
        "clopper_pearson_upper",
        "critical_errors",
        "error_p_value",
        "fit_error_threshold",
        "fit_share_threshold",
        "min_accepted_for",
        "single_test_power",
    ),
    "synthetic": ("SyntheticScores", "synthetic_records"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


__getattr__, __dir__ = lazy_attributes(__name__, {n: f"{__name__}.{m}" for n, m in _MODULE_OF.items()}, globals())
