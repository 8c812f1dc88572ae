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
   out-of-fold criterion in both folds;
4. ``--write`` saves the chosen reader with what was kept, chosen and calibrated on the whole probe
   (the score temperature, which the probe cannot fit, stays the one of its validation rows).

The report (``--report``, default beside ``--write``: ``runs/reader_probe.{json,md}``) says what was chosen and why.

Example:
    $ CLEF_AGENTS_DATA=../shared/data clef-agents choose-reader --model mini \\
          --readers runs/reader_p1/step600 runs/reader_p2/step1800 --write runs/reader_probe
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WEIGHTS = (0.0, 0.25, 0.5, 0.75)
CORRECTIONS = (0.0, 0.5, 1.0)
HEADLINE = {"noul": "noul_auroc", "choice": "choice_accuracy"}


def probabilities_from(reader: Any, items: list, logits: list, calibration: Any = None) -> list[list[float]]:
    """Answers from precomputed logits under ``calibration`` (None: uncalibrated)."""
    from clef_agents.model.config import Calibration

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


def mix(
    reader_probs: list[list[float]], head_probs: list[list[float]], items: list, weights: dict[str, float]
) -> list[list[float]]:
    """``QuestionReader.mix_with_head`` per item, with the weight of the item's type."""
    from clef_agents.model.reader import QuestionReader

    return [
        QuestionReader.mix_with_head(r, h, weights.get(q.type, 0.0))
        for (_, q, _, _), r, h in zip(items, reader_probs, head_probs)
    ]


def validation_calibration(reader: Any, per_set: int) -> Any:
    """The calibration training writes: fitted on validation rows of the reader's own sets."""
    from clef_agents.train.reader import fit_calibration, typed_items
    from clef_agents.train.reader_data import reader_left_out_sets, reader_records

    return fit_calibration(
        reader, typed_items(reader_records("valid", per_set=per_set, seed=1, exclude=reader_left_out_sets()))
    )


def probe_calibration(items: list, fallback: Any, logits: list) -> Any:
    """Platt and choice temperature fitted on probe items' (corrected) logits; the score temperature of ``fallback``."""
    from clef_agents.train.reader import fit_logit_calibration

    fitted = fit_logit_calibration([q for _, q, _, _ in items], logits, [g for _, _, g, _ in items])
    return fitted.model_copy(
        update={
            "score_temperature": fallback.score_temperature,
            "fitted_on": {
                **fitted.fitted_on,
                "source": "reader probe (untaught sets)",
                "scores_from": "validation rows of the reader's sets",
            },
        }
    )


def choose(
    reader: Any, items: list, logits: list, head: list, in_dist: Any, correct: bool = True, mixing: bool = True
) -> dict[str, Any]:
    """On ``items``: the prior correction per type (by the criterion's part, uncalibrated; none unless
    ``correct``), then the calibration (Platt and choice temperature) on the corrected logits, then the
    head's weight per type (none unless ``mixing``)."""
    correction = {
        kind: max(
            CORRECTIONS if correct else (0.0,),
            key=lambda lam: _part(
                items, probabilities_from(reader, items, corrected(reader, items, logits, {kind: lam})), kind
            ),
        )
        for kind in HEADLINE
    }
    fixed = corrected(reader, items, logits, correction)
    fitted = probe_calibration(items, in_dist, fixed)
    probs = probabilities_from(reader, items, fixed, fitted)
    weights = {
        kind: max(
            WEIGHTS if mixing else (0.0,),
            key=lambda w: _part(items, mix(probs, head, items, {"noul": w, "choice": w}), kind),
        )
        for kind in HEADLINE
    }
    return {
        "prior_correction": correction,
        "calibration": fitted.model_dump(),
        "head_weights": weights,
        "probabilities": mix(probs, head, items, weights),
    }


STEPS = {
    "probe calibration": (False, False),
    "+ prior correction": (True, False),
    "+ head mixing": (True, True),
    "probe calibration + head mixing": (False, True),
}
"""The ladder checked out of fold: each step adds one knob, chosen on the fitting half."""


