"""Choose the question reader's checkpoint, its calibration for untaught questions and whether to mix in
the routing head, on the reader's probe (``clef_agents.train.reader_probe``): questions on trainable sets
the reader never trained on. The untaught-question benchmark (bench/general) plays no part.

Rule, fixed before any measurement:
1. every candidate reader answers the probe with no calibration; the highest ``criterion`` (mean of the
   mean yes/no AUROC and the mean choice accuracy over probe sets) is chosen;
2. calibration: Platt (yes/no) and a choice temperature fitted on one half of the probe (split by a hash
   of the state) and checked on the other, both ways round, against the calibration fitted on the
   reader's own validation rows (what training writes);
3. prior correction (``ReaderConfig.prior_correction``, λ from ``CORRECTIONS``) and head mixing
   (log p = (1 − w)·log p_reader + w·log p_head, w from ``WEIGHTS``), each per type by the criterion's
   part, chosen on one half and checked on the other; a knob is kept only when adding it raises the
   out-of-fold criterion in both folds (the rule was tightened to this after the first run, whose
   whole-probe choices did not hold out of fold; that run is in the report);
4. ``--write`` saves the chosen reader with what was kept, chosen and calibrated on the whole probe
   (the score temperature, which the probe cannot fit, stays the one of its validation rows).

Run:   OMP_NUM_THREADS=1 CLEF_AGENTS_DATA=../shared/data .venv/bin/python bench/reader/probe.py \\
           --readers runs/reader_p1/step* runs/reader_p2/step* --model mini --write runs/reader_probe
Writes bench/reader/probe.json and bench/reader/probe.md.
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

from clef_agents.model.config import Calibration
from clef_agents.model.reader import QuestionReader

HERE = Path(__file__).resolve().parent
WEIGHTS = (0.0, 0.25, 0.5, 0.75)
CORRECTIONS = (0.0, 0.5, 1.0)
HEADLINE = {"noul": "noul_auroc", "choice": "choice_accuracy"}


def probabilities_from(reader: Any, items: list, logits: list, calibration: Any = None) -> list[list[float]]:
    """Answers from precomputed logits under ``calibration`` (None: uncalibrated)."""
    saved = reader.config.calibration
    reader.set_calibration(calibration or Calibration())
    try:
        return [reader.calibrated_log_probs(q, z).exp().tolist() for (_, q, _, _), z in zip(items, logits)]
    finally:
        reader.set_calibration(saved)


def corrected(reader: Any, items: list, logits: list, correction: dict[str, float]) -> list:
    """The reader's ``correct`` under ``correction`` (its prior logits come from its cache after the first call)."""
    return reader.correct([q for _, q, _, _ in items], logits, correction)


def head_probabilities(model_name: str, items: list) -> list[list[float]]:
    """The routing head's answers (the checkpoint without its reader), one question per request."""
    from clef_agents.model import ClefDecisionModel

    model = ClefDecisionModel.from_pretrained(model_name, reader=False)
    out: list[list[float]] = []
    for start in range(0, len(items), 64):
        chunk = items[start : start + 64]
        out += [p.probabilities[0] for p in model.engine.predict([(s, [q]) for s, q, _, _ in chunk])]
    return out


def mix(reader_probs: list[list[float]], head_probs: list[list[float]], items: list, weights: dict[str, float]) -> list[list[float]]:
    """``QuestionReader.mix_with_head`` per item, with the weight of the item's type."""
    return [QuestionReader.mix_with_head(r, h, weights.get(q.type, 0.0)) for (_, q, _, _), r, h in zip(items, reader_probs, head_probs)]


def validation_calibration(reader: Any, per_set: int) -> Any:
    """The calibration training writes: fitted on validation rows of the reader's own sets."""
    from clef_agents.train.reader import fit_calibration, typed_items
    from clef_agents.train.reader_data import reader_left_out_sets, reader_records

    return fit_calibration(reader, typed_items(reader_records("valid", per_set=per_set, seed=1, exclude=reader_left_out_sets())))


def probe_calibration(items: list, fallback: Any, logits: list) -> Any:
    """Platt and choice temperature fitted on probe items' (corrected) logits; the score temperature of ``fallback``."""
    from clef_agents.train.reader import fit_logit_calibration

    fitted = fit_logit_calibration([q for _, q, _, _ in items], logits, [g for _, _, g, _ in items])
    return fitted.model_copy(update={"score_temperature": fallback.score_temperature,
                                     "fitted_on": {**fitted.fitted_on, "source": "reader probe (untaught sets)",
                                                   "scores_from": "validation rows of the reader's sets"}})


