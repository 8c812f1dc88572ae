"""The lane-fitting part of ``clef-agents calibrate`` (used when ``--max-auto-error`` is given).

The ``calibrate`` command (``clef_agents.train.cli``) owns ``--records`` (one or more JSONL files)
and ``--model``; it adds the lane flags with ``add_lane_arguments(parser)`` and, when
``--max-auto-error`` is set, calls ``run_lane_fit(args)``. The fit's modules (numpy, matplotlib,
pydantic) are imported inside the functions that run it, so registering the flags loads none of them.

Example:
    $ clef-agents calibrate --records labelled.jsonl more.jsonl --max-auto-error 0.01 --confidence 0.9 \\
        --slice-key route --min-slice 200 --cost-auto-error 5 --cost-llm 0.02 --cost-human 1 \\
        --policy-out lanes.json --report-dir lanes-report
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clef_agents.loading import load_model

DEFAULT_MODEL = "mini"


def add_lane_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--batch-size`` and the lane-fit flags to ``parser`` (``run_lane_fit`` reads them by
    these names, beside ``records`` and ``model``, which the calibrate command defines: batch_size,
    max_auto_error, confidence, max_human_share, max_llm_error, slice_key, min_slice, cost_*,
    llm_error_rate, policy_out, base_policy, report_dir, save_predictions, sequence_start, seed,
    no_progress).

    Example:
        >>> p = argparse.ArgumentParser()
        >>> add_lane_arguments(p)
        >>> p.parse_args(["--max-auto-error", "0.01", "--policy-out", "l.json"]).confidence
        0.9
    """
    parser.add_argument("--batch-size", type=int, default=32, help="records per model .batch call (default 32)")
    group = parser.add_argument_group("lane thresholds (with --max-auto-error)")
    group.add_argument(
        "--max-auto-error",
        type=float,
        default=None,
        help="highest error rate allowed among automatically accepted answers, e.g. 0.01",
    )
    group.add_argument(
        "--confidence",
        type=float,
        default=0.9,
        help="probability that the guarantee holds over the calibration draw (default 0.9)",
    )
    human = group.add_mutually_exclusive_group()
    human.add_argument(
        "--max-human-share",
        type=float,
        default=None,
        help="human review budget: at most this share of decisions go to a human",
    )
    human.add_argument(
        "--max-llm-error",
        type=float,
        default=None,
        help="the model's error on decisions kept from humans (auto + LLM lanes) stays below this",
    )
    group.add_argument("--slice-key", default="route", help="meta key of the route for per-slice bands (default route)")
    group.add_argument("--min-slice", type=int, default=200, help="fewest records for a slice of its own (default 200)")
    group.add_argument("--cost-auto-error", type=float, default=5.0, help="cost of one automatic error (default 5)")
    group.add_argument("--cost-llm", type=float, default=0.02, help="cost of one LLM call (default 0.02)")
    group.add_argument("--cost-human", type=float, default=1.0, help="cost of one human review (default 1)")
    group.add_argument(
        "--llm-error-rate",
        type=float,
        default=0.0,
        help="assumed LLM error rate, charged at the auto-error cost (default 0)",
    )
    group.add_argument("--policy-out", default=None, help="where to write the lane policy JSON")
    group.add_argument("--base-policy", default=None, help="policy whose default band and other questions are kept")
    group.add_argument("--report-dir", default=None, help="write report.json, curves.json and PNG curves here")
    group.add_argument(
        "--save-predictions",
        default=None,
        help="write the records with meta.probabilities (replayable without the model)",
    )
    group.add_argument(
        "--sequence-start",
        choices=("first", "robust"),
        default="first",
        help="where the fixed sequence of tests begins: 'first' (default) at the fewest answers that can certify the "
        "target; 'robust' later, surviving a few label-noise errors among the most confident answers. "
        "Choose before seeing the records (docs/thresholds.md)",
    )
    group.add_argument("--seed", type=int, default=0, help="seed of the pilot split (default 0)")
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def record_paths(records: str | Sequence[str] | None) -> list[str]:
    """``--records`` as a list of paths (one path or several).

    Example:
        >>> record_paths("a.jsonl"), record_paths(["a.jsonl", "b.jsonl"])
        (['a.jsonl'], ['a.jsonl', 'b.jsonl'])
    """
    if not records:
        return []
    return (
        [str(records)]
        if isinstance(records, (str, bytes)) or not isinstance(records, Sequence)
        else [str(p) for p in records]
    )


