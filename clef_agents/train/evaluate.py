"""``clef-agents eval``: metrics per dataset and per question type, before and after calibration,
written as JSON, markdown and reliability-diagram PNGs.

Example:
    >>> from clef_agents.train.evaluate import run_evaluation  # doctest: +SKIP
    >>> run_evaluation("mini", ["banking77"], None, "test", 500, Path("reports/b77"))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents.model.config import Calibration
from clef_agents.model.decision_model import ClefDecisionModel
from clef_agents.train.calibration import RawLogits, collect_logits
from clef_agents.train.metrics import classification_metrics, is_finite_number, reliability_bins

IDENTITY = Calibration()


def probabilities(item: RawLogits, calibration: Calibration) -> list[float]:
    """Probabilities of one question's options under a calibration (identity = uncalibrated)."""
    z = item.logits
    if item.kind == "noul":
        margin = calibration.noul_a * (z[0] - z[1]) + calibration.noul_b
        p_yes = float(torch.sigmoid(margin))
        return [p_yes, 1.0 - p_yes]
    t = calibration.choice_temperature if item.kind == "choice" else calibration.score_temperature
    return F.softmax(z / t, dim=-1).tolist()


def metrics_for(
    items: Sequence[RawLogits],
    calibration: Calibration,
    option_names: Sequence[str] | None = None,
    answered: bool = False,
) -> dict[str, Any]:
    """Metrics for items of one question type; adds in-scope accuracy / oos recall when an ``oos`` option exists.

    ``answered=True`` scores the probabilities the model answers with (taught questions use
    their taught weights); otherwise the head's logits under ``calibration``.
    """
    kind = items[0].kind
    probs = [it.answered if answered and it.answered is not None else probabilities(it, calibration) for it in items]
    gold = [it.gold for it in items]
    result = classification_metrics(probs, gold, kind)
    if option_names and "oos" in option_names:
        oos = list(option_names).index("oos")
        predicted = [max(range(len(p)), key=p.__getitem__) for p in probs]
        in_scope = [(p, g) for p, g in zip(predicted, gold) if g != oos]
        out_scope = [p for p, g in zip(predicted, gold) if g == oos]
        result["in_scope_accuracy"] = sum(p == g for p, g in in_scope) / max(1, len(in_scope))
        result["oos_recall"] = sum(p == oos for p in out_scope) / max(1, len(out_scope))
    result["reliability"] = reliability_bins(
        [max(p) for p in probs], [float(max(range(len(p)), key=p.__getitem__) == g) for p, g in zip(probs, gold)]
    )
    return result


def evaluate_records(
    model: ClefDecisionModel, records: Sequence[dict[str, Any]], with_uncalibrated: bool = True, progress: bool = True
) -> dict[str, Any]:
    """Metrics per question type for labelled records (one model pass gives both calibrations)."""
    items = collect_logits(model, records, progress=progress)
    names = _first_option_names(records)
    out: dict[str, Any] = {}
    for kind in ("noul", "choice", "score"):
        chosen = [it for it in items if it.kind == kind]
        if not chosen:
            continue
        entry = {"calibrated": metrics_for(chosen, model.config.calibration, names.get(kind), answered=True)}
        taught = sum(it.taught for it in chosen)
        read = sum(it.read for it in chosen)
        if taught:
            entry["taught_questions"] = taught
        if read:
            entry["reader_questions"] = read
        if taught or read:
            entry["head_calibrated"] = metrics_for(chosen, model.config.calibration, names.get(kind))
        if with_uncalibrated:
            entry["uncalibrated"] = metrics_for(chosen, IDENTITY, names.get(kind))
        out[kind] = entry
    return out


def _first_option_names(records: Sequence[dict[str, Any]]) -> dict[str, list[str]]:
    names: dict[str, list[str]] = {}
    for record in records[:1]:
        for question in record["questions"].values():
            if question.get("type") == "choice":
                names.setdefault("choice", list(question["criteria"]))
    return names


