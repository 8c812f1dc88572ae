"""Render the autopilot benchmark's runs into results.json, results.md and plots (shares along the stream)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.autopilot.tasks import DRIFT_TASKS, MAIN_TASKS, TASKS

NAMES = {
    "always_teacher": "always teacher",
    "gate_no_learning": "gate, no learning",
    "teach_once": "learn once (500)",
    "online_cascade": "online cascade",
    "autopilot": "autopilot",
}


def _mean(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}"


def aggregate(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["task"], row["teacher"], row["method"])].append(row["summary"])
    out = {}
    for key, runs in groups.items():
        out[key] = {
            "seeds": len(runs),
            "teacher_share": _mean([r["teacher_share"] for r in runs]),
            "teacher_share_range": [min(r["teacher_share"] for r in runs), max(r["teacher_share"] for r in runs)],
            "teacher_share_last": _mean([r["teacher_share_last"] for r in runs]),
            "accuracy": _mean([r["accuracy"] for r in runs]),
            "teacher_accuracy": _mean([r["teacher_accuracy"] for r in runs]),
            "automatic_agreement": _mean([r["automatic_agreement"] for r in runs]),
            "missed_target_runs": sum(bool(r["missed_target"]) for r in runs),
            "window_agreement_min": min(
                (r["window_agreement_min"] for r in runs if r["window_agreement_min"] is not None), default=None
            ),
            "windows_below_92": sum(r["windows_below_92"] for r in runs),
            "windows_below_90": sum(r["windows_below_90"] for r in runs),
            "first_automatic_item": _mean([r["first_automatic_item"] for r in runs]),
            "hindsight_share_last": _mean([r.get("hindsight_share_last") for r in runs]),
            "retrain_seconds_max": max((r["retrain_seconds_max"] or 0 for r in runs), default=None),
            "withdrawn_at": [r.get("withdrawn_at") for r in runs],
            "certified_at_item": [r.get("certified_at_item") for r in runs],
        }
    return out


def write_report(
    rows: list[dict[str, Any]], out: Path, wall_seconds: float, command: str, report_only: bool = False
) -> None:
    agg = aggregate(rows)
    (out / "results.json").write_text(
        json.dumps(
            {
                "command": command,
                "wall_seconds": round(wall_seconds),
                "aggregate": {"|".join(k): v for k, v in sorted(agg.items())},
                "runs": [{k: v for k, v in r.items() if k != "curves"} for r in rows],
            },
            indent=1,
        )
        + "\n"
    )
    lines = [
        "# Autopilot benchmark",
        "",
        (
            f"Rows: `runs.jsonl`, written by the commands in `bench/autopilot/README.md`; this page: `{command}`. "
            if report_only
            else f"Command: `{command}` ({wall_seconds / 60:.0f} min of this run on 2 cores). "
        )
        + "Streams, questions and teachers: `bench/autopilot/tasks.py` (frozen before the first run), "
        "methods: `bench/autopilot/run.py`. Target: automatic answers agree with the teacher at 95 % with 90 % "
        "confidence. Shares and accuracies are means over seeds (orders), in percent.",
        "",
    ]
    for teacher in ("perfect", "noisy"):
        tasks = [t for t in TASKS if any(k[0] == t and k[1] == teacher for k in agg)]
        if not tasks:
            continue
        lines += [
            f"## Teacher: {teacher}",
            "",
            "| task | method | seeds | teacher calls | last 1,000 | hindsight last 1,000 | accuracy vs gold | "
            "automatic agreement | runs below 95 % | min 500-window | first automatic item | max retrain s |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for task in tasks:
            for method in NAMES:
                a = agg.get((task, teacher, method))
                if a is None:
                    continue
                lines.append(
                    f"| {task} | {NAMES[method]} | {a['seeds']} | {_pct(a['teacher_share'])} | {_pct(a['teacher_share_last'])} "
                    f"| {_pct(a['hindsight_share_last'])} | {_pct(a['accuracy'])} | {_pct(a['automatic_agreement'])} | "
                    f"{a['missed_target_runs']} | {_pct(a['window_agreement_min'])} | "
                    f"{'—' if a['first_automatic_item'] is None else round(a['first_automatic_item'])} | "
                    f"{'—' if not a['retrain_seconds_max'] else round(a['retrain_seconds_max'], 1)} |"
                )
        lines.append("")
    lines += targets(agg)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot(rows, out)


def targets(agg: dict[tuple[str, str, str], dict[str, Any]]) -> list[str]:
    lines = [
        "## Against the issue's targets (perfect teacher unless said)",
        "",
        "| task | autopilot / online cascade, teacher calls | accuracy: autopilot − always teacher (points) | "
        "last 1,000 − hindsight (audit share included) (points) |",
        "|---|---:|---:|---:|",
    ]
    for task in TASKS:
        ours, base = agg.get((task, "perfect", "autopilot")), agg.get((task, "perfect", "online_cascade"))
        always = agg.get((task, "perfect", "always_teacher"))
        if not (ours and base and always):
            continue
        ratio = ours["teacher_share"] / base["teacher_share"] if base["teacher_share"] else float("nan")
        gap = (
            None if ours["hindsight_share_last"] is None else ours["teacher_share_last"] - ours["hindsight_share_last"]
        )
        lines.append(
            f"| {task} | {ratio:.2f} | {100 * (ours['accuracy'] - always['accuracy']):+.1f} | "
            f"{'—' if gap is None else f'{100 * gap:+.1f}'} |"
        )
    runs = [a for k, a in agg.items() if k[2] == "autopilot" and k[1] == "perfect"]
    total = sum(a["seeds"] for a in runs)
    missed = sum(a["missed_target_runs"] for a in runs)
    lines += [
        "",
        f"Autopilot runs whose whole-stream automatic agreement fell below 95 %: {missed} of {total} "
        f"({100 * missed / max(total, 1):.0f} %); 500-item windows below 92 %: "
        f"{sum(a['windows_below_92'] for a in runs)}.",
        "",
    ]
    noisy = [(t, agg.get((t, "noisy", "autopilot"))) for t in MAIN_TASKS]
    noisy = [(t, a) for t, a in noisy if a]
    if noisy:
        lines.append(
            "Noisy teacher, autopilot accuracy vs gold minus the teacher's own: "
            + ", ".join(f"{t} {100 * (a['accuracy'] - a['teacher_accuracy']):+.1f}" for t, a in noisy)
            + " points."
        )
        lines.append("")
    for task in DRIFT_TASKS:
        drift = agg.get((task, "perfect", "autopilot"))
        if drift:
            lines += [drift_line(task, drift), ""]
    return lines


def drift_line(task: str, drift: dict[str, Any]) -> str:
    """Per seed: certified before the change?, items from the change to the withdrawal, the item where the
    question was certified again."""
    at = TASKS[task].drift_at
    seeds = []
    for withdrawn, certified in zip(drift["withdrawn_at"], drift["certified_at_item"]):
        before = any(c < at for c in certified or [])
        after_change = [w for w in withdrawn or [] if w >= at]
        if not before:
            seeds.append("not certified before the change")
            continue
        if not after_change:
            seeds.append("certified before, never withdrawn")
            continue
        again = [c for c in certified if c > after_change[0]]
        seeds.append(
            f"withdrawn {after_change[0] - at} items after the change, "
            + (f"certified again at item {again[0]}" if again else "not certified again")
        )
    return (
        f"Drift, {task} (source changes at item {at}): "
        + "; ".join(f"order {k}: {text}" for k, text in enumerate(seeds))
        + f". Min 500-window agreement {_pct(drift['window_agreement_min'])} %; "
        f"windows below 90 %: {drift['windows_below_90']}."
    )


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in rows)]
    if not tasks:
        return
    for metric, ylabel, name in (
        ("teacher_share", "teacher-call share", "teacher_share.png"),
        ("automatic_agreement", "automatic agreement with teacher", "agreement.png"),
    ):
        cols = 3
        fig, axes = plt.subplots(
            (len(tasks) + cols - 1) // cols, cols, figsize=(13, 3.2 * ((len(tasks) + cols - 1) // cols)), squeeze=False
        )
        for ax, task in zip(axes.flat, tasks):
            for method, style in (
                ("autopilot", "-"),
                ("online_cascade", "--"),
                ("teach_once", ":"),
                ("gate_no_learning", "-."),
            ):
                curves = [
                    r["curves"][metric]
                    for r in rows
                    if r["task"] == task and r["method"] == method and r["teacher"] == "perfect"
                ]
                if not curves:
                    continue
                arr = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
                with np.errstate(all="ignore"):
                    mean = np.nanmean(arr, axis=0)
                ax.plot(np.arange(len(mean)) * 100, mean, style, label=NAMES[method])
            if metric == "automatic_agreement":
                ax.axhline(0.95, color="grey", lw=0.8)
                ax.set_ylim(0.7, 1.0)
            else:
                ax.set_ylim(0, 1.05)
            ax.set_title(task)
            ax.set_xlabel("item")
            ax.set_ylabel(ylabel)
        for ax in list(axes.flat)[len(tasks) :]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
