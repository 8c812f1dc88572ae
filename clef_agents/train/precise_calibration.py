"""Calibrate the precise tier (a local instruct LM read in one prefill pass) on a probe of trainable sets.

Two probes (``clef_agents.train.reader_probe``), neither touching the untaught-question benchmark's
held-out sets (bench/general), so calibrating here does not tune on the benchmark:

- ``reader``: the question reader's probe (four sets the reader is never taught, plus the gate's sets;
  yes/no and choices, no ordinal questions);
- ``wide``: the reader recipe's yes/no, choice and score questions on every trainable set it reads. The
  LM was taught none of them, and these look more like what users ask (intents, topics, sentiment
  ladders, spam, reading questions).

Rules, fixed before the run:

1. The prior correction (``PrefillLM.prior_correction``, per question type): for each type in turn,
   each weight of ``--corrections`` is applied to that type's logits (the other types uncorrected); the
   weight with the highest criterion on the whole probe, uncalibrated, is kept (ties: the smaller).
2. Platt scaling for yes/no and a temperature each for choices and scores (``fit_logit_calibration``),
   fitted on one half of the probe (split by a hash of the state) and checked on the other, both ways
   round, then fitted on the whole probe.

``--write`` saves the settings (how options are answered, the correction, the calibration fitted on the
whole probe) beside the LM (in the package for ``precise``). The report goes to ``--out``
(``calibration_<answer>[_wide].{json,md}``); the shipped settings' report is bench/precise/calibration_name_wide.md.

Example:
    $ CLEF_AGENTS_DATA=../shared/data python -m clef_agents.train.precise_calibration --lm precise --answer name \\
          --probe wide --rows-per-set 30 --corrections 0,0.25,0.5,0.75,1 --write
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

WIDE_MIN_GROUP = 10
"""On the wide probe a set's yes/no or choice items count towards the criterion from this many (it has
more sets and fewer items of each type per set than the reader's probe)."""


def probe_logits(lm: Any, items: list) -> tuple[list, list]:
    """The LM's raw logits for each probe item (one request per item) and its prior logits for the
    item's question (content-free states, read once per distinct question)."""
    from tqdm import tqdm

    raw, priors = [], []
    for state, question, _, _ in tqdm(items, desc="probe", unit="q", mininterval=10):
        raw.append(lm.raw_logits(state, [question])[0][0])
        priors.append(lm.prior_logits(question))
    return raw, priors


def corrected(items: list, raw: list, priors: list, weights: dict[str, float]) -> list:
    """``raw − λ·prior`` per item, λ its question type's weight (what ``PrefillLM.logits`` gives with
    ``prior_correction=weights``)."""
    return [z - weights.get(q.type, 0.0) * b for (_, q, _, _), z, b in zip(items, raw, priors)]


