"""The lane-fitting part of ``clef-agents calibrate`` (used when ``--max-auto-error`` is given).

The ``calibrate`` command adds these flags with ``add_lane_arguments(parser)`` and, when
``--max-auto-error`` is set, calls ``run_lane_fit(args)``. Flags the command already defines
(``--records``, ``--model``, ``--batch-size``) are left as they are.

Example:
    $ clef-agents calibrate --records labelled.jsonl --max-auto-error 0.01 --confidence 0.9 \\
        --slice-key route --min-slice 200 --cost-auto-error 5 --cost-llm 0.02 --cost-human 1 \\
        --policy-out lanes.json --report-dir lanes-report
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

DEFAULT_MODEL = "mini"


def _add(parser: Any, flag: str, **kwargs: Any) -> None:
    if flag not in parser._option_string_actions:  # the calibrate command may already own it
        parser.add_argument(flag, **kwargs)


def add_lane_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the lane-fit flags to ``parser``, skipping any it already has (``run_lane_fit`` reads
    them by these names: records, model, batch_size, max_auto_error, confidence, max_human_share,
    max_llm_error, slice_key, min_slice, cost_*, llm_error_rate, policy_out, base_policy,
    report_dir, save_predictions, sequence_start, seed, no_progress).

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_lane_arguments(p)
        >>> p.parse_args(["--records", "r.jsonl", "--max-auto-error", "0.01", "--policy-out", "l.json"]).confidence
        0.9
    """
    _add(parser, "--records", help="labelled decision records (JSONL)")
    _add(parser, "--model", default=None,
         help=f"decision model for records without meta.probabilities (default: {DEFAULT_MODEL} when needed)")
    _add(parser, "--batch-size", type=int, default=32, help="records per model .batch call (default 32)")
    group = parser.add_argument_group("lane thresholds (with --max-auto-error)")
    _add(group, "--max-auto-error", type=float, default=None,
         help="highest error rate allowed among automatically accepted answers, e.g. 0.01")
    _add(group, "--confidence", type=float, default=0.9,
         help="probability that the guarantee holds over the calibration draw (default 0.9)")
    if "--max-human-share" not in parser._option_string_actions:
        human = group.add_mutually_exclusive_group()
        human.add_argument("--max-human-share", type=float, default=None,
                           help="human review budget: at most this share of decisions go to a human")
        human.add_argument("--max-llm-error", type=float, default=None,
                           help="the model's error on decisions kept from humans (auto + LLM lanes) stays below this")
    _add(group, "--slice-key", default="route", help="meta key of the route for per-slice bands (default route)")
    _add(group, "--min-slice", type=int, default=200, help="fewest records for a slice of its own (default 200)")
    _add(group, "--cost-auto-error", type=float, default=5.0, help="cost of one automatic error (default 5)")
    _add(group, "--cost-llm", type=float, default=0.02, help="cost of one LLM call (default 0.02)")
    _add(group, "--cost-human", type=float, default=1.0, help="cost of one human review (default 1)")
    _add(group, "--llm-error-rate", type=float, default=0.0,
         help="assumed LLM error rate, charged at the auto-error cost (default 0)")
    _add(group, "--policy-out", default=None, help="where to write the lane policy JSON")
    _add(group, "--base-policy", default=None, help="policy whose default band and other questions are kept")
    _add(group, "--report-dir", default=None, help="write report.json, curves.json and PNG curves here")
    _add(group, "--save-predictions", default=None,
         help="write the records with meta.probabilities (replayable without the model)")
    _add(group, "--sequence-start", choices=("first", "robust"), default="first",
         help="where the fixed sequence of tests begins: 'first' (default) at the fewest answers that can certify the "
              "target; 'robust' later, surviving a few label-noise errors among the most confident answers. "
              "Choose before seeing the records (docs/thresholds.md)")
    _add(group, "--seed", type=int, default=0, help="seed of the pilot split (default 0)")
    _add(group, "--no-progress", action="store_true", help="no progress bar")


def load_model(name: str) -> Any:
    """Load the local decision model ``name`` (a shipped name or a checkpoint folder)."""
    try:
        from clef_agents.model import ClefDecisionModel
    except ImportError as exc:
        raise ValueError(f"cannot load decision model {name!r}: {exc}") from None
    return ClefDecisionModel.from_pretrained(name)


