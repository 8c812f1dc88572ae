"""Validate the lane-threshold guarantee over many random calibration / test splits.

For each data set (its TEST split, which the model never trained on) the model's predictions are
computed once and cached (``bench/thresholds/cache/<set>_<model>.npz``). Then, for each of
``--splits`` random halvings, thresholds are fitted on one half (``fit_error_threshold``:
Learn-then-Test, fixed sequence, exact binomial p-values) and the other half measures the
realised automatic error and the automatic share (coverage). The guarantee promises that the
*population* error among accepted answers is <= target in at least ``confidence`` of
calibration draws; the realised error on a finite test half adds its own noise on top, so the
share of splits with realised error <= target is a slightly stricter check.

A synthetic section (a scorer whose true error is known in closed form) checks the guarantee
against the truth itself.

Command (writes bench/thresholds/results/validation.{json,md} and PNGs):
    .venv/bin/python bench/thresholds/validate.py --model mini --splits 200
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from clef_agents.thresholds import (
    SyntheticScores,
    decision_samples,
    fit_error_threshold,
)
from clef_agents.thresholds.records import predict_probabilities, with_probabilities
from clef_agents.train.datasets import load_records

HERE = Path(__file__).resolve().parent


def model_fingerprint(model_name: str) -> str:
    """A hash of a checkpoint's files (config, head, adapter), so cached predictions follow the model."""
    from clef_agents.model.decision_model import checkpoint_folder

    folder = checkpoint_folder(model_name)
    digest = hashlib.sha256()
    for file in sorted(folder.rglob("*")):
        if file.is_file() and file.suffix in (".json", ".safetensors"):
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def head_precision() -> str:
    """The head's CPU inference dtype on this machine (it moves probabilities slightly, so it is part of the cache key)."""
    import torch

    from clef_agents.model.scorer import head_dtype

    return str(head_dtype(None, torch.device("cpu")))


def cached_predictions(name: str, model_name: str, batch_size: int, limit: int | None = None) -> dict[str, np.ndarray]:
    """Decision probability and correctness of every test record (computed once, then cached)."""
    tag = Path(model_name).name + (f"_limit{limit}" if limit else "")
    path = HERE / "cache" / f"{name}_{tag}.npz"
    records = load_records(name, "test", limit=limit)
    digest = hashlib.sha256("\n".join(json.dumps(r["labels"], sort_keys=True) for r in records).encode())
    digest.update(model_fingerprint(model_name).encode())
    digest.update(head_precision().encode())
    fingerprint = digest.hexdigest()[:16]
    if path.exists():
        cached = dict(np.load(path))
        if str(cached.get("fingerprint")) == fingerprint:
            return cached
        print(f"{path}: records or model changed, recomputing", file=sys.stderr)
    from clef_agents.model import ClefDecisionModel

    model = ClefDecisionModel.from_pretrained(model_name)
    start = time.perf_counter()
    predictions = predict_probabilities(records, model, batch_size=batch_size)
    seconds = time.perf_counter() - start
    samples = decision_samples(with_probabilities(records, predictions))
    (sample,) = samples.values()
    out = {
        "scores": sample.scores,
        "correct": sample.correct,
        "fingerprint": np.array(fingerprint),
        "model": np.array(model_name),
        "seconds": np.array(seconds),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **out)
    return out


def oracle_coverage(scores: np.ndarray, correct: np.ndarray, target: float) -> float:
    """Largest share of ``scores`` a threshold could accept with realised error <= target."""
    order = np.argsort(-scores, kind="stable")
    wrong = np.cumsum(~correct[order])
    accepted = np.arange(1, len(scores) + 1)
    sorted_scores = scores[order]
    # only cut between distinct scores (a threshold accepts all ties)
    cut = np.r_[sorted_scores[1:] < sorted_scores[:-1], True]
    ok = (wrong / accepted <= target) & cut
    return float(accepted[ok].max() / len(scores)) if ok.any() else 0.0