def summarise_calibration(model: ClefDecisionModel, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """NLL and ECE per question type under the model's current calibration (for ``calibrate``)."""
    report = evaluate_records(model, records, with_uncalibrated=False, progress=False)
    return {kind: {k: v["calibrated"][k] for k in ("n", "accuracy", "nll", "ece")} for kind, v in report.items()}


def run_evaluation(
    model_ref: str,
    datasets: Sequence[str] | None,
    record_files: Sequence[str] | None,
    split: str,
    limit: int | None,
    report_dir: Path,
    with_uncalibrated: bool = True,
) -> dict[str, Any]:
    """Evaluate a checkpoint on datasets (or record files) and write report.json, report.md and PNGs."""
    from clef_agents.records import read_records  # noqa: PLC0415
    from clef_agents.train.datasets import DATASETS, available_splits, load_records  # noqa: PLC0415

    model = ClefDecisionModel.from_pretrained(model_ref)
    report_dir.mkdir(parents=True, exist_ok=True)
    sources: dict[str, list[dict[str, Any]]] = {}
    if record_files:
        for path in record_files:
            sources[Path(path).stem] = read_records(path)
    else:
        for name in datasets or [d for d in DATASETS if split in available_splits(d)]:
            sources[name] = load_records(name, split, limit=limit, seed=0)
    began = time.time()
    results: dict[str, Any] = {}
    for name, records in sources.items():
        results[name] = evaluate_records(model, records, with_uncalibrated)
        results[name]["records"] = len(records)
    report = {
        "model": model_ref,
        "split": split,
        "limit": limit,
        "calibration": model.config.calibration.model_dump(),
        "data_card": model.config.data_card,
        "seconds": round(time.time() - began, 1),
        "datasets": results,
    }
    (report_dir / "report.json").write_text(json.dumps(report, indent=2, default=float) + "\n")
    (report_dir / "report.md").write_text(render_markdown(report))
    plot_reliability(results, report_dir)
    return report


COLUMNS = ("accuracy", "macro_f1", "nll", "brier", "ece")


def render_markdown(report: dict[str, Any]) -> str:
    """A readable table: one row per dataset and question type, calibrated (and uncalibrated ECE)."""
    lines = [
        f"# Evaluation of `{report['model']}` on the {report['split']} split",
        "",
        "| dataset | type | n | accuracy | macro-F1 | NLL | Brier | ECE | ECE if perfectly calibrated (p) | ECE before cal. | cov@95% | cov@99% | extra |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, by_kind in report["datasets"].items():
        for kind, entry in by_kind.items():
            if kind == "records":
                continue
            m = entry["calibrated"]
            before = entry.get("uncalibrated", {}).get("ece")
            extra = {
                k: m[k] for k in ("in_scope_accuracy", "oos_recall", "f1_yes", "mae_mode", "mae_expected") if k in m
            }
            if "head_calibrated" in entry:
                extra["head-only accuracy"] = entry["head_calibrated"]["accuracy"]
            lines.append(
                f"| {name} | {kind} | {m['n']} | "
                + " | ".join(_fmt(m[c]) for c in COLUMNS)
                + f" | {_noise(m)} | {_fmt(before)} | {_fmt(m['coverage_at_95']['coverage'])} | {_fmt(m['coverage_at_99']['coverage'])} | "
                + ", ".join(f"{k} {_fmt(v)}" for k, v in extra.items())
                + " |"
            )
    lines += [
        "",
        "ECE if perfectly calibrated: the mean ECE a model whose confidences are exactly right would show on the "
        "same confidences and number of answers (sampling noise alone), and p, the share of such draws at or above "
        "the measured ECE (small p: the miscalibration is real).",
        "",
        f"Limit per dataset: {report['limit']}; wall time {report['seconds']} s.",
        "",
    ]
    return "\n".join(lines)


def _noise(metrics: dict[str, Any]) -> str:
    noise = metrics.get("ece_noise")
    return f"{noise['mean']:.4f} ({noise['p_value']:.2f})" if noise else "–"


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if is_finite_number(value) else "–"


def noise_band(reliability: list[dict[str, float]]) -> tuple[list[float], list[float], list[float]]:
    """Per non-empty bin: its mean confidence and the 95 % range its accuracy would fall in if every
    confidence were exactly right (normal approximation, ``conf ± 1.96 · sqrt(conf (1 − conf) / count)``).

    Example:
        >>> x, low, high = noise_band([{"count": 100, "confidence": 0.9, "accuracy": 0.85}, {"count": 0}])
        >>> x, round(low[0], 3), round(high[0], 3)
        ([0.9], 0.841, 0.959)
    """
    bins = [b for b in reliability if b["count"] > 0]
    x = [b["confidence"] for b in bins]
    half = [1.96 * (c * (1 - c) / b["count"]) ** 0.5 for c, b in zip(x, bins)]
    return x, [max(0.0, c - h) for c, h in zip(x, half)], [min(1.0, c + h) for c, h in zip(x, half)]


def plot_reliability(results: dict[str, Any], folder: Path) -> list[Path]:
    """One reliability diagram per dataset and question type (calibrated vs uncalibrated)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    written = []
    for name, by_kind in results.items():
        for kind, entry in by_kind.items():
            if kind == "records":
                continue
            fig, ax = plt.subplots(figsize=(4.2, 4.2))
            ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1, label="perfect")
            if "calibrated" in entry:
                x, low, high = noise_band(entry["calibrated"]["reliability"])
                ax.fill_between(
                    x,
                    low,
                    high,
                    color="grey",
                    alpha=0.2,
                    linewidth=0,
                    label="95 % band of a perfectly calibrated model",
                )
            for label, key, style in (("before calibration", "uncalibrated", "--"), ("calibrated", "calibrated", "-")):
                if key not in entry:
                    continue
                bins = [b for b in entry[key]["reliability"] if b["count"] > 0]
                ax.plot(
                    [b["confidence"] for b in bins],
                    [b["accuracy"] for b in bins],
                    style,
                    marker="o",
                    markersize=3,
                    label=f"{label} (ECE {entry[key]['ece']:.3f})",
                )
            ax.set_xlabel("confidence (top label)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"{name} · {kind}")
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            ax.legend(loc="upper left", fontsize=7)
            fig.tight_layout()
            path = folder / f"reliability_{name}_{kind}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written