def load_records(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The decision records of every file in ``paths``, in order (errors name the file and line)."""
    from clef_agents.thresholds import records as rec  # numpy: loaded on use (module docstring)

    return [record for path in paths for record in rec.load_decision_records(path)]


def run_lane_fit(args: argparse.Namespace, model: Any | None = None) -> int:
    """Fit the lane policy the flags describe, write it (and the report), print a summary.

    ``model`` answers records without ``meta.probabilities`` (default: ``load_model(args.model)``,
    ``mini`` when no ``--model`` is given).
    """
    # the fit's modules load on use (module docstring)
    from clef_agents.policy import LanePolicy
    from clef_agents.thresholds import records as rec
    from clef_agents.thresholds.curves import write_report
    from clef_agents.thresholds.fit import Costs, fit_lanes

    paths = record_paths(getattr(args, "records", None))
    if not paths:
        raise ValueError("--records is required: labelled decision records (JSONL)")
    if not args.policy_out:
        raise ValueError("--policy-out is required: where to write the lane policy")
    if args.max_auto_error is None or not 0.0 < args.max_auto_error < 1.0:
        raise ValueError(f"--max-auto-error must lie strictly between 0 and 1, got {args.max_auto_error}")
    records = load_records(paths)
    where = ", ".join(paths)
    if not records:
        raise ValueError(f"{where}: no decision records")
    if rec.records_missing_probabilities(records):
        if model is None:
            model = load_model(getattr(args, "model", None) or DEFAULT_MODEL)
        predictions = rec.predict_probabilities(
            records,
            model,
            batch_size=getattr(args, "batch_size", 32) or 32,
            progress=not getattr(args, "no_progress", False),
        )
        records = rec.with_probabilities(records, predictions)
        if getattr(args, "save_predictions", None):
            _write_jsonl(args.save_predictions, records)
    samples = rec.decision_samples(records, slice_key=args.slice_key)
    if not samples:
        raise ValueError(
            f"{where}: no usable labelled records ({len(records)} read; records with meta.source "
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
    lane_fit.policy.meta["records"] = paths[0] if len(paths) == 1 else paths
    path = lane_fit.policy.save(args.policy_out)
    print(_summary(lane_fit.report))
    print(f"policy: {path}")
    if getattr(args, "report_dir", None):
        for written in write_report(lane_fit, samples, costs, args.report_dir):
            print(f"report: {written}")
    return 0


def _human_rule(args: argparse.Namespace) -> Any:
    from clef_agents.thresholds.fit import HumanRule  # numpy: loaded on use (module docstring)

    if getattr(args, "max_human_share", None) is not None:
        return HumanRule("share", args.max_human_share)
    if getattr(args, "max_llm_error", None) is not None:
        return HumanRule("llm_error", args.max_llm_error)
    return HumanRule("none")


def _write_jsonl(path: str, records: list[dict[str, Any]]) -> None:
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
    rows = [
        (qid, row)
        for qid, q in report["questions"].items()
        for row in q.get("planning", [])
        if row["share"] > q["coverage"] + 1e-9
    ]
    if not rows:
        return []
    powers = list(rows[0][1]["records_needed"])
    lines = [
        "more labels? records a single test would need at each larger automatic share, at the error measured there",
        f"{'question':<24}{'share %':>8}{'err %':>8}{'power now':>11}"
        + "".join(f"{'n, ' + format(float(p), '.0%') + ' power':>16}" for p in powers),
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