def run_lane_fit(args: argparse.Namespace) -> int:
    """Fit the lane policy the flags describe, write it (and the report), print a summary."""
    from clef_agents.policy import LanePolicy
    from clef_agents.thresholds import records as rec
    from clef_agents.thresholds.curves import write_report
    from clef_agents.thresholds.fit import Costs, fit_lanes

    if not getattr(args, "records", None):
        raise ValueError("--records is required: labelled decision records (JSONL)")
    if not args.policy_out:
        raise ValueError("--policy-out is required: where to write the lane policy")
    if args.max_auto_error is None or not 0.0 < args.max_auto_error < 1.0:
        raise ValueError(f"--max-auto-error must lie strictly between 0 and 1, got {args.max_auto_error}")
    records = rec.load_decision_records(args.records)
    if not records:
        raise ValueError(f"{args.records}: no decision records")
    if rec.records_missing_probabilities(records):
        model = getattr(args, "decision_model", None) or load_model(getattr(args, "model", None) or DEFAULT_MODEL)
        predictions = rec.predict_probabilities(
            records, model, batch_size=getattr(args, "batch_size", 32) or 32, progress=not getattr(args, "no_progress", False)
        )
        records = rec.with_probabilities(records, predictions)
        if getattr(args, "save_predictions", None):
            _write_jsonl(args.save_predictions, records)
    samples = rec.decision_samples(records, slice_key=args.slice_key)
    if not samples:
        raise ValueError(
            f"{args.records}: no usable labelled records ({len(records)} read; records with meta.source "
            f"in {list(rec.SELF_LABELLED_SOURCES)} are the model's own answers and are skipped)"
        )
    costs = Costs(args.cost_auto_error, args.cost_llm, args.cost_human, args.llm_error_rate)
    lane_fit = fit_lanes(
        samples,
        max_auto_error=args.max_auto_error,
        confidence=args.confidence,
        human=_human_rule(args),
        costs=costs,
        min_slice=args.min_slice,
        seed=args.seed,
        base=LanePolicy.load(args.base_policy) if getattr(args, "base_policy", None) else None,
        start=getattr(args, "sequence_start", "first") or "first",
    )
    lane_fit.policy.meta["records"] = str(args.records)
    path = lane_fit.policy.save(args.policy_out)
    print(_summary(lane_fit.report))
    print(f"policy: {path}")
    if getattr(args, "report_dir", None):
        for written in write_report(lane_fit, samples, costs, args.report_dir):
            print(f"report: {written}")
    return 0


def _human_rule(args: argparse.Namespace) -> Any:
    from clef_agents.thresholds.fit import HumanRule

    if getattr(args, "max_human_share", None) is not None:
        return HumanRule("share", args.max_human_share)
    if getattr(args, "max_llm_error", None) is not None:
        return HumanRule("llm_error", args.max_llm_error)
    return HumanRule("none")


def _write_jsonl(path: str, records: list[dict[str, Any]]) -> None:
    import json
    from pathlib import Path

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")


def _summary(report: dict[str, Any]) -> str:
    lines = [
        f"lane fit: auto error <= {report['max_auto_error']:g} with confidence {report['confidence']:g} "
        f"({report['method']}, sequence start {report.get('sequence_start', 'first')}; "
        f"certifying needs >= {report['min_accepted_to_certify']} accepted decisions)",
        f"{'question':<24}{'n':>7}{'act at':>10}{'human <':>10}{'auto %':>9}{'err %':>8}{'llm %':>8}{'human %':>9}{'cost/1k':>10}",
    ]
    for qid, q in report["questions"].items():
        lines.append(_row(qid, q))
        for name, s in q.get("slices", {}).items():
            label = f"  {qid}@{name}"
            lines.append(_row(label, s) if "auto_at" in s else f"{label:<24}{s['n']:>7}  → pooled band ({s['reason']})")
        if not q["certified"]:
            lines.append(f"  ! {qid}: {q.get('reason', 'not certified')}; nothing is decided automatically")
    return "\n".join(lines + _planning_lines(report))


def _planning_lines(report: dict[str, Any]) -> list[str]:
    """For each question, the larger automatic shares: their measured error and the labelled records
    one test there would need (the fixed sequence needs at least that many; see thresholds.planning)."""
    rows = [(qid, row) for qid, q in report["questions"].items() for row in q.get("planning", [])
            if row["share"] > q["coverage"] + 1e-9]
    if not rows:
        return []
    powers = list(rows[0][1]["records_needed"])
    lines = [
        "more labels? records a single test would need at each larger automatic share, at the error measured there",
        f"{'question':<24}{'share %':>8}{'err %':>8}{'power now':>11}" + "".join(f"{'n, ' + format(float(p), '.0%') + ' power':>16}" for p in powers),
    ]
    for qid, row in rows:
        needed = "".join(f"{_count(row['records_needed'][p]):>16}" for p in powers)
        lines.append(f"{qid:<24}{100 * row['share']:>8.0f}{100 * row['error']:>8.2f}{row['power_now']:>11.2f}{needed}")
    return lines


def _count(value: int | None) -> str:
    return "never" if value is None else f"{value:,}"


def _row(name: str, q: dict[str, Any]) -> str:
    return (
        f"{name:<24}{q['n']:>7}{q['auto_at']:>10.4f}{q['human_below']:>10.4f}{100 * q['coverage']:>9.1f}"
        f"{100 * q['calibration_error']:>8.2f}{100 * q['llm_share']:>8.1f}{100 * q['human_share']:>9.1f}{q['cost_per_1000']:>10.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m clef_agents.thresholds.cli``) for use before ``calibrate`` wires it in."""
    parser = argparse.ArgumentParser(prog="clef-agents calibrate", description="Fit lane thresholds with a guarantee.")
    add_lane_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_lane_fit(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"clef-agents calibrate: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