def fold(reader: Any, items: list, logits: list, head: list, in_dist: Any, fit_half: int) -> dict[str, Any]:
    """Each step of ``STEPS`` chosen on one half of the probe and checked on the other, beside the
    uncalibrated reader, the calibration training wrote, and the head alone."""
    from clef_agents.model.config import Calibration
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
        probs = probabilities_from(
            reader,
            check_items,
            corrected(reader, check_items, check_logits, step["prior_correction"]),
            Calibration(**step["calibration"]),
        )
        answers[name] = mix(probs, check_head, check_items, step["head_weights"])
    return {
        "fit_half": fit_half,
        "check_items": len(check),
        "chosen": chosen,
        "check": {name: probe_report(check_items, probs)["summary"] for name, probs in answers.items()},
    }


def kept_steps(folds: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Whether the prior correction, then the head mixing (on top of what was kept), raise the
    out-of-fold criterion in every fold."""

    def better(after: str, before: str) -> bool:
        return all((f["check"][after]["criterion"] or 0) > (f["check"][before]["criterion"] or 0) for f in folds)

    correct = better("+ prior correction", "probe calibration")
    mixing = (
        better("+ head mixing", "+ prior correction")
        if correct
        else better("probe calibration + head mixing", "probe calibration")
    )
    return correct, mixing


def choose_reader(
    readers: Sequence[str],
    model: str = "mini",
    rows: int = 300,
    valid_per_set: int = 100,
    candidates_from: str | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Steps 1–3 of the rule: the chosen reader, set up with what was kept, and the report's data (without
    ``command`` and ``written``).

    Example:
        >>> reader, result = choose_reader(["runs/reader_p1/step600", "runs/reader_p2/step1800"])  # doctest: +SKIP
        >>> result["chosen"], result["kept"]  # doctest: +SKIP
        ('runs/reader_p2/step1800', {'prior_correction': True, 'head_mixing': True})
    """
    from clef_agents.model.config import Calibration
    from clef_agents.model.reader import QuestionReader
    from clef_agents.train.reader_probe import probe_items, probe_report

    started = time.time()
    items = probe_items(rows)
    print(f"{len(items)} probe items", flush=True)
    candidates = {}
    scored = json.loads(Path(candidates_from).read_text())["candidates"] if candidates_from else {}
    for folder in readers:
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
    in_dist = validation_calibration(reader, valid_per_set)
    head = head_probabilities(model, items)
    folds = [fold(reader, items, logits, head, in_dist, half) for half in (0, 1)]
    correct, mixing = kept_steps(folds)
    final = choose(reader, items, logits, head, in_dist, correct, mixing)
    reader.set_prior_correction(final["prior_correction"])
    reader.set_calibration(Calibration(**final["calibration"]))
    reader.set_head_weights(final["head_weights"])
    return reader, {
        "items": len(items),
        "wall_s": round(time.time() - started, 1),
        "candidates": candidates,
        "chosen": chosen,
        "validation_calibration": in_dist.model_dump(),
        "folds": folds,
        "kept": {"prior_correction": correct, "head_mixing": mixing},
        "final": {k: v for k, v in final.items() if k != "probabilities"},
        "chosen_report": probe_report(items, final["probabilities"]),
        "head_report": probe_report(items, head),
    }


def save_chosen(reader: Any, result: dict[str, Any], out: str | Path, report: str) -> Path:
    """Save the chosen reader in ``out``, its ``trained_on`` noting the run it came from and how it was chosen."""
    chosen = result["chosen"]
    run = Path(chosen).parent / "summary.json"
    trained = json.loads(run.read_text(encoding="utf-8")) if run.is_file() else {}
    checkpoint_step = Path(chosen).name.removeprefix("step")
    if checkpoint_step.isdigit():
        trained = {**trained, "run_steps": trained.get("steps"), "steps": int(checkpoint_step), "checkpoint": chosen}
    trained["probe"] = {
        "command": result["command"],
        "candidates": len(result["candidates"]),
        "chosen": chosen,
        "items": result["items"],
        "report": report,
    }
    reader.config = reader.config.model_copy(
        update={"trained_on": {k: v for k, v in trained.items() if k not in ("final", "calibration")}}
    )
    reader.save(out)
    return Path(out)


def report_stem(write: str | None, report: str | None) -> Path:
    """Where the report goes: ``report``, else beside ``write`` (``runs/reader_probe`` → ``runs/reader_probe.json``).

    Example:
        >>> report_stem("runs/reader_probe", None).as_posix()
        'runs/reader_probe'
        >>> report_stem(None, None).as_posix()
        'reader_probe'
    """
    return Path(report or write or "reader_probe")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The command's options (shared by ``clef-agents choose-reader`` and ``python -m``)."""
    parser.add_argument("--readers", nargs="+", required=True, help="candidate reader folders")
    parser.add_argument("--model", default="mini", help="checkpoint whose routing head is mixed in (default mini)")
    parser.add_argument("--rows", type=int, default=300, help="rows per probe set (default 300)")
    parser.add_argument(
        "--valid-per-set", type=int, default=100, help="validation rows per set for the baseline calibration"
    )
    parser.add_argument(
        "--candidates-from", default=None, help="reuse the candidates' scores of an earlier report's JSON (same items)"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument("--write", default=None, help="save the chosen reader, calibrated on the probe, in this folder")
    parser.add_argument(
        "--report",
        default=None,
        help="report stem: writes STEM.json and STEM.md (default: the --write folder's name, else reader_probe)",
    )
    return parser


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``choose-reader`` subcommand."""
    parser = subparsers.add_parser(
        "choose-reader", help="choose and calibrate the question reader on its probe (untaught sets)"
    )
    add_arguments(parser).set_defaults(func=_run)


def _run(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    import sys

    import torch

    torch.set_num_threads(args.threads)
    reader, result = choose_reader(args.readers, args.model, args.rows, args.valid_per_set, args.candidates_from)
    stem = report_stem(args.write, args.report)
    args_text = sys.argv[1:] if argv is None else list(argv)
    if "choose-reader" in args_text:
        args_text = args_text[args_text.index("choose-reader") + 1 :]
    result = {"command": " ".join(["clef-agents", "choose-reader", *args_text]), **result}
    if args.write:
        save_chosen(reader, result, args.write, stem.as_posix() + ".md")
        result["written"] = args.write
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.parent.joinpath(stem.name + ".json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    stem.parent.joinpath(stem.name + ".md").write_text(render(result), encoding="utf-8")
    print(render(result))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m clef_agents.train.reader_choice``: the same as ``clef-agents choose-reader``."""
    parser = add_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]))
    return _run(parser.parse_args(argv), argv)


