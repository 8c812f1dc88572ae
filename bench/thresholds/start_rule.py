"""Where should the fixed sequence of the lane fit start? A measurement, not a library change.

``fit_error_threshold`` starts its fixed sequence of tests at the threshold that accepts 1.25x the
all-correct minimum (288 records at a 1 % target, confidence 0.9): one confident error there ends
the sequence and nothing is certified. On banking77, whose most confident errors are label noise
at about 0.3 %, that happens in most calibration draws. This script compares, over the same random
50/50 splits of each TEST split (and synthetic scorers with a known truth):

- ``first``: the library's default (``fit_error_threshold(..., start="first")``);
- ``robust``: the library's ``fit_error_threshold(..., start="robust")``, one entry at the threshold
  accepting the fewest records with which the first test passes with probability 0.8 when the error
  rate is a quarter of the target (at most half the testing records; ``planning.accepted_for_power``);
- ``fallback``: both entries, each at delta/2, by the fallback procedure (Wiens 2003): a rejection
  passes its level on down the sequence, so an unbroken run from the early entry continues at the
  full delta past the late (robust) one, and a broken one starts again at the late entry with delta/2.

All three control the family-wise error at delta. Command (writes bench/thresholds/results/start_rule.{json,md}):
    .venv/bin/python bench/thresholds/start_rule.py --model mini --splits 200
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate import cached_predictions  # noqa: E402

from clef_agents.thresholds import SyntheticScores, fit_error_threshold  # noqa: E402
from clef_agents.thresholds.planning import accepted_for_power  # noqa: E402
from clef_agents.thresholds.stats import (  # noqa: E402
    error_p_value,
    min_accepted_for,
    pilot_split,
    threshold_sequence,
)

HERE = Path(__file__).resolve().parent
DELTA = 0.1
TARGETS = (0.01, 0.02, 0.05)
GENERATORS = {"synthetic calibrated": SyntheticScores(),
              "synthetic over-confident": SyntheticScores(gamma=4.0, max_error=0.4, miscalibration=1.8)}


def fit_with_entries(scores: np.ndarray, correct: np.ndarray, target: float, early_share: float, seed: int) -> float:
    """Act threshold from a fixed sequence with an early entry at ``early_share * DELTA`` and a late
    entry at the rest; 1.0 when nothing is certified."""
    pilot, testing = pilot_split(len(scores), 0.1, seed)
    early_level, late_level = early_share * DELTA, (1.0 - early_share) * DELTA
    n_late = min(accepted_for_power(target / 4, target, late_level, 0.8), len(testing) // 2)
    n_early = min(math.ceil(1.25 * min_accepted_for(target, early_level)), len(testing))
    n_late = max(n_late, n_early)
    sequence = threshold_sequence(scores[pilot], len(testing), n_early)
    late = threshold_sequence(scores[pilot], len(testing), n_late)
    late_index = sequence.index(late[0]) if late else len(sequence)
    test_scores, test_wrong = scores[testing], ~correct[testing]
    carried, best = 0.0, 1.0
    for index, t in enumerate(sequence):
        level = carried + (early_level if index == 0 else 0.0) + (late_level if index == late_index else 0.0)
        if level == 0.0:
            continue
        accepted = test_scores >= t
        if error_p_value(int(test_wrong[accepted].sum()), int(accepted.sum()), target) > level:
            carried = 0.0
            if index >= late_index:
                break
            continue
        carried, best = level, t
    return best


RULES = {
    "first": lambda s, c, target, seed: fit_error_threshold(s, c, target, DELTA, seed=seed).threshold,
    "robust": lambda s, c, target, seed: fit_error_threshold(s, c, target, DELTA, seed=seed, start="robust").threshold,
    "fallback": lambda s, c, target, seed: fit_with_entries(s, c, target, 0.5, seed),
}


def measure_dataset(scores: np.ndarray, correct: np.ndarray, target: float, splits: int) -> dict[str, dict[str, float]]:
    """Per rule: mean / p5 / median coverage and share of splits with realised error <= target."""
    n, out = len(scores), {}
    for rule, fit in RULES.items():
        coverage, held = [], []
        for split in range(splits):
            order = np.random.default_rng(split).permutation(n)
            calib, test = order[: n // 2], order[n // 2 :]
            accepted = scores[test] >= fit(scores[calib], correct[calib], target, split)
            coverage.append(float(accepted.mean()))
            held.append(float((~correct[test][accepted]).mean() if accepted.any() else 0.0) <= target)
        out[rule] = {"coverage_mean": float(np.mean(coverage)), "coverage_p5": float(np.percentile(coverage, 5)),
                     "coverage_p50": float(np.median(coverage)), "held": float(np.mean(held))}
    return out


def measure_generator(generator: SyntheticScores, target: float, splits: int, n: int = 1500) -> dict[str, dict[str, float]]:
    """Per rule: mean true coverage and the share of draws whose true error is <= target."""
    rng = np.random.default_rng(7)
    draws = [generator.sample(n, rng) for _ in range(splits)]
    out = {}
    for rule, fit in RULES.items():
        thresholds = [fit(s, c, target, seed) for seed, (s, c) in enumerate(draws)]
        coverage = [generator.true_coverage(t) if t < 1.0 else 0.0 for t in thresholds]
        out[rule] = {"coverage_mean": float(np.mean(coverage)), "coverage_p5": float(np.percentile(coverage, 5)),
                     "coverage_p50": float(np.median(coverage)),
                     "held": float(np.mean([generator.true_error(t) <= target for t in thresholds]))}
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Where the fixed sequence starts: `first` (the default) vs `robust` vs both entries (fallback)", "",
             f"Command: `{report['command']}`", "",
             f"Confidence {1 - DELTA}; real sets: {report['splits']} random 50/50 splits of the TEST split (fitted on one half, "
             "measured on the other; 'held' = share of splits with realised error <= target); synthetic: "
             f"{report['splits']} draws of 1,500 records, coverage and 'held' from the known truth.", "",
             "| data | target | " + " | ".join(f"{rule}: coverage mean (p5) / held" for rule in RULES) + " |",
             "|---|---|" + "---|" * len(RULES)]
    for name, by_target in report["results"].items():
        for target, rules in by_target.items():
            cells = [f"{r['coverage_mean']:.1%} ({r['coverage_p5']:.1%}) / {r['held']:.0%}" for r in rules.values()]
            lines.append(f"| {name} | {float(target):.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="mini")
    parser.add_argument("--datasets", nargs="*", default=["banking77", "clinc150", "hwu64", "hate_offensive"])
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    command = f".venv/bin/python bench/thresholds/start_rule.py --model {args.model} --splits {args.splits}" + (
        "" if args.datasets == parser.get_default("datasets") else " --datasets " + " ".join(args.datasets))
    results: dict[str, Any] = {}
    for name in args.datasets:
        predictions = cached_predictions(name, args.model, args.batch_size)
        scores, correct = predictions["scores"], predictions["correct"].astype(bool)
        results[name] = {str(t): measure_dataset(scores, correct, t, args.splits) for t in TARGETS}
        print(name, json.dumps(results[name]["0.01"]), flush=True)
    for name, generator in GENERATORS.items():
        results[name] = {str(t): measure_generator(generator, t, args.splits) for t in TARGETS}
        print(name, json.dumps(results[name]["0.01"]), flush=True)
    report = {"command": command, "splits": args.splits, "results": results}
    out = HERE / "results"
    (out / "start_rule.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "start_rule.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
