"""Calibrate the precise tier (a local instruct LM read in one prefill pass) on the reader's probe.

The probe (``clef_agents.train.reader_probe``) holds questions on trainable sets that neither the
question reader nor the untaught-question benchmark (bench/general) uses, so calibrating here does not
tune on the benchmark. Rule, fixed before the run: Platt scaling for yes/no and a temperature for
choices (``fit_logit_calibration``), fitted on one half of the probe (split by a hash of the state) and
checked on the other, both ways round; ``--write`` saves the settings (how options are answered, the calibration fitted on the whole probe)
beside the LM (in the package for ``precise``).
The probe has no ordinal questions, so the score temperature stays 1.

Run:   CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/calibrate.py --lm precise --write
Writes bench/precise/calibration_<answer>.json and .md (and, with --write, the LM's settings: ``clef_lm.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent


def probe_logits(lm: Any, items: list) -> list:
    """The LM's uncalibrated logits for each probe item (one request per item, states read once)."""
    from tqdm import tqdm

    return [lm.logits(state, [question])[0][0] for state, question, _, _ in tqdm(items, desc="probe", unit="q", mininterval=10)]


def answers(lm: Any, items: list, logits: list, calibration: Any) -> list[list[float]]:
    """Probabilities from precomputed logits under ``calibration``."""
    saved = lm.calibration
    lm.calibration = calibration
    try:
        return [lm.calibrated(question, z) for (_, question, _, _), z in zip(items, logits)]
    finally:
        lm.calibration = saved


def fit(items: list, logits: list) -> Any:
    from clef_agents.train.reader import fit_logit_calibration

    return fit_logit_calibration([q for _, q, _, _ in items], logits, [g for _, _, g, _ in items])


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from clef_agents.model.config import Calibration
    from clef_agents.model.prefill_lm import PrefillLM
    from clef_agents.train.reader_probe import probe_half, probe_items, probe_report

    torch.set_num_threads(args.threads)
    items = probe_items(rows_per_set=args.rows_per_set)
    lm = PrefillLM.load(args.lm, calibration=Calibration(), answer=args.answer)
    started = time.perf_counter()
    logits = probe_logits(lm, items)
    seconds = time.perf_counter() - started
    halves = [[i for i, item in enumerate(items) if probe_half(item) == h] for h in (0, 1)]
    folds = []
    for fit_half, check_half in ((0, 1), (1, 0)):
        fitted = fit([items[i] for i in halves[fit_half]], [logits[i] for i in halves[fit_half]])
        check = [items[i] for i in halves[check_half]]
        check_logits = [logits[i] for i in halves[check_half]]
        folds.append({
            "fitted_on_half": fit_half,
            "calibration": fitted.model_dump(),
            "uncalibrated": probe_report(check, answers(lm, check, check_logits, Calibration()))["summary"],
            "calibrated": probe_report(check, answers(lm, check, check_logits, fitted))["summary"],
        })
    whole = fit(items, logits)
    result = {
        "lm": args.lm,
        "answer": args.answer,
        "command": " ".join(["CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/precise/calibrate.py", *sys.argv[1:]]),
        "items": len(items),
        "rows_per_set": args.rows_per_set,
        "seconds": round(seconds, 1),
        "uncalibrated": probe_report(items, answers(lm, items, logits, Calibration())),
        "folds": folds,
        "calibration": whole.model_dump(),
        "calibrated_in_sample": probe_report(items, answers(lm, items, logits, whole)),
    }
    if args.write:
        from clef_agents.model.prefill_lm import settings_path

        lm.calibration = whole
        target = lm.save_settings(settings_path(args.lm))
        result["written"] = str(target.relative_to(ROOT)) if target.is_relative_to(ROOT) else str(target)
    return result


def render(result: dict[str, Any]) -> str:
    """The report as markdown."""
    def row(name: str, s: dict[str, Any]) -> str:
        cells = [s.get(k) for k in ("noul_auroc", "choice_accuracy", "nll", "ece", "criterion")]
        return f"| {name} | " + " | ".join("–" if c is None else f"{c:.3f}" for c in cells) + " |"

    lines = [
        "# Precise tier: calibration on the reader's probe", "",
        (f"Command: `{result['command']}` — {result['items']} probe items, {result['seconds']} s to read them; "
         f"options answered by {result['answer']}."), "",
        "| | yes/no AUROC | choice accuracy | NLL | ECE | criterion |", "|---|---:|---:|---:|---:|---:|",
        row("whole probe, uncalibrated", result["uncalibrated"]["summary"]),
    ]
    for fold in result["folds"]:
        other = 1 - fold["fitted_on_half"]
        lines.append(row(f"half {other}, uncalibrated", fold["uncalibrated"]))
        lines.append(row(f"half {other}, calibrated on half {fold['fitted_on_half']}", fold["calibrated"]))
    cal = result["calibration"]
    lines += ["", (f"Calibration fitted on the whole probe: Platt a = {cal['noul_a']:.3f}, b = {cal['noul_b']:.3f}; "
                   f"choice temperature {cal['choice_temperature']:.3f}; score temperature {cal['score_temperature']:.3f} "
                   f"(fitted on {cal['fitted_on']})."), "", "## Per probe set (uncalibrated)", "",
              "| set | type | n | AUROC / accuracy | NLL | ECE |", "|---|---|---:|---:|---:|---:|"]
    for name, kinds in result["uncalibrated"]["sets"].items():
        for kind, m in kinds.items():
            lines.append(f"| {name} | {kind} | {m['n']} | {m.get('auroc', m['accuracy']):.3f} | {m['nll']:.3f} | {m['ece']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="precise", help="'precise' or a local LM folder / .gguf file (default precise)")
    parser.add_argument("--rows-per-set", type=int, default=60, help="probe rows per set (default 60)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--answer", choices=("letter", "name"), default="letter",
                        help="how choice and score options are answered: by letter or by name (default letter)")
    parser.add_argument("--write", action="store_true",
                        help="save the settings beside the LM: the answer mode and the calibration fitted on the whole probe")
    parser.add_argument("--out", type=Path, default=HERE, help="report folder (default bench/precise)")
    args = parser.parse_args(argv)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"calibration_{args.answer}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"calibration_{args.answer}.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
