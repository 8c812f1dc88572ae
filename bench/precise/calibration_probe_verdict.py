"""The verdict of rule_calibration_probe.md (stop 39): the union-probe Platt against shipped ``precise`` on bench/general.

Reads two bench/general results (the candidate's run, and stop 38's run of shipped ``precise`` on the same nine yes/no
tasks, rows and precision) and applies the rule as written:

- check: every yes/no wording's AUROC equals the shipped one's (Platt with a > 0 keeps every ranking), else the
  runs are not comparable and nothing is judged;
- ships when the mean yes/no ECE and NLL are both lower, and neither the negation complement share nor the
  yes/no = yes/no choice agreement is lower.

Run:   .venv/bin/python bench/precise/calibration_probe_verdict.py
Writes bench/precise/calibration_probe_verdict.{json,md}. Reads no LM.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.general.metrics import finite_mean
from bench.general.tasks import WORDINGS
from bench.reports import write_report

HERE = Path(__file__).resolve().parent
AUROC_TOLERANCE = 1e-6
SHIPPED = (ROOT / "bench/general/results_precise_both_forms/results.json", "precise")
CANDIDATE = (ROOT / "bench/general/results_precise_union/results.json", "precise_union")
NOT_LOWER = ("negation_share_within", "yes_no_vs_choice_agreement")
LOWER = ("ece_mean", "nll_mean")


def method_figures(path: Path, key: str) -> dict[str, Any]:
    """One method's yes/no figures from a bench/general results file: per-wording AUROC and the rule's means."""
    results = json.loads(path.read_text(encoding="utf-8"))
    if key not in results["methods"]:
        raise SystemExit(f"{path} has no method {key!r}; it has {', '.join(results['methods'])}")
    tasks = [t for t in results["methods"][key]["tasks"] if t["type"] == "noul" and not t.get("seen")]
    summary = results["methods"][key]["summary"]["noul"]
    return {
        "auroc": {f"{t['task']}/{w}": t["variants"][w]["auroc"] for t in tasks for w in WORDINGS},
        "auroc_mean": summary["auroc_mean"],
        "ece_mean": summary["ece_mean"],
        "ece_floor_mean": summary.get("ece_floor_mean"),
        "nll_mean": finite_mean(t["nll_over_wordings"]["mean"] for t in tasks),
        "negation_share_within": summary["negation_share_within"],
        "yes_no_vs_choice_agreement": summary["yes_no_vs_choice_agreement"],
        "n_per_task": results["meta"]["n_per_task"],
    }


def verdict(shipped: dict[str, Any], candidate: dict[str, Any]) -> dict[str, Any]:
    """The rule applied to the two methods' figures."""
    if shipped["auroc"].keys() != candidate["auroc"].keys() or shipped["n_per_task"] != candidate["n_per_task"]:
        return {"comparable": False, "ships": False,
                "why": "the runs cover different tasks, wordings or rows"}
    moved = {k: (shipped["auroc"][k], candidate["auroc"][k]) for k in shipped["auroc"]
             if abs(shipped["auroc"][k] - candidate["auroc"][k]) > AUROC_TOLERANCE}
    if moved:
        return {"comparable": False, "ships": False, "auroc_moved": moved,
                "why": f"{len(moved)} wordings' AUROC moved, so the margins differ from the shipped run's"}
    conditions = {f"{k} lower": candidate[k] < shipped[k] for k in LOWER}
    conditions.update({f"{k} not lower": candidate[k] >= shipped[k] for k in NOT_LOWER})
    return {"comparable": True, "conditions": conditions, "ships": all(conditions.values())}


def run(args: argparse.Namespace) -> dict[str, Any]:
    shipped = method_figures(args.shipped, args.shipped_key)
    candidate = method_figures(args.candidate, args.candidate_key)
    return {
        "command": " ".join([".venv/bin/python bench/precise/calibration_probe_verdict.py", *sys.argv[1:]]),
        "shipped": {"results": str(args.shipped.relative_to(ROOT)) if args.shipped.is_relative_to(ROOT) else str(args.shipped),
                    "key": args.shipped_key, **{k: v for k, v in shipped.items() if k != "auroc"}},
        "candidate": {"results": str(args.candidate.relative_to(ROOT)) if args.candidate.is_relative_to(ROOT) else str(args.candidate),
                      "key": args.candidate_key, **{k: v for k, v in candidate.items() if k != "auroc"}},
        "verdict": verdict(shipped, candidate),
    }


def render(result: dict[str, Any]) -> str:
    """The verdict as markdown."""
    s, c, v = result["shipped"], result["candidate"], result["verdict"]

    def cell(value: Any) -> str:
        return "—" if value is None else f"{value:.4f}"

    lines = ["# The precise tier's yes/no calibration probe: the verdict (rule_calibration_probe.md)", "",
             f"Command: `{result['command']}`.", "",
             f"| | shipped (`{s['key']}`, {s['results']}) | candidate (`{c['key']}`, {c['results']}) |", "|---|---:|---:|"]
    for key, title in (("auroc_mean", "yes/no AUROC, mean"), ("ece_mean", "ECE of p(yes), mean"),
                       ("ece_floor_mean", "ECE if perfectly calibrated (floor)"), ("nll_mean", "NLL of p(yes), mean"),
                       ("negation_share_within", "negation complement within 0.15"),
                       ("yes_no_vs_choice_agreement", "yes/no = yes/no choice")):
        lines.append(f"| {title} | {cell(s.get(key))} | {cell(c.get(key))} |")
    lines.append("")
    if not v["comparable"]:
        lines.append(f"Not judged: {v['why']}.")
    else:
        lines += ["Every wording's AUROC is the shipped one's (the check of the run).", ""]
        lines += [f"- {name}: {'yes' if held else 'no'}" for name, held in v["conditions"].items()]
        lines += ["", f"**{'Ships' if v['ships'] else 'Does not ship'}.**"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shipped", type=Path, default=SHIPPED[0], help="bench/general results with shipped precise")
    parser.add_argument("--shipped-key", default=SHIPPED[1])
    parser.add_argument("--candidate", type=Path, default=CANDIDATE[0], help="bench/general results with the candidate")
    parser.add_argument("--candidate-key", default=CANDIDATE[1])
    parser.add_argument("--out", type=Path, default=HERE / "calibration_probe_verdict", help="report stem")
    args = parser.parse_args(argv)
    result = run(args)
    write_report(args.out, result, render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
