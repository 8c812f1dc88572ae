"""Cost / quality curves over act thresholds, as JSON rows and PNG figures.

For each candidate act threshold ``t`` (quantiles of the calibration scores, high to low), a row
holds the automatic share, the realised automatic error, its one-sided Clopper–Pearson upper
bound at the fit's confidence (pointwise, not simultaneous), the LLM and human shares with the
fitted human threshold (clipped to ``t``), and the expected cost per 1,000 decisions.

Example:
    >>> import numpy as np
    >>> s = np.linspace(0.5, 1, 200)
    >>> rows = threshold_curve(s, s > 0.6, human_below=0.0, costs=Costs(), confidence=0.9, points=5)
    >>> [r["auto_share"] for r in rows][:2]
    [0.2, 0.4]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from clef_agents.thresholds.fit import Costs, LaneFit, lane_shares
from clef_agents.thresholds.records import DecisionSample
from clef_agents.thresholds.stats import clopper_pearson_upper


def threshold_curve(
    scores: np.ndarray, correct: np.ndarray, *, human_below: float, costs: Costs, confidence: float, points: int = 100
) -> list[dict[str, float]]:
    """Rows of (threshold, shares, automatic error and its upper bound, cost per 1,000)."""
    scores = np.asarray(scores, dtype=float)
    correct = np.asarray(correct, dtype=bool)
    if len(scores) == 0:
        return []
    ordered = np.sort(scores)[::-1]
    rows: list[dict[str, float]] = []
    seen: set[float] = set()
    for share in np.linspace(1.0 / points, 1.0, points):
        t = float(ordered[int(np.ceil(share * len(ordered))) - 1])
        if t in seen:
            continue
        seen.add(t)
        shares = lane_shares(scores, correct, t, min(human_below, t))
        accepted = int((scores >= t).sum())
        errors = int((~correct[scores >= t]).sum())
        rows.append(
            {
                "threshold": round(t, 6),
                "auto_share": shares.auto,
                "auto_error": shares.auto_error,
                "auto_error_upper": round(clopper_pearson_upper(errors, accepted, confidence), 6),
                "llm_share": shares.llm,
                "human_share": shares.human,
                "cost_per_1000": costs.per_1000(shares),
            }
        )
    return rows


def lane_curves(
    samples: dict[str, DecisionSample], lane_fit: LaneFit, costs: Costs, points: int = 100
) -> dict[str, Any]:
    """One curve per question (pooled), with the fitted band marked, ready to dump as JSON."""
    confidence = lane_fit.report["confidence"]
    out: dict[str, Any] = {}
    for qid, sample in samples.items():
        band = lane_fit.policy.band(qid)
        out[qid] = {
            "auto_at": band.auto_at,
            "human_below": band.human_below,
            "target": lane_fit.report["max_auto_error"],
            "fitted": lane_fit.report["questions"][qid],
            "rows": threshold_curve(
                sample.scores,
                sample.correct,
                human_below=band.human_below,
                costs=costs,
                confidence=confidence,
                points=points,
            ),
        }
    return out


def plot_curve(curve: dict[str, Any], title: str, path: str | Path) -> Path:
    """Two panels: automatic share vs automatic error; cost per 1,000 vs automatic error."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = curve["rows"]
    error = [100 * r["auto_error"] for r in rows]
    upper = [100 * r["auto_error_upper"] for r in rows]
    share = [100 * r["auto_share"] for r in rows]
    cost = [r["cost_per_1000"] for r in rows]
    fitted = curve["fitted"]
    target = 100 * curve["target"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(error, share, label="realised (calibration)")
    left.plot(upper, share, linestyle="--", label="upper bound (pointwise)")
    left.axvline(target, color="grey", linestyle=":", label=f"target {target:g}%")
    left.scatter(
        [100 * fitted["calibration_error"]],
        [100 * fitted["coverage"]],
        color="red",
        zorder=3,
        label=f"fitted act ≥ {curve['auto_at']:.4g}",
    )
    left.set_xlabel("automatic error (%)")
    left.set_ylabel("decided automatically (%)")
    left.legend(fontsize=8)
    right.plot(error, cost)
    right.axvline(target, color="grey", linestyle=":")
    right.scatter([100 * fitted["calibration_error"]], [fitted["cost_per_1000"]], color="red", zorder=3)
    right.set_xlabel("automatic error (%)")
    right.set_ylabel("expected cost per 1,000 decisions")
    right.set_title(f"auto / LLM / human (human below {curve['human_below']:.3g})", fontsize=9)
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(
    lane_fit: LaneFit, samples: dict[str, DecisionSample], costs: Costs, report_dir: str | Path, plots: bool = True
) -> list[Path]:
    """Write ``report.json``, ``curves.json`` and one ``curves_<question>.png`` per question."""
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    curves = lane_curves(samples, lane_fit, costs)
    written = [report_dir / "report.json", report_dir / "curves.json"]
    written[0].write_text(json.dumps(lane_fit.report, indent=2) + "\n")
    written[1].write_text(json.dumps(curves, indent=2) + "\n")
    if plots:
        for qid, curve in curves.items():
            safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in qid)
            written.append(plot_curve(curve, f"question {qid!r}", report_dir / f"curves_{safe}.png"))
    return written