def choose(reader: Any, items: list, logits: list, head: list, in_dist: Any,
           correct: bool = True, mixing: bool = True) -> dict[str, Any]:
    """On ``items``: the prior correction per type (by the criterion's part, uncalibrated; none unless
    ``correct``), then the calibration (Platt and choice temperature) on the corrected logits, then the
    head's weight per type (none unless ``mixing``)."""
    correction = {kind: max(CORRECTIONS if correct else (0.0,),
                            key=lambda lam: _part(items, probabilities_from(reader, items, corrected(reader, items, logits, {kind: lam})), kind))
                  for kind in HEADLINE}
    fixed = corrected(reader, items, logits, correction)
    fitted = probe_calibration(items, in_dist, fixed)
    probs = probabilities_from(reader, items, fixed, fitted)
    weights = {kind: max(WEIGHTS if mixing else (0.0,), key=lambda w: _part(items, mix(probs, head, items, {"noul": w, "choice": w}), kind))
               for kind in HEADLINE}
    return {"prior_correction": correction, "calibration": fitted.model_dump(), "head_weights": weights,
            "probabilities": mix(probs, head, items, weights)}


STEPS = {"probe calibration": (False, False), "+ prior correction": (True, False), "+ head mixing": (True, True),
         "probe calibration + head mixing": (False, True)}
"""The ladder checked out of fold: each step adds one knob, chosen on the fitting half."""


def fold(reader: Any, items: list, logits: list, head: list, in_dist: Any, fit_half: int) -> dict[str, Any]:
    """Each step of ``STEPS`` chosen on one half of the probe and checked on the other, beside the
    uncalibrated reader, the calibration training wrote, and the head alone."""
    from clef_agents.train.reader_probe import probe_half, probe_report

    fit = [i for i, item in enumerate(items) if probe_half(item) == fit_half]
    check = [i for i, item in enumerate(items) if probe_half(item) != fit_half]

    def pick(values: list, index: list) -> list:
        return [values[i] for i in index]

    check_items, check_logits, check_head = pick(items, check), pick(logits, check), pick(head, check)
    answers = {
        "uncalibrated": probabilities_from(reader, check_items, check_logits),
        "validation calibration (as trained)": probabilities_from(reader, check_items, check_logits, in_dist),
        "head alone": check_head,
    }
    chosen = {}
    for name, (correct, mixing) in STEPS.items():
        step = choose(reader, pick(items, fit), pick(logits, fit), pick(head, fit), in_dist, correct, mixing)
        chosen[name] = {k: v for k, v in step.items() if k != "probabilities"}
        probs = probabilities_from(reader, check_items, corrected(reader, check_items, check_logits, step["prior_correction"]),
                                   Calibration(**step["calibration"]))
        answers[name] = mix(probs, check_head, check_items, step["head_weights"])
    return {"fit_half": fit_half, "check_items": len(check), "chosen": chosen,
            "check": {name: probe_report(check_items, probs)["summary"] for name, probs in answers.items()}}