def run_splits(
    scores: np.ndarray,
    correct: np.ndarray,
    target: float,
    confidence: float,
    splits: int,
    truth: SyntheticScores | None = None,
) -> dict[str, Any]:
    """Fit on a random half, measure on the other half, ``splits`` times."""
    delta = 1.0 - confidence
    rng = np.random.default_rng(12345)
    rows = []
    for split in range(splits):
        order = rng.permutation(len(scores))
        cal, test = order[: len(order) // 2], order[len(order) // 2 :]
        fit = fit_error_threshold(scores[cal], correct[cal], target, delta, seed=split)
        accepted = scores[test] >= fit.threshold
        errors = int((~correct[test][accepted]).sum())
        row = {
            "threshold": fit.threshold,
            "certified": fit.certified,
            "coverage": float(accepted.mean()),
            "realised_error": errors / int(accepted.sum()) if accepted.any() else 0.0,
            "oracle_coverage": oracle_coverage(scores[test], correct[test], target),
        }
        if truth is not None:
            row["true_error"] = truth.true_error(fit.threshold)
            row["true_coverage"] = truth.true_coverage(fit.threshold)
        rows.append(row)
    return summarise(rows, target, confidence)


def summarise(rows: list[dict[str, Any]], target: float, confidence: float) -> dict[str, Any]:
    realised = np.array([r["realised_error"] for r in rows])
    coverage = np.array([r["coverage"] for r in rows])
    quantiles = [0, 5, 25, 50, 75, 95, 100]
    out: dict[str, Any] = {
        "target": target,
        "confidence": confidence,
        "splits": len(rows),
        "certified_splits": int(sum(r["certified"] for r in rows)),
        "share_realised_at_or_below_target": round(float((realised <= target).mean()), 4),
        "realised_error_percentiles": {str(q): round(float(np.percentile(realised, q)), 5) for q in quantiles},
        "coverage_mean": round(float(coverage.mean()), 4),
        "coverage_percentiles": {str(q): round(float(np.percentile(coverage, q)), 4) for q in quantiles},
        "oracle_coverage_mean": round(float(np.mean([r["oracle_coverage"] for r in rows])), 4),
        "rows": rows,
    }
    if "true_error" in rows[0]:
        true_error = np.array([r["true_error"] for r in rows])
        out["share_true_error_at_or_below_target"] = round(float((true_error <= target).mean()), 4)
        out["true_coverage_mean"] = round(float(np.mean([r["true_coverage"] for r in rows])), 4)
    return out


def plot(results: dict[str, Any], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = list(results)
    fig, axes = plt.subplots(2, len(targets), figsize=(4.2 * len(targets), 6.5), squeeze=False)
    for col, key in enumerate(targets):
        res = results[key]
        target = res["target"]
        realised = [100 * r["realised_error"] for r in res["rows"]]
        coverage = [100 * r["coverage"] for r in res["rows"]]
        top, bottom = axes[0][col], axes[1][col]
        top.hist(realised, bins=30, color="tab:blue", alpha=0.8)
        top.axvline(100 * target, color="red", linestyle="--", label=f"target {100 * target:g}%")
        top.set_title(
            f"target {100 * target:g}%: {100 * res['share_realised_at_or_below_target']:.1f}% of splits ≤ target"
            f"\n(promised ≥ {100 * res['confidence']:g}%)",
            fontsize=9,
        )
        top.set_xlabel("realised automatic error on the test half (%)")
        top.legend(fontsize=8)
        bottom.hist(coverage, bins=30, color="tab:green", alpha=0.8)
        bottom.axvline(100 * res["oracle_coverage_mean"], color="black", linestyle=":", label="oracle (mean)")
        bottom.set_xlabel("decided automatically on the test half (%)")
        bottom.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Lane thresholds: validation over random calibration / test splits",
        "",
        f"Command: `{report['command']}`",
        "",
        (
            f"Method: {report['method']}; confidence {report['confidence']} (δ = {round(1 - report['confidence'], 6)}); "
            f"{report['splits']} random 50/50 splits per row; fitted on one half, measured on the other."
        ),
        "",
        (
            "| data | n | target | share of splits with realised error ≤ target | realised error p50 / p95 / max | "
            "coverage mean (p5–p95) | oracle coverage | certified |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, section in report["datasets"].items():
        for key, res in section["targets"].items():
            e, c = res["realised_error_percentiles"], res["coverage_percentiles"]
            label = f"{name} (exact truth, fresh 1540-record draws)" if key.endswith("-truth") else name
            truth = (
                f" (true error ≤ target in {100 * res['share_true_error_at_or_below_target']:.1f}%)"
                if "share_true_error_at_or_below_target" in res
                else ""
            )
            lines.append(
                f"| {label} | {section['n']} | {100 * res['target']:g}% | {100 * res['share_realised_at_or_below_target']:.1f}%{truth} | "
                f"{100 * e['50']:.2f}% / {100 * e['95']:.2f}% / {100 * e['100']:.2f}% | "
                f"{100 * res['coverage_mean']:.1f}% ({100 * c['5']:.1f}–{100 * c['95']:.1f}%) | "
                f"{100 * res['oracle_coverage_mean']:.1f}% | {res['certified_splits']}/{res['splits']} |"
            )
    lines += [
        "",
        (
            "Oracle coverage: the largest share a threshold chosen on the test half itself could accept with "
            "realised error ≤ target (not achievable; for scale)."
        ),
        "",
    ]
    for name, section in report["datasets"].items():
        if section.get("model"):
            lines.append(
                f"- {name}: model `{section['model']}`, test-set accuracy {100 * section['accuracy']:.2f}%, "
                f"plot `{section['plot']}`"
            )
        else:
            lines.append(f"- {name}: {section['note']}, plot `{section['plot']}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mini")
    parser.add_argument("--datasets", nargs="*", default=["banking77", "clinc150"])
    parser.add_argument("--targets", nargs="+", type=float, default=[0.01, 0.02, 0.05])
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--no-synthetic", action="store_true")
    parser.add_argument("--limit", type=int, default=None, help="first N test records only (smoke runs; do not commit)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    report: dict[str, Any] = {
        "command": ".venv/bin/python bench/thresholds/validate.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "method": "Learn-then-Test, fixed-sequence, exact binomial p-value (clef_agents.thresholds.fit_error_threshold)",
        "confidence": args.confidence,
        "splits": args.splits,
        "machine": platform.platform(),
        "datasets": {},
    }
    if not args.no_synthetic:
        truth = SyntheticScores()
        scores, correct = truth.sample(3080, np.random.default_rng(0))
        results = {str(t): run_splits(scores, correct, t, args.confidence, args.splits) for t in args.targets}
        # and against the known truth: a fresh calibration draw per split
        rng = np.random.default_rng(1)
        for t in args.targets:
            rows = []
            for split in range(args.splits):
                s, c = truth.sample(1540, rng)
                fit = fit_error_threshold(s, c, t, 1 - args.confidence, seed=split)
                rows.append(
                    {
                        "threshold": fit.threshold,
                        "certified": fit.certified,
                        "coverage": truth.true_coverage(fit.threshold),
                        "realised_error": truth.true_error(fit.threshold),
                        "oracle_coverage": truth.true_coverage(1 - 7 * t),
                        "true_error": truth.true_error(fit.threshold),
                        "true_coverage": truth.true_coverage(fit.threshold),
                    }
                )
            results[f"{t}-truth"] = summarise(rows, t, args.confidence)
        plot(
            {k: v for k, v in results.items() if not k.endswith("truth")},
            out / "validation_synthetic.png",
            "synthetic scorer (3080 decisions, halves)",
        )
        report["datasets"]["synthetic"] = {
            "n": 3080,
            "targets": results,
            "plot": "validation_synthetic.png",
            "note": f"synthetic {truth} (rows '-truth': error and coverage are the exact population values for fresh 1540-record calibration draws)",
        }
    for name in args.datasets:
        cached = cached_predictions(name, args.model, args.batch_size, args.limit)
        scores, correct = cached["scores"], cached["correct"].astype(bool)
        results = {str(t): run_splits(scores, correct, t, args.confidence, args.splits) for t in args.targets}
        plot(
            results, out / f"validation_{name}.png", f"{name} test split, model {args.model} ({len(scores)} decisions)"
        )
        report["datasets"][name] = {
            "n": len(scores),
            "model": args.model,
            "accuracy": round(float(correct.mean()), 4),
            "prediction_seconds": float(cached.get("seconds", np.nan)),
            "targets": results,
            "plot": f"validation_{name}.png",
        }
    out.mkdir(parents=True, exist_ok=True)
    slim = json.loads(json.dumps(report))
    for section in slim["datasets"].values():
        for res in section["targets"].values():
            res.pop("rows")
    (out / "validation.json").write_text(json.dumps(slim, indent=2) + "\n")
    (out / "validation_splits.json").write_text(json.dumps(report) + "\n")
    (out / "validation.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
