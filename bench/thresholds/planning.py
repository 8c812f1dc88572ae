"""How many labelled records does a 1 % guarantee need? Checks ``clef_agents.thresholds.planning``.

Three parts, written to ``bench/thresholds/results/planning.{json,md,png}``:

1. *Truth check* (synthetic scorer, error known in closed form): for an automatic share ``s`` and a
   power ``p``, draw ``records_needed(...)`` records many times and count how often (a) the single
   exact binomial test at the true threshold of share ``s`` certifies the target — this should be
   about ``p`` — and (b) the shipped fit (``fit_error_threshold``: pilot, fixed sequence) reaches a
   true coverage of at least ``s`` minus one sequence step (0.5 %).
2. *The models' own error curves*: the planning table on the full TEST split of banking77 and
   clinc150 (cached predictions of ``validate.py``), at targets 1 % and 2 %.
3. *Bootstrap* (banking77): draws of ``records_needed`` records resampled from its test split, and
   how often the shipped fit reached the share.

Command:
    .venv/bin/python bench/thresholds/planning.py --model mini --draws 300
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from clef_agents.thresholds import SyntheticScores, fit_error_threshold
from clef_agents.thresholds.planning import planning_table, records_needed, single_test_power
from clef_agents.thresholds.stats import error_p_value, pilot_split

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from validate import cached_predictions  # noqa: E402

DELTA = 0.1
POWERS = (0.5, 0.8)


def threshold_for_share(truth: SyntheticScores, share: float) -> float:
    """The threshold a synthetic scorer accepts exactly ``share`` of its decisions at."""
    return 1.0 - truth.max_error * share**truth.gamma


def truth_check(share: float, target: float, draws: int, rng: np.random.Generator) -> list[dict[str, Any]]:
    truth = SyntheticScores()
    threshold = threshold_for_share(truth, share)
    error = truth.true_error(threshold)
    rows = []
    for power in POWERS:
        n = records_needed(error, share, target, DELTA, power=power)
        single = fitted = 0
        for draw in range(draws):
            scores, correct = truth.sample(n, rng)
            _, testing = pilot_split(n, 0.1, seed=draw)
            accepted = scores[testing] >= threshold
            single += error_p_value(int((~correct[testing][accepted]).sum()), int(accepted.sum()), target) <= DELTA
            fit = fit_error_threshold(scores, correct, target, DELTA, seed=draw)
            fitted += fit.certified and truth.true_coverage(fit.threshold) >= share - 0.005
        rows.append({"share": share, "target": target, "true_error": round(error, 6), "power": power, "records": n,
                     "single_test_certified": round(single / draws, 4), "fit_reached_share": round(fitted / draws, 4),
                     "draws": draws})
    return rows


def bootstrap(scores: np.ndarray, correct: np.ndarray, share: float, target: float, draws: int,
              rng: np.random.Generator) -> list[dict[str, Any]]:
    (row,) = planning_table(scores, correct, target, DELTA, shares=[share], powers=POWERS)
    out = []
    for power, n in row["records_needed"].items():
        if n is None:
            continue
        reached = []
        for draw in range(draws):
            pick = rng.integers(0, len(scores), n)
            fit = fit_error_threshold(scores[pick], correct[pick], target, DELTA, seed=draw)
            reached.append(float((scores[pick] >= fit.threshold).mean()) if fit.certified else 0.0)
        reached_arr = np.array(reached)
        out.append({"share": share, "target": target, "error": row["error"], "power": float(power), "records": n,
                    "fit_reached_share": round(float((reached_arr >= share - 0.005).mean()), 4),
                    "coverage_mean": round(float(reached_arr.mean()), 4), "draws": draws})
    return out


def power_curves(scores: np.ndarray, correct: np.ndarray, target: float, shares: list[float]) -> dict[str, Any]:
    order = np.argsort(-scores, kind="stable")
    wrong = np.cumsum(~correct[order])
    sizes = np.unique(np.geomspace(500, 30000, 60).astype(int))
    curves = {}
    for share in shares:
        accepted = int(np.ceil(share * len(scores)))
        error = float(wrong[accepted - 1] / accepted)
        curves[f"{share:g}"] = {"error": error, "records": sizes.tolist(),
                                "power": [round(single_test_power(int(share * n * 0.9), error, target, DELTA), 4) for n in sizes]}
    return curves


def plot(curves: dict[str, Any], n_half: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for share, curve in curves.items():
        ax.plot(curve["records"], curve["power"], label=f"{float(share):.0%} automatic (error there {100 * curve['error']:.2f} %)")
    ax.axvline(n_half, color="grey", ls="--", lw=1, label=f"{n_half} records (the validation halves)")
    ax.set_xscale("log")
    ax.set_xlabel("labelled calibration records")
    ax.set_ylabel("chance one test certifies 1 % (δ = 0.1)")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(report: dict[str, Any]) -> str:
    lines = ["# How many labelled records a guarantee needs", "", f"Command: `{report['command']}`", "",
             f"δ = {DELTA} (confidence {1 - DELTA:g}); pilot 10 %; `clef_agents.thresholds.planning`.", "",
             "## 1. Truth check (synthetic scorer, error known exactly)", "",
             "| share | target | true error there | power asked | records | single test certified | shipped fit reached the share (− 0.5 %) |",
             "|---|---|---|---|---|---|---|"]
    for r in report["truth_check"]:
        lines.append(f"| {r['share']:.0%} | {r['target']:.0%} | {100 * r['true_error']:.2f} % | {r['power']:.0%} | {r['records']:,} | "
                     f"{r['single_test_certified']:.1%} | {r['fit_reached_share']:.1%} |")
    lines += ["", f"{report['truth_check'][0]['draws']} draws per row.", "",
              "## 2. The planning table on the models' test splits", ""]
    for name, section in report["models"].items():
        for target, rows in section["tables"].items():
            lines += [f"**{name}** ({section['n']} records, model `{section['model']}`), target {float(target):.0%}:", "",
                      "| automatic share | error there | power with all records | records for 50 % power | for 80 % power |",
                      "|---|---|---|---|---|"]
            for r in rows:
                need = [f"{v:,}" if v is not None else "never" for v in r["records_needed"].values()]
                lines.append(f"| {r['share']:.0%} | {100 * r['error']:.2f} % | {r['power_now']:.2f} | {need[0]} | {need[1]} |")
            lines.append("")
    lines += ["## 3. Bootstrap on banking77's test split", "",
              "| share | error there | power asked | records | shipped fit reached the share | mean coverage |", "|---|---|---|---|---|---|"]
    for r in report["bootstrap"]:
        lines.append(f"| {r['share']:.0%} | {100 * r['error']:.2f} % | {r['power']:.0%} | {r['records']:,} | "
                     f"{r['fit_reached_share']:.1%} | {r['coverage_mean']:.1%} |")
    lines += ["", f"Plot: `{report['plot']}`.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mini")
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2026)
    start = time.perf_counter()
    report: dict[str, Any] = {
        "command": ".venv/bin/python bench/thresholds/planning.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": platform.platform(), "delta": DELTA, "truth_check": [], "models": {}, "bootstrap": [],
    }
    for share, target in ((0.6, 0.01), (0.7, 0.01), (0.75, 0.02)):
        report["truth_check"] += truth_check(share, target, args.draws, rng)
    data = {}
    for name in ("banking77", "clinc150"):
        cached = cached_predictions(name, args.model, 32)
        scores, correct = cached["scores"], cached["correct"].astype(bool)
        data[name] = (scores, correct)
        report["models"][name] = {"n": len(scores), "model": args.model,
                                  "tables": {f"{t:g}": planning_table(scores, correct, t, DELTA) for t in (0.01, 0.02)}}
    scores, correct = data["banking77"]
    report["bootstrap"] = bootstrap(scores, correct, 0.75, 0.01, args.draws, rng)
    curves = power_curves(scores, correct, 0.01, [0.6, 0.7, 0.75])
    report["power_curves_banking77"] = curves
    report["plot"] = "planning_banking77.png"
    plot(curves, len(scores) // 2, out / report["plot"], f"banking77 test split, model {args.model}: power of one test at 1 %")
    report["seconds"] = round(time.perf_counter() - start, 1)
    (out / "planning.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "planning.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