def choose_correction(
    items: list, raw: list, priors: list, grid: list[float], min_group: int
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Rule 1: per question type, the weight with the highest uncalibrated criterion on the whole probe
    (the other types uncorrected; ties: the smaller weight)."""
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import PrefillLM
    from clef_agents.train.reader_probe import probe_report

    kept: dict[str, float] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for kind in sorted({q.type for _, q, _, _ in items}):
        for weight in grid:
            logits = corrected(items, raw, priors, {kind: weight})
            probabilities = [PrefillLM.calibrated_with(Calibration(), q, z) for (_, q, _, _), z in zip(items, logits)]
            summaries[f"{kind} {weight}"] = probe_report(items, probabilities, min_group=min_group)["summary"]
        best = max(sorted(grid), key=lambda w: (summaries[f"{kind} {w}"]["criterion"] or 0.0, -w))
        if best > 0:
            kept[kind] = best
    return kept, summaries


def answers(items: list, logits: list, calibration: Any) -> list[list[float]]:
    """Probabilities from precomputed logits under ``calibration``."""
    from clef_agents.model.precise import PrefillLM

    return [PrefillLM.calibrated_with(calibration, question, z) for (_, question, _, _), z in zip(items, logits)]


def fit(items: list, logits: list) -> Any:
    """Platt (yes/no) and the choice and score temperatures fitted on ``items``' logits."""
    from clef_agents.train.reader import fit_logit_calibration

    return fit_logit_calibration([q for _, q, _, _ in items], logits, [g for _, _, g, _ in items])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Read the probe with the LM, choose the correction (rule 1), fit and check the calibration (rule 2); the
    report's data. With ``args.write``, the LM's settings are saved with what was chosen and fitted."""
    import torch

    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import PrefillLM
    from clef_agents.train.reader_probe import (
        MIN_GROUP,
        probe_half,
        probe_items,
        probe_report,
        wide_probe_items,
    )

    torch.set_num_threads(args.threads)
    overrides = {"system_prompt": args.system_prompt} if args.system_prompt is not None else {}
    if args.single_form:
        overrides["noul_both_forms"] = False
    lm = PrefillLM.load(args.lm, calibration=Calibration(), answer=args.answer, prior_correction={}, **overrides)
    if lm.noul_both_forms:
        raise SystemExit(
            f"{args.lm}'s settings read yes/no questions in both forms (noul_both_forms), and this command fits "
            "the yes/no form alone: fit their Platt on rows read in both forms, as docs/experiments.md describes for the "
            "retired both_forms_calibration.py, or pass "
            "--single-form to calibrate (and, with --write, save) the yes/no form alone"
        )
    items = (wide_probe_items if args.probe == "wide" else probe_items)(rows_per_set=args.rows_per_set)
    started = time.perf_counter()
    raw, priors = probe_logits(lm, items)
    seconds = time.perf_counter() - started
    if args.save_logits:
        args.save_logits.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            {"raw": raw, "priors": priors, "rows_per_set": args.rows_per_set, "probe": args.probe}, args.save_logits
        )
    min_group = WIDE_MIN_GROUP if args.probe == "wide" else MIN_GROUP
    weight, by_weight = choose_correction(items, raw, priors, args.corrections, min_group)
    logits = corrected(items, raw, priors, weight)
    halves = [[i for i, item in enumerate(items) if probe_half(item) == h] for h in (0, 1)]
    folds = []
    for fit_half, check_half in ((0, 1), (1, 0)):
        fitted = fit([items[i] for i in halves[fit_half]], [logits[i] for i in halves[fit_half]])
        check = [items[i] for i in halves[check_half]]
        check_logits = [logits[i] for i in halves[check_half]]
        folds.append(
            {
                "fitted_on_half": fit_half,
                "calibration": fitted.model_dump(),
                "uncalibrated": probe_report(check, answers(check, check_logits, Calibration()), min_group=min_group)[
                    "summary"
                ],
                "calibrated": probe_report(check, answers(check, check_logits, fitted), min_group=min_group)["summary"],
            }
        )
    whole = fit(items, logits)
    result = {
        "lm": args.lm,
        "answer": args.answer,
        "probe": args.probe,
        "system_prompt": lm.system_prompt,
        "correction": weight,
        "by_correction": by_weight,
        "command": " ".join(
            ["CLEF_AGENTS_DATA=../shared/data python -m clef_agents.train.precise_calibration", *sys.argv[1:]]
        ),
        "items": len(items),
        "rows_per_set": args.rows_per_set,
        "seconds": round(seconds, 1),
        "uncalibrated": probe_report(items, answers(items, logits, Calibration()), min_group=min_group),
        "folds": folds,
        "calibration": whole.model_dump(),
        "calibrated_in_sample": probe_report(items, answers(items, logits, whole), min_group=min_group),
    }
    if args.write:
        from clef_agents.model.precise import settings_path

        lm.calibration = whole
        lm.prior_correction = weight
        target = lm.save_settings(settings_path(args.lm))
        result["written"] = str(target.relative_to(Path.cwd())) if target.is_relative_to(Path.cwd()) else str(target)
    return result


def render(result: dict[str, Any]) -> str:
    """The report as markdown."""

    def row(name: str, s: dict[str, Any]) -> str:
        cells = [s.get(k) for k in ("noul_auroc", "choice_accuracy", "nll", "ece", "criterion")]
        return f"| {name} | " + " | ".join("–" if c is None else f"{c:.3f}" for c in cells) + " |"

    lines = [
        f"# Precise tier: calibration on the {result.get('probe', 'reader')} probe",
        "",
        (
            f"Command: `{result['command']}` — {result['items']} probe items, {result['seconds']} s to read them; "
            f"options answered by {result['answer']}; system prompt: "
            f"{repr(result['system_prompt']) if result.get('system_prompt') else 'the chat template default'}."
        ),
        "",
    ]
    if "by_correction" in result:
        lines += [
            "Prior correction (rule 1: per question type, the highest criterion, uncalibrated, on the whole probe):",
            "",
            "| type, weight | yes/no AUROC | choice accuracy | NLL | ECE | criterion |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        lines += [row(weight, summary) for weight, summary in result["by_correction"].items()]
        lines += ["", f"Kept: prior_correction {result['correction'] or 'none'}.", ""]
    lines += [
        "| | yes/no AUROC | choice accuracy | NLL | ECE | criterion |",
        "|---|---:|---:|---:|---:|---:|",
        row("whole probe, uncalibrated", result["uncalibrated"]["summary"]),
    ]
    for fold in result["folds"]:
        other = 1 - fold["fitted_on_half"]
        lines.append(row(f"half {other}, uncalibrated", fold["uncalibrated"]))
        lines.append(row(f"half {other}, calibrated on half {fold['fitted_on_half']}", fold["calibrated"]))
    cal = result["calibration"]
    lines += [
        "",
        (
            f"Calibration fitted on the whole probe: Platt a = {cal['noul_a']:.3f}, b = {cal['noul_b']:.3f}; "
            f"choice temperature {cal['choice_temperature']:.3f}; score temperature {cal['score_temperature']:.3f} "
            f"(fitted on {cal['fitted_on']})."
        ),
        "",
        "## Per probe set (uncalibrated)",
        "",
        "| set | type | n | AUROC / accuracy | NLL | ECE |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, kinds in result["uncalibrated"]["sets"].items():
        for kind, m in kinds.items():
            lines.append(
                f"| {name} | {kind} | {m['n']} | {m.get('auroc', m['accuracy']):.3f} | {m['nll']:.3f} | {m['ece']:.3f} |"
            )
    return "\n".join(lines) + "\n"


def _weights(text: str) -> list[float]:
    """``--corrections``: weights in [0, 1], comma-separated."""
    try:
        weights = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"correction weights are numbers separated by commas, got {text!r}") from None
    if not weights or not all(0.0 <= w <= 1.0 for w in weights):
        raise argparse.ArgumentTypeError(f"correction weights must lie in [0, 1], got {text!r}")
    return weights


def main(argv: list[str] | None = None) -> int:
    """``python -m clef_agents.train.precise_calibration``: calibrate a local LM on a probe and write the report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="precise", help="'precise' or a local LM folder / .gguf file (default precise)")
    parser.add_argument("--rows-per-set", type=int, default=60, help="probe rows per set (default 60)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument(
        "--answer",
        choices=("letter", "name"),
        default="letter",
        help="how choice and score options are answered: by letter or by name (default letter)",
    )
    parser.add_argument(
        "--probe",
        choices=("reader", "wide"),
        default="wide",
        help="reader: the question reader's probe; wide: the reader recipe on every trainable set (default wide)",
    )
    parser.add_argument(
        "--corrections",
        type=_weights,
        default=[0.0],
        help="prior correction weights to choose from per question type, comma-separated in [0, 1] (default 0)",
    )
    parser.add_argument(
        "--system-prompt",
        default=None,
        help="the chat template's system message (default: the one in the LM's settings, else the template's own)",
    )
    parser.add_argument(
        "--single-form",
        action="store_true",
        help="read yes/no questions in their own form only (noul_both_forms off), as this script fits them",
    )
    parser.add_argument(
        "--save-logits", type=Path, default=None, help="also save the raw and prior logits (torch.save) here"
    )
    parser.add_argument(
        "--write",
        action="store_true",
        help="save the settings beside the LM: the answer mode and the calibration fitted on the whole probe",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("runs/precise_calibration"),
        help="report folder (default runs/precise_calibration)",
    )
    args = parser.parse_args(argv)
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"calibration_{args.answer}" + ("_wide" if args.probe == "wide" else "")
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