def kept_steps(folds: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Whether the prior correction, then the head mixing (on top of what was kept), raise the
    out-of-fold criterion in every fold."""
    def better(after: str, before: str) -> bool:
        return all((f["check"][after]["criterion"] or 0) > (f["check"][before]["criterion"] or 0) for f in folds)

    correct = better("+ prior correction", "probe calibration")
    mixing = better("+ head mixing", "+ prior correction") if correct else better("probe calibration + head mixing", "probe calibration")
    return correct, mixing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readers", nargs="+", required=True, help="candidate reader folders")
    parser.add_argument("--model", default="mini", help="checkpoint whose routing head is mixed in (default mini)")
    parser.add_argument("--rows", type=int, default=300, help="rows per probe set (default 300)")
    parser.add_argument("--valid-per-set", type=int, default=100, help="validation rows per set for the baseline calibration")
    parser.add_argument("--candidates-from", default=None, help="reuse the candidates' scores of an earlier probe.json (same items)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--write", default=None, help="save the chosen reader, calibrated on the probe, in this folder")
    parser.add_argument("--out", default=str(HERE / "probe"), help="output stem (default bench/reader/probe)")
    args = parser.parse_args()

    import torch

    from clef_agents.train.reader_probe import probe_items, probe_report

    torch.set_num_threads(args.threads)
    started = time.time()
    items = probe_items(args.rows)
    print(f"{len(items)} probe items", flush=True)
    candidates = {}
    scored = json.loads(Path(args.candidates_from).read_text())["candidates"] if args.candidates_from else {}
    for folder in args.readers:
        if folder in scored:
            candidates[folder] = scored[folder]
            continue
        reader = QuestionReader.load(folder)
        logits = reader.logits([(st, q) for st, q, _, _ in items])
        candidates[folder] = probe_report(items, probabilities_from(reader, items, logits))["summary"]
        print(folder, candidates[folder], flush=True)
    chosen = max(candidates, key=lambda f: candidates[f]["criterion"])
    reader = QuestionReader.load(chosen)
    logits = reader.logits([(st, q) for st, q, _, _ in items])
    in_dist = validation_calibration(reader, args.valid_per_set)
    head = head_probabilities(args.model, items)
    folds = [fold(reader, items, logits, head, in_dist, half) for half in (0, 1)]
    correct, mixing = kept_steps(folds)
    final = choose(reader, items, logits, head, in_dist, correct, mixing)
    result = {
        "command": " ".join(["python", "bench/reader/probe.py", *sys.argv[1:]]),
        "items": len(items), "wall_s": round(time.time() - started, 1),
        "candidates": candidates, "chosen": chosen, "validation_calibration": in_dist.model_dump(),
        "folds": folds, "kept": {"prior_correction": correct, "head_mixing": mixing},
        "final": {k: v for k, v in final.items() if k != "probabilities"},
        "chosen_report": probe_report(items, final["probabilities"]), "head_report": probe_report(items, head),
    }
    if args.write:
        reader.set_prior_correction(final["prior_correction"])
        reader.set_calibration(Calibration(**final["calibration"]))
        reader.set_head_weights(final["head_weights"])
        run = Path(chosen).parent / "summary.json"
        trained = json.loads(run.read_text(encoding="utf-8")) if run.is_file() else {}
        checkpoint_step = Path(chosen).name.removeprefix("step")
        if checkpoint_step.isdigit():
            trained = {**trained, "run_steps": trained.get("steps"), "steps": int(checkpoint_step), "checkpoint": chosen}
        trained["probe"] = {"command": result["command"], "candidates": len(candidates), "chosen": chosen,
                            "items": len(items), "report": "bench/reader/probe.md"}
        reader.config = reader.config.model_copy(update={"trained_on": {k: v for k, v in trained.items() if k not in ("final", "calibration")}})
        reader.save(args.write)
        result["written"] = args.write
    Path(args.out + ".json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    Path(args.out + ".md").write_text(render(result), encoding="utf-8")
    print(render(result))
    return 0


def _part(items: list, probs: list, kind: str) -> float:
    from clef_agents.train.reader_probe import probe_report

    value = probe_report(items, probs)["summary"][HEADLINE[kind]]
    return -1.0 if value is None else value


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render(result: dict[str, Any]) -> str:
    cols = ("noul_auroc", "choice_accuracy", "criterion", "nll", "ece")
    lines = [
        "# The question reader's probe: checkpoint, calibration and head mixing chosen on untaught sets",
        "",
        f"Command: `{result['command']}` ({result['items']} probe items, {result['wall_s']:.0f} s).",
        "Probe sets: clef_agents.train.split.READER_PROBE (left out of the reader's training) plus assebench_security",
        "and injecagent (never in it). bench/general's held-out sets play no part in any choice here.",
        "",
        "## Candidates (no calibration)",
        "",
        "| reader | " + " | ".join(cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for folder, summary in result["candidates"].items():
        mark = " (chosen)" if folder == result["chosen"] else ""
        lines.append(f"| {folder}{mark} | " + " | ".join(_fmt(summary[c]) for c in cols) + " |")
    lines += ["", "## Calibration and head mixing, fitted on one half of the probe, checked on the other", ""]
    for fold in result["folds"]:
        lines += [f"Fitted on half {fold['fit_half']}, checked on the other ({fold['check_items']} items). Chosen on the fitting half: "
                  + "; ".join(f"{name}: correction {c['prior_correction']}, head weights {c['head_weights']}" for name, c in fold["chosen"].items())
                  + ".", "", "| answers | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
        for name, summary in fold["check"].items():
            lines.append(f"| {name} | " + " | ".join(_fmt(summary[c]) for c in cols) + " |")
        lines.append("")
    kept = result["kept"]
    lines += [(f"A step is kept when it raises the out-of-fold criterion in both folds: prior correction "
              f"{'kept' if kept['prior_correction'] else 'not kept'}, head mixing {'kept' if kept['head_mixing'] else 'not kept'}."), ""]
    final = result["final"]
    cal = final["calibration"]
    lines += [(f"Chosen on the whole probe: prior correction {final['prior_correction']}; Platt a = {cal['noul_a']:.3f}, "
              f"b = {cal['noul_b']:.3f}, choice temperature {cal['choice_temperature']:.3f}, score temperature "
              f"{cal['score_temperature']:.3f} (validation rows); head mixing weights {final['head_weights']}."), ""]
    lines += ["## Chosen reader per probe set (whole probe, everything chosen on it: in-sample)", "",
              "| set | type | n | AUROC | accuracy | NLL | ECE |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, kinds in result["chosen_report"]["sets"].items():
        for kind, m in kinds.items():
            lines.append(f"| {name} | {kind} | {m['n']} | {_fmt(m.get('auroc'))} | {_fmt(m['accuracy'])} | {_fmt(m['nll'])} | {_fmt(m['ece'])} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
