"""How many labelled records a lane fit needs: the power of the act-band test, and the sample size.

``fit_error_threshold`` certifies a threshold when an exact binomial test rejects
``H0: error > target`` at level ``delta`` on the decisions it accepts. Whether that can succeed
depends on three numbers: how many decisions the threshold accepts, their true error rate, and the
target. This module answers the planning questions users ask after a fit that certified less than
they hoped:

- ``single_test_power``: with this many accepted decisions at this true error, how often does one test
  certify the target?
- ``records_needed``: how many labelled records (pilot included) would one test at a threshold
  with this coverage and error need to certify the target with a given power?
- ``planning_table``: both, for a range of automatic shares, at the error the calibration records
  show at each share.

Caveats (also in ``docs/thresholds.md``): the error at each share is an *estimate* from the same
records; and the fit runs a fixed sequence of tests from the top down, which stops at its first
failure, so the power of the whole procedure at a share is at most the power of the single test
there. Read ``records_needed`` as a lower bound.

The power of one exact test (``single_test_power``, ``critical_errors``, ``accepted_for_power``) is
computed in ``stats``, beside the test; it is importable from here as well.

Example:
    >>> records_needed(error_rate=0.005, coverage=0.75, target=0.01, delta=0.1, power=0.8) > 2000
    True
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from clef_agents.thresholds.stats import (  # the power of one exact test lives with the test itself
    accepted_for_power,
    check_rates,
    critical_errors,
    min_accepted_for,
    single_test_power,
)

__all__ = ["accepted_for_power", "critical_errors", "planning_table", "records_needed", "single_test_power"]

PLANNING_SHARES = (0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.95)
"""Automatic shares the calibrate report plans for."""

PLANNING_POWERS = (0.5, 0.8)
"""Powers the calibrate report gives record counts for."""

MAX_RECORDS = 10_000_000


def records_needed(
    error_rate: float,
    coverage: float,
    target: float,
    delta: float,
    *,
    power: float = 0.8,
    pilot_fraction: float = 0.1,
) -> int | None:
    """Fewest labelled records for which the test at a threshold accepting ``coverage`` of them
    (after the pilot share is set aside) has ``power`` to certify ``target``.

    ``None`` when no number of records can: the error rate is not below the target, or the
    answer would exceed ten million records. Steps of 1 % in the record count.

    Example:
        >>> records_needed(0.0, 0.5, 0.01, 0.1, power=0.99)  # 230 error-free accepted answers, pilot aside
        512
        >>> records_needed(0.012, 0.75, 0.01, 0.1) is None
        True
    """
    check_rates(error_rate=error_rate, coverage=coverage, power=power, target=target, delta=delta)
    if not 0.0 <= pilot_fraction < 1.0:
        raise ValueError(f"pilot_fraction must lie in [0, 1), got {pilot_fraction}")
    if error_rate >= target:
        return None
    usable = coverage * (1.0 - pilot_fraction)
    records = max(1, int(math.ceil(min_accepted_for(target, delta) / usable)))
    while records <= MAX_RECORDS:
        if single_test_power(int(usable * records), error_rate, target, delta) >= power:
            return records
        records = max(records + 1, int(records * 1.01))
    return None


def planning_table(
    scores: np.ndarray,
    correct: np.ndarray,
    target: float,
    delta: float,
    *,
    shares: Sequence[float] = PLANNING_SHARES,
    powers: Sequence[float] = PLANNING_POWERS,
    pilot_fraction: float = 0.1,
) -> list[dict[str, Any]]:
    """Per automatic share: the error the records show there, the power the fit had with the
    records at hand, and the records a test there would need.

    Example:
        >>> s = np.linspace(0.5, 1.0, 1000)
        >>> row = planning_table(s, s > 0.51, 0.01, 0.1, shares=[0.5])[0]
        >>> row["error"], row["power_now"] > 0.99, row["records_needed"]["0.8"]
        (0.0, True, 512)
    """
    scores = np.asarray(scores, dtype=float)
    correct = np.asarray(correct, dtype=bool)
    n = len(scores)
    if n == 0:
        return []
    order = np.argsort(-scores, kind="stable")
    wrong = np.cumsum(~correct[order])
    rows = []
    for share in shares:
        accepted = max(1, int(math.ceil(share * n)))
        error = float(wrong[accepted - 1] / accepted)
        usable = int(share * n * (1.0 - pilot_fraction))
        rows.append(
            {
                "share": share,
                "error": round(error, 6),
                "power_now": round(single_test_power(usable, error, target, delta), 4),
                "records_needed": {
                    f"{p:g}": records_needed(error, share, target, delta, power=p, pilot_fraction=pilot_fraction)
                    for p in powers
                },
            }
        )
    return rows