def _part(items: list, probs: list, kind: str) -> float:
    from clef_agents.train.reader_probe import probe_report

    value = probe_report(items, probs)["summary"][HEADLINE[kind]]
    return -1.0 if value is None else value


def _fmt(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def render(result: dict[str, Any]) -> str:
    """The report's markdown: the candidates, each fold's checks, what was kept and the chosen reader per probe set."""
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
        lines += [
            f"Fitted on half {fold['fit_half']}, checked on the other ({fold['check_items']} items). Chosen on the fitting half: "
            + "; ".join(
                f"{name}: correction {c['prior_correction']}, head weights {c['head_weights']}"
                for name, c in fold["chosen"].items()
            )
            + ".",
            "",
            "| answers | " + " | ".join(cols) + " |",
            "|---|" + "---:|" * len(cols),
        ]
        for name, summary in fold["check"].items():
            lines.append(f"| {name} | " + " | ".join(_fmt(summary[c]) for c in cols) + " |")
        lines.append("")
    kept = result["kept"]
    lines += [
        (
            f"A step is kept when it raises the out-of-fold criterion in both folds: prior correction "
            f"{'kept' if kept['prior_correction'] else 'not kept'}, head mixing {'kept' if kept['head_mixing'] else 'not kept'}."
        ),
        "",
    ]
    final = result["final"]
    cal = final["calibration"]
    lines += [
        (
            f"Chosen on the whole probe: prior correction {final['prior_correction']}; Platt a = {cal['noul_a']:.3f}, "
            f"b = {cal['noul_b']:.3f}, choice temperature {cal['choice_temperature']:.3f}, score temperature "
            f"{cal['score_temperature']:.3f} (validation rows); head mixing weights {final['head_weights']}."
        ),
        "",
    ]
    lines += [
        "## Chosen reader per probe set (whole probe, everything chosen on it: in-sample)",
        "",
        "| set | type | n | AUROC | accuracy | NLL | ECE |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for name, kinds in result["chosen_report"]["sets"].items():
        for kind, m in kinds.items():
            lines.append(
                f"| {name} | {kind} | {m['n']} | {_fmt(m.get('auroc'))} | {_fmt(m['accuracy'])} | {_fmt(m['nll'])} | {_fmt(m['ece'])} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
